// Pieces every `spattn` subcommand shares: the attention problem it runs on (generated
// workload or a --qkv file), a progress line for long runs, and the subcommand registry.
#pragma once
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <string>

#include "spattn/attention.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cli {

// Subcommands: each adds itself to the root app and runs from its CLI11 callback, so its
// errors propagate out of app.parse() to the one handler in main.
void add_bench_command(CLI::App& root);
void add_mask_command(CLI::App& root);
void add_calibrate_command(CLI::App& root);
void add_make_model_command(CLI::App& root);
void add_tokenize_command(CLI::App& root);
void add_search_command(CLI::App& root);
void add_select_diag_command(CLI::App& root);
void add_serve_command(CLI::App& root);
void add_h2o_report_command(CLI::App& root);
void add_bench_products_command(CLI::App& root);
void add_eval_command(CLI::App& root);

// What attention problem to run: flags shared by bench, mask and later calibrate.
struct ProblemOptions {
  std::string workload = "text";
  std::string qkv;  // a file or prefix for load_qkv; replaces the generated workload
  std::string layout = "hsd";
  std::string modality;       // --modality: per-token ids for --qkv (.npy or .safetensors)
  int64_t frame_tokens = -1;  // --frame-tokens: -1 unset (generator default / file metadata)
  int64_t seq = 16384, heads = 2, kv_heads = 0, dim = 128;
  int64_t q_len = 0;  // queries: the last q_len positions (0: all, prefill)
  std::string dtype;  // empty: f32 for workloads, as stored for --qkv
  uint64_t seed = 0;
  bool causal = true;
  int threads = 0;
};
void add_problem_options(CLI::App& app, ProblemOptions& o);

// opt.modality is always set: the workload's layout, the --modality file's (validated against
// the keys), or all text for a --qkv dump given none.
struct Problem {
  Tensor q, k, v;
  AttnOptions opt;
  std::string source;  // "text workload" or the --qkv path
};
// Generates or loads q, k, v; throws Error for bad sizes, dtypes, layouts and files.
Problem load_problem(const ProblemOptions& o);

// A status line on stderr that appears only once a command has run for `delay` seconds, so
// short runs stay silent. On a terminal it rewrites one line; otherwise it prints plain
// lines, at most one per `delay`, so logs do not fill up.
class Progress {
 public:
  explicit Progress(std::string tag, double delay_s = 2.0);
  ~Progress() { done(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void update(const std::string& status);
  void done();  // clears the terminal line, if one was drawn

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_, last_print_;
  std::string tag_;
  double delay_s_;
  bool tty_;
  bool drawn_ = false;
};

}  // namespace spattn::cli
