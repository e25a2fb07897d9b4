// Methods: a named way of computing attention ("dense", "blasst", later "momo", ...),
// built from a spec string "name:key=value,key=value" as on the command line.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/report.hpp"

namespace spattn {

struct MethodSpec {
  std::string name;
  std::map<std::string, std::string> params;
  std::string text;  // as written
};
// Throws Error on empty names, missing '=', empty keys or repeated keys.
MethodSpec parse_method_spec(std::string_view text);

// A token count a spec may write as `frame`: the tokens per frame of the run's modality layout
// (AttnOptions::modality), known only when the method runs (MMInference Table 2 sets the SF
// baselines' local = vline_stride = tokens per frame).
struct TokenCount {
  int64_t tokens = 0;
  bool per_frame = false;
  // The count for this run; throws Error naming method and key when it is `frame` and the run
  // has no frame size.
  int64_t resolve(const AttnOptions& opt, const std::string& method, const std::string& key) const;
};

// Reads a spec's parameters; finish() throws Error naming any key nobody read.
class ParamReader {
 public:
  explicit ParamReader(const MethodSpec& spec) : spec_(spec) {}
  double get_double(const std::string& key, double def, double lo, double hi);
  int64_t get_int(const std::string& key, int64_t def, int64_t lo, int64_t hi);
  // An integer in [lo, hi], or the word `frame`.
  TokenCount get_tokens(const std::string& key, int64_t def, int64_t lo, int64_t hi);
  std::string get_string(const std::string& key, const std::string& def);
  bool has(const std::string& key) const { return spec_.params.count(key) != 0; }
  void finish() const;

 private:
  const MethodSpec& spec_;
  std::vector<std::string> used_;
};

// A method is made once from its spec and then only read: run() is const and keeps nothing
// from one run to the next, so one Method may serve many runs, from several threads at once.
// Everything a run did comes back in its MethodReport.
//
// Plan-like work (what FlashInfer splits into plan() before run()) happens where it is known:
// what depends on the spec alone when the method is made (BLASST reads its calibration file in
// make_method, not per run); what depends on the inputs inside run(), so that timing run()
// times the estimate too (mean pooling, vertical-slash's last-64-query estimate).
//
// One API on either device: run() on tensors in CUDA device memory (spattn/cuda.hpp) takes the
// method's GPU path, run_cuda(), and on host memory run_host(). A method without a GPU path
// throws Error saying so.
class Method {
 public:
  virtual ~Method() = default;
  virtual std::string name() const = 0;
  // Computes out (and lse when non-null, [Hq, Lq], on the same device as out) and reports what
  // it did.
  MethodReport run(const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& out, const AttnOptions& opt, float* lse = nullptr) const;

 protected:
  virtual MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& out, const AttnOptions& opt,
                                float* lse) const = 0;
  // Default: Error, "<name>: no GPU path yet".
  virtual MethodReport run_cuda(const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& out, const AttnOptions& opt, float* lse) const;
};

// What `spattn bench` needs to know about a method before running it.
struct MethodInfo {
  std::string name;
  // The spec a default comparison runs: the paper's defaults, plus a threshold where the
  // method has no default (blasst).
  std::string default_spec;
  // Computes more than dense attention to decide what to compute (oracle_topk): its time is
  // no speed claim, only its recall and error mean something.
  bool evaluation_only = false;
  // Defined by causal positions: throws Error on non-causal attention.
  bool causal_only = false;
  // The parameter that sets how many key blocks a query block keeps (topk, k_trim), empty
  // where there is none: the count twin a `topp` budget is compared with at equal density.
  std::string count_param;
  // In a model runner (spattn run, perplexity, serve, eval): whether `--attn SPEC` runs it over
  // a prompt (false: a decode only, quest), whether `--attn-decode SPEC` decodes with it, and
  // whether each runs across the ranks of a context-parallel group (--cp P).
  bool prefills = true;
  bool decodes = false;
  bool context_parallel = false;
  bool decode_context_parallel = false;
};

// Throws Error for unknown names (listing the known ones) and unknown or bad parameters.
std::unique_ptr<Method> make_method(const MethodSpec& spec);
std::unique_ptr<Method> make_method(std::string_view text);
// The methods of the default comparison (`spattn bench`), and their infos in that order; the
// registry's other methods (grid, mminference, quest) are asked for by name.
std::vector<std::string> method_names();
std::vector<MethodInfo> method_catalog();
// Any method the registry knows; Error listing the known ones for another name.
MethodInfo method_info(std::string_view name);

}  // namespace spattn
