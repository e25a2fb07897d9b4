// Methods: a named way of computing attention ("dense", later "blasst", "momo", ...),
// built from a spec string "name:key=value,key=value" as on the command line.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/coverage.hpp"

namespace spattn {

struct MethodSpec {
  std::string name;
  std::map<std::string, std::string> params;
  std::string text;  // as written
};
// Throws Error on empty names, missing '=', empty keys or repeated keys.
MethodSpec parse_method_spec(std::string_view text);

// Reads a spec's parameters; finish() throws Error naming any key nobody read.
class ParamReader {
 public:
  explicit ParamReader(const MethodSpec& spec) : spec_(spec) {}
  double get_double(const std::string& key, double def, double lo, double hi);
  int64_t get_int(const std::string& key, int64_t def, int64_t lo, int64_t hi);
  std::string get_string(const std::string& key, const std::string& def);
  bool has(const std::string& key) const { return spec_.params.count(key) != 0; }
  void finish() const;

 private:
  const MethodSpec& spec_;
  std::vector<std::string> used_;
};

class Method {
 public:
  virtual ~Method() = default;
  virtual std::string name() const = 0;
  // Computes out (and lse when non-null, [Hq, Lq]); adds what it did to stats.
  virtual void run(const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& out, const AttnOptions& opt, float* lse, Stats* stats) = 0;
  // The entries the last run computed, for recall. Default: every causal entry.
  virtual std::unique_ptr<Coverage> coverage(int64_t q_len, int64_t kv_len,
                                             bool causal) const {
    return std::make_unique<FullCoverage>(q_len, kv_len, causal);
  }
  // The block mask the last run used, for methods that build one (pictures, tests); else null.
  virtual const BlockMask* last_mask() const { return nullptr; }
};

// Throws Error for unknown names (listing the known ones) and unknown or bad parameters.
std::unique_ptr<Method> make_method(const MethodSpec& spec);
std::unique_ptr<Method> make_method(std::string_view text);
std::vector<std::string> method_names();

}  // namespace spattn
