// The attention problem a subcommand runs on: a seeded generated workload or q, k, v from a
// file. Every name (workload, dtype, layout) is parsed before any data is made, so a typo
// fails at once rather than after seconds of generation.
#include <utility>

#include "cli.hpp"
#include "core/threading.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"
#include "spattn/modality.hpp"
#include "spattn/workload.hpp"

namespace spattn::cli {

void add_problem_options(CLI::App& app, ProblemOptions& o) {
  auto* workload =
      app.add_option("--workload", o.workload, "generated workload: random, text, video, mixed")
          ->capture_default_str();
  auto* qkv = app.add_option("--qkv", o.qkv,
                             "read q, k, v from a .safetensors file, or q.npy/k.npy/v.npy "
                             "under a directory or prefix, instead of generating them");
  app.add_option("--layout", o.layout, "axis order of --qkv arrays: hsd or shd")
      ->capture_default_str()
      ->needs(qkv);
  app.add_option("--modality", o.modality,
                 "per-token modality ids for --qkv (0 text, 1 vision, 2 audio, ...): a .npy int "
                 "array, or a .safetensors file with an int tensor 'modality' (default: all text)")
      ->needs(qkv);
  app.add_option("--frame-tokens", o.frame_tokens,
                 "tokens per video frame: the video/mixed workloads' frame size, or the frame "
                 "size of --modality's vision runs (default: the generator's 256, or the "
                 "safetensors metadata 'frame_tokens')");
  auto* seq = app.add_option("--seq", o.seq, "sequence length")->capture_default_str();
  auto* heads = app.add_option("--heads", o.heads, "query heads")->capture_default_str();
  auto* kv_heads = app.add_option("--kv-heads", o.kv_heads, "key/value heads (0: same as --heads)")
                       ->capture_default_str();
  auto* dim = app.add_option("--dim", o.dim, "head dimension")->capture_default_str();
  auto* seed = app.add_option("--seed", o.seed, "workload seed")->capture_default_str();
  // A file fixes its own shapes and contents: generator flags next to --qkv are a mistake.
  for (auto* gen : {workload, seq, heads, kv_heads, dim, seed}) qkv->excludes(gen);
  app.add_option("--dtype", o.dtype,
                 "storage dtype: f32, bf16, f16 (default: f32, or as stored in --qkv)");
  app.add_flag("--causal,!--no-causal", o.causal, "causal attention (default) or full");
  app.add_option("--threads", o.threads, "worker threads (0: all)")->capture_default_str();
}

namespace {

// Bounds that keep every size product (elements, causal entries) far from int64 overflow;
// real limits (memory, the kernel's head-dim rule) are checked where they apply.
void check_sizes(const ProblemOptions& o) {
  SPATTN_CHECK(o.seq > 0 && o.seq <= (int64_t(1) << 30), "--seq must be in [1, 2^30], got ", o.seq);
  SPATTN_CHECK(o.heads > 0 && o.heads <= 4096, "--heads must be in [1, 4096], got ", o.heads);
  SPATTN_CHECK(o.kv_heads >= 0 && o.kv_heads <= o.heads,
               "--kv-heads must be in [0, --heads] (0: same as --heads), got ", o.kv_heads);
  SPATTN_CHECK(o.kv_heads == 0 || o.heads % o.kv_heads == 0, "--heads (", o.heads,
               ") must be a multiple of --kv-heads (", o.kv_heads, ")");
  SPATTN_CHECK(o.dim > 0 && o.dim <= 1024, "--dim must be in [1, 1024], got ", o.dim);
  SPATTN_CHECK(o.q_len >= 0 && o.q_len <= o.seq, "--q-len must be in [0, --seq] (0: all), got ",
               o.q_len);
}

void generate(const ProblemOptions& o, DType dtype, Problem& p) {
  check_sizes(o);
  WorkloadConfig cfg;
  cfg.kind = parse_workload_kind(o.workload);
  cfg.seq = o.seq;
  cfg.q_len = o.q_len;
  cfg.heads = o.heads;
  cfg.kv_heads = o.kv_heads;
  cfg.dim = o.dim;
  cfg.dtype = dtype;
  cfg.seed = o.seed;
  SPATTN_CHECK(o.frame_tokens >= -1, "--frame-tokens must be >= 0, got ", o.frame_tokens);
  SPATTN_CHECK(
      o.frame_tokens < 0 || cfg.kind == WorkloadKind::video || cfg.kind == WorkloadKind::mixed,
      "--frame-tokens applies to the video and mixed workloads (or to --modality), not to ",
      workload_kind_name(cfg.kind));
  if (o.frame_tokens > 0) cfg.frame_tokens = o.frame_tokens;
  Workload w = make_workload(cfg);
  p.q = std::move(w.q);
  p.k = std::move(w.k);
  p.v = std::move(w.v);
  p.opt.modality = std::make_shared<const ModalityLayout>(std::move(w.layout));
  p.source = std::string(workload_kind_name(cfg.kind)) + " workload";
}

Tensor converted(Tensor t, DType dtype) {
  return t.dtype() == dtype ? std::move(t) : Tensor::copy_of(t.view(), dtype);
}

void load_file(const ProblemOptions& o, const DType* dtype, Problem& p) {
  QKV x = load_qkv(o.qkv, parse_layout(o.layout));
  p.q = dtype ? converted(std::move(x.q), *dtype) : std::move(x.q);
  p.k = dtype ? converted(std::move(x.k), *dtype) : std::move(x.k);
  p.v = dtype ? converted(std::move(x.v), *dtype) : std::move(x.v);
  SPATTN_CHECK(o.q_len >= 0, "--q-len must be >= 0 (0: all), got ", o.q_len);
  if (o.q_len > 0) {
    // A dump holds prefill queries: the last q_len rows are the decode-like queries.
    SPATTN_CHECK(o.q_len <= p.q.seq(), "--q-len (", o.q_len, ") exceeds the file's ", p.q.seq(),
                 " query rows");
    p.q = Tensor::copy_of(p.q.view().rows(p.q.seq() - o.q_len, o.q_len));
  }
  SPATTN_CHECK(o.frame_tokens < 0 || !o.modality.empty(),
               "--frame-tokens with --qkv needs --modality (the frame size of its vision runs)");
  ModalityLayout m =
      o.modality.empty() ? uniform_modality(p.k.seq()) : load_modality(o.modality, o.frame_tokens);
  try {
    m.validate(p.k.seq());
  } catch (const Error& e) {
    detail::fail("--modality ", o.modality, ": ", e.what());
  }
  p.opt.modality = std::make_shared<const ModalityLayout>(std::move(m));
  p.source = o.qkv;
}

}  // namespace

Problem load_problem(const ProblemOptions& o) {
  Problem p;
  p.opt.causal = o.causal;
  p.opt.threads = resolve_threads(o.threads);
  const bool dtype_given = !o.dtype.empty();
  const DType dtype = dtype_given ? parse_dtype(o.dtype) : DType::f32;
  if (o.qkv.empty()) {
    generate(o, dtype, p);
  } else {
    load_file(o, dtype_given ? &dtype : nullptr, p);
  }
  return p;
}

}  // namespace spattn::cli
