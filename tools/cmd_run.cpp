// `spattn run`: llama-cli's one-shot generation. Loads a GGUF model, tokenizes the prompt (BOS
// as the vocabulary says), prefills it with the chosen attention (-b / -ub chunks; --attn
// chunked_h2o for the two-phase sparse prefill), then decodes -n tokens (--attn-decode: dense,
// quest or blasst), greedy at --temp 0 or sampled at temperature T with --seed. The prompt and the generated
// text go to stdout; load time, prompt tokens, TTFT, prefill and decode rates and the
// attention share of prefill go to stderr (or all of it as one JSON object with --json).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "eval/bench_parts.hpp"
#include "run_chat.hpp"
#include "runner.hpp"
#include "sampler.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/h2o_trace.hpp"
#include "spattn/io.hpp"

namespace spattn::cli {
namespace {

struct RunOptions {
  RunnerOptions r;
  std::string prompt, file;
  int64_t n_predict = 64;
  int64_t max_prompt = 0;  // keep only the first N prompt tokens (0: all)
  double temp = 0.0;
  uint64_t seed = 42;
  int64_t dump_layer = -1;  // model::Session::kTapAllLayers with dump_all
  bool dump_all = false;    // --dump-qkv all DIR: every layer, as DIR/layerN/
  std::string dump_dir;
  std::string h2o_trace_dir;  // --h2o-trace DIR: chunked_h2o's memory sets, DIR/layerN.h2o
  bool warmup = false;        // one untimed prefill and decode step first, as llama-bench does
  bool ignore_eos = false;
  bool chat = false;  // --chat / -cnv: run_chat.hpp
  bool n_predict_given = false;
  ChatOptions c;
};

// Post-RoPE q, k, v of one layer over the whole prompt, gathered chunk by chunk, written as
// q.npy, k.npy, v.npy ([heads, seq, dim] f32) under a directory: what `spattn bench --qkv` reads.
struct QkvDump {
  Tensor q, k, v;
  void take(int64_t pos0, int64_t n, const float* qs, const float* ks, const float* vs) {
    auto put = [&](Tensor& t, const float* src) {
      const TensorView dst = t.view().rows(pos0, n);
      copy_into(TensorView::shd(const_cast<float*>(src), DType::f32, t.heads(), n, t.dim()), dst);
    };
    put(q, qs);
    put(k, ks);
    put(v, vs);
  }
};

void run_one(const RunOptions& o, const std::shared_ptr<dist::Group>& grp);

void run(const RunOptions& o) {
  const std::shared_ptr<dist::Group> grp = cp_group(o.r);
  with_cp(grp.get(), [&] { run_one(o, grp); });
}

void run_one(const RunOptions& o, const std::shared_ptr<dist::Group>& grp) {
  if (grp) {
    SPATTN_CHECK(!o.chat, "--cp: --chat is not context-parallel");
    SPATTN_CHECK(o.dump_layer < 0 && !o.dump_all, "--cp: --dump-qkv is not context-parallel");
    SPATTN_CHECK(o.h2o_trace_dir.empty(), "--cp: --h2o-trace is not context-parallel");
  }
  // Under --cp only rank 0 prints; every rank computes the same tokens.
  const bool quiet = grp && grp->rank() != 0;
  if (o.chat) {
    ChatOptions c = o.c;
    c.sampling.temperature = o.temp;
    c.sampling.seed = o.seed;
    c.n_predict = o.n_predict_given ? o.n_predict : -1;
    run_chat(o.r, c);
    return;
  }
  model::SessionOptions so = session_options(o.r, o.r.attn);
  so.cp = grp;
  on_every_rank(grp.get(), "checking the options", [&] { so.validate(); });
  SPATTN_CHECK(o.n_predict >= 0, "-n must be >= 0, got ", o.n_predict);
  SPATTN_CHECK(std::isfinite(o.temp) && o.temp >= 0, "--temp must be >= 0, got ", o.temp);
  SamplingParams sp;
  sp.temperature = o.temp;
  sp.seed = o.seed;
  std::string text;
  if (!grp) text = read_prompt(o.prompt, o.file);
  const bool dumping = o.dump_all || o.dump_layer >= 0;
  if (dumping) {
    std::error_code ec;
    SPATTN_CHECK(std::filesystem::is_directory(o.dump_dir, ec), "--dump-qkv: '", o.dump_dir,
                 "' is not a directory");
  }
  if (!o.h2o_trace_dir.empty()) {
    std::error_code ec;
    SPATTN_CHECK(parse_method_spec(so.attn).name == "chunked_h2o",
                 "--h2o-trace needs --attn chunked_h2o");
    SPATTN_CHECK(std::filesystem::is_directory(o.h2o_trace_dir, ec), "--h2o-trace: '",
                 o.h2o_trace_dir, "' is not a directory");
  }
  LoadedModel lm = load_runner_model(o.r, grp.get());
  const model::Config& cfg = lm.model.config();
  // What ran, for the reports: --attn / --attn-decode's auto as the model resolves it.
  const std::string attn = model::model_attention(o.r.attn, cfg),
                    attn_decode = model::model_attention(o.r.attn_decode, cfg);
  std::vector<int32_t> prompt;
  const auto tokenize = [&] {
    if (grp) text = read_prompt(o.prompt, o.file);
    prompt = lm.tokenizer.encode(text);
    SPATTN_CHECK(o.max_prompt >= 0, "--max-prompt must be >= 0, got ", o.max_prompt);
    if (o.max_prompt > 0 && int64_t(prompt.size()) > o.max_prompt)
      prompt.resize(size_t(o.max_prompt));
    SPATTN_CHECK(!prompt.empty(), "the prompt has no tokens");
    SPATTN_CHECK(int64_t(prompt.size()) + o.n_predict <= so.n_ctx, "prompt (", prompt.size(),
                 " tokens) plus -n ", o.n_predict, " exceeds the context -c ", so.n_ctx);
  };
  on_every_rank(grp.get(), "reading the prompt", tokenize);
  model::Session s(lm.model, so);
  std::vector<QkvDump> dumps;  // one per dumped layer (every layer with dump_all)
  if (dumping) {
    const int64_t n = int64_t(prompt.size());
    const model::Session::AttentionShape a = s.attention_shape();  // the cache's heads
    for (int64_t l = 0; l < (o.dump_all ? cfg.n_layer : 1); ++l)
      dumps.push_back({Tensor(DType::f32, a.q_heads, n, a.dim),
                       Tensor(DType::f32, a.kv_heads, n, a.dim),
                       Tensor(DType::f32, a.kv_heads, n, a.dim)});
    s.set_qkv_tap(
        o.dump_all ? model::Session::kTapAllLayers : o.dump_layer,
        [&](int64_t layer, int64_t pos0, int64_t n_rows, const float* q, const float* k,
            const float* v) { dumps[size_t(o.dump_all ? layer : 0)].take(pos0, n_rows, q, k, v); });
  }
  if (!o.r.json && !quiet) {
    fmt::print("{}", o.max_prompt > 0 ? lm.tokenizer.decode(prompt) : text);
    std::fflush(stdout);
  }
  using Clock = std::chrono::steady_clock;
  std::vector<float> logits(size_t(cfg.n_vocab));
  Sampler sampler(sp);
  if (o.warmup) {
    // The weights' pages, the caches and the thread pool warm, as llama-bench's warm-up run
    // leaves them; the timed run then starts from an empty cache.
    s.prefill(prompt, logits.data(), int64_t(prompt.size()) - 1);
    if (o.n_predict > 1) s.decode(sampler.sample(logits), logits.data());
    s.reset();
    s.reset_timings();
    sampler.reseed(o.seed);
  }
  std::vector<ChunkedH2OTrace> traces;  // per layer, the timed prefill's only
  if (!o.h2o_trace_dir.empty()) {
    SPATTN_CHECK(int64_t(prompt.size()) > so.n_ubatch, "--h2o-trace: the prompt's ", prompt.size(),
                 " tokens fit one chunk (-ub ", so.n_ubatch,
                 "), so chunked_h2o builds no memory set");
    s.set_h2o_traces(&traces);
  }
  const auto t0 = Clock::now();
  s.prefill(prompt, logits.data(), int64_t(prompt.size()) - 1);
  if (!o.h2o_trace_dir.empty()) {
    s.set_h2o_traces(nullptr);
    ChunkedH2OParams hp;
    hp.chunk = so.n_ubatch, hp.batch = so.n_batch, hp.local = so.h2o_local, hp.heavy = so.h2o_heavy;
    std::vector<H2OTraceLayer> layers;
    for (size_t l = 0; l < traces.size(); ++l)
      layers.push_back(
          h2o_trace_layer(traces[l], int64_t(l), cfg.n_head, int64_t(prompt.size()), hp));
    write_h2o_trace(o.h2o_trace_dir, layers);
  }
  std::vector<int32_t> out;
  // Per generated token, its logit above the runner-up's: where two runners' greedy texts
  // part, this says whether the step was a near tie (--json "logit_gaps").
  std::vector<float> gaps;
  auto top2_gap = [&] {
    float a = -INFINITY, b = -INFINITY;
    for (float x : logits) {
      if (x > a)
        b = a, a = x;
      else if (x > b)
        b = x;
    }
    gaps.push_back(a - b);
  };
  double ttft_ms = 0;
  if (o.n_predict > 0) {
    top2_gap();
    out.push_back(sampler.sample(logits));
    ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  for (size_t l = 0; l < dumps.size(); ++l) {
    std::filesystem::path d(o.dump_dir);
    if (o.dump_all) {
      d /= fmt::format("layer{}", l);
      std::filesystem::create_directories(d);
    }
    write_npy((d / "q.npy").string(), dumps[l].q);
    write_npy((d / "k.npy").string(), dumps[l].k);
    write_npy((d / "v.npy").string(), dumps[l].v);
  }
  std::string generated;
  // Where each generated token's text ends in `generated` (bytes): a comparison with another
  // runner's text finds the token where they part (--json "piece_ends").
  std::vector<size_t> piece_ends;
  auto emit = [&](int32_t id) {
    const std::string piece = lm.tokenizer.piece(id, false);
    generated += piece;
    piece_ends.push_back(generated.size());
    if (!o.r.json && !quiet) {
      fmt::print("{}", piece);
      std::fflush(stdout);
    }
  };
  while (!out.empty() && (o.ignore_eos || !lm.tokenizer.is_eog(out.back()))) {
    emit(out.back());
    if (int64_t(out.size()) >= o.n_predict) break;
    s.decode(out.back(), logits.data());
    top2_gap();
    out.push_back(sampler.sample(logits));
  }
  const model::Timings& t = s.timings();
  const double prefill_tps = 1e3 * double(t.prefill_tokens) / t.prefill_ms;
  const double decode_tps = t.decode_tokens ? 1e3 * double(t.decode_tokens) / t.decode_ms : 0;
  const double attn_share = t.prefill_attn_ms / t.prefill_ms;
  nlohmann::json cp;
  if (grp) cp = cp_json(*grp, lm, s);  // every rank takes part
  if (quiet) return;
  if (o.r.json) {
    nlohmann::json j;
    j["model"] = o.r.model;
    j["attn"] = attn;
    j["prompt_tokens"] = prompt.size();
    j["generated_tokens"] = out.size();
    j["text"] = generated;
    j["tokens"] = out;
    j["logit_gaps"] = gaps;
    j["piece_ends"] = piece_ends;
    j["load_ms"] = lm.load_ms;
    j["ttft_ms"] = ttft_ms;
    j["prefill_ms"] = t.prefill_ms;
    j["prefill_tok_s"] = prefill_tps;
    j["prefill_attn_ms"] = t.prefill_attn_ms;
    j["attn_share"] = attn_share;
    j["decode_tokens"] = t.decode_tokens;
    j["decode_ms"] = t.decode_ms;
    j["decode_tok_s"] = decode_tps;
    // Each decoded token's time and its attention's, in order (the first tokens after a prompt
    // carry one-time costs).
    j["decode_token_ms"] = t.decode_token_ms;
    j["decode_token_attn_ms"] = t.decode_token_attn_ms;
    // What decode read: keys (K rows) against the keys visible, over layers and kv heads.
    j["attn_decode"] = attn_decode;
    j["decode_attn_ms"] = t.decode_attn_ms;
    j["decode_keys_read"] = t.decode_keys_read;
    j["decode_keys_total"] = t.decode_keys_total;
    j["decode_pages_read"] = t.decode_pages_read;
    j["decode_pages_total"] = t.decode_pages_total;
    j["decode_select_ms"] = t.decode_select_ms;
    j["decode_tiles_visited"] = t.decode_stats.tiles_visited;
    j["decode_tiles_skipped"] = t.decode_stats.tiles_skipped;
    // Key tiles the prefill visited and skipped (BLASST), this process's; under --cp the
    // group's sums are in cp.
    j["prefill_tiles_visited"] = t.prefill_stats.tiles_visited;
    j["prefill_tiles_skipped"] = t.prefill_stats.tiles_skipped;
    j["score_entries"] = t.prefill_stats.score_entries;
    j["causal_entries"] = t.prefill_stats.causal_entries;
    j["memory"] = memory_json(lm, {&s});
    // Per layer: its kind (a sliding-window layer runs its band whatever --attn says) and its
    // prefill and decode attention times.
    const std::vector<model::LayerAttention> la = s.layer_attention();
    for (size_t l = 0; l < la.size(); ++l) {
      nlohmann::json e = {{"layer", l},
                          {"kind", la[l].sliding ? "sliding" : "global"},
                          {"prefill", la[l].prefill},
                          {"decode", la[l].decode}};
      if (la[l].sliding) e["window"] = la[l].window;
      if (l < t.prefill_layer_attn_ms.size()) e["prefill_attn_ms"] = t.prefill_layer_attn_ms[l];
      if (l < t.decode_layer_attn_ms.size()) e["decode_attn_ms"] = t.decode_layer_attn_ms[l];
      j["layers"].push_back(e);
    }
    if (grp) j["cp"] = cp;
    // The text may end inside a UTF-8 sequence (a byte token): replaced (U+FFFD) rather than
    // thrown at; "tokens" keeps the ids exact.
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  fmt::print("\n");
  fmt::print(
      stderr,
      "\nmodel: {} ({}, {} layers, {} heads / {} kv, head dim {}{})\n"
      "load time      = {:10.2f} ms\n"
      "prompt tokens  = {:10d}   (attention: {}, -b {}, -ub {})\n"
      "TTFT           = {:10.2f} ms\n"
      "prefill        = {:10.2f} ms  {:9.2f} tokens/s\n"
      "  attention    = {:10.2f} ms  ({:.1f}% of prefill; {:.2f}x fewer entries than dense)\n"
      "decode         = {:10.2f} ms  {:9.2f} tokens/s ({} tokens)\n",
      o.r.model, model::arch_name(cfg.arch), cfg.n_layer, cfg.n_head, cfg.n_head_kv, cfg.head_dim,
      cfg.is_moe() ? fmt::format(", {} of {} experts a token", cfg.n_expert_used, cfg.n_expert)
                   : std::string(),
      lm.load_ms, prompt.size(), attn, so.n_batch, so.n_ubatch, ttft_ms, t.prefill_ms, prefill_tps,
      t.prefill_attn_ms, 100 * attn_share,
      double(t.prefill_stats.causal_entries) /
          double(std::max<int64_t>(1, t.prefill_stats.score_entries)),
      t.decode_ms, decode_tps, t.decode_tokens);
  if (t.decode_tokens > 0)
    fmt::print(
        stderr,
        "  attention    = {:10.2f} ms  (--attn-decode {}: {:.1f}% of keys read, {} of {} "
        "tiles skipped)\n",
        t.decode_attn_ms, attn_decode,
        100.0 * double(t.decode_keys_read) / double(std::max<int64_t>(1, t.decode_keys_total)),
        t.decode_stats.tiles_skipped, t.decode_stats.tiles_visited);
  if (t.decode_token_ms.size() >= 2)
    fmt::print(stderr, "  per token    = {:10.2f} ms first, {:.2f} ms the others' median\n",
               t.decode_token_ms.front(),
               bench_parts::median({t.decode_token_ms.begin() + 1, t.decode_token_ms.end()}));
  fmt::print(stderr, "{}\n", memory_line(lm, {&s}));
  if (grp) fmt::print(stderr, "{}\n", cp_line(cp));
}

}  // namespace

void add_run_command(CLI::App& root) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* app = root.add_subcommand("run", "generate text from a prompt with a GGUF model");
  add_runner_options(*app, o->r);
  app->add_option("-p,--prompt", o->prompt, "prompt text");
  app->add_option("-f,--file", o->file, "read the prompt from a file");
  app->add_option_function<int64_t>(
         "-n,--n-predict",
         [o](int64_t n) {
           o->n_predict = n;
           o->n_predict_given = true;
         },
         "tokens to generate (with --chat: per answer; default until end of generation)")
      ->default_str(std::to_string(o->n_predict));
  app->add_flag("--chat", o->chat,
                "-cnv: conversation, each stdin line a user turn, rendered with the model's chat "
                "template, answers streamed");
  app->add_option("--system-prompt", o->c.system, "-sys: with --chat, the system message");
  app->add_option("--chat-template", o->c.chat_template,
                  "with --chat: the template by llama.cpp's name (chatml, llama3, phi3, gemma, "
                  "mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7)");
  app->add_option("--max-prompt", o->max_prompt,
                  "keep the first N tokens of the prompt (0: all), for timing at a fixed length")
      ->capture_default_str();
  app->add_option("--temp", o->temp, "temperature (0: greedy)")->capture_default_str();
  app->add_flag("--ignore-eos", o->ignore_eos,
                "keep generating past end-of-generation tokens (timing a fixed -n)");
  app->add_flag("--warmup", o->warmup,
                "one untimed prefill of the prompt and one decode step before the timed run "
                "(llama-bench's warm-up)");
  app->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  app->add_option("--attn", o->r.attn,
                  "prefill attention: auto (the model's own: dsa for deepseek32, else dense), "
                  "dense, chunked_h2o, dsa, or a method spec (blasst:lambda=1e-3, momo, ...)")
      ->capture_default_str();
  app->add_option(
         "--dump-qkv",
         [o](const CLI::results_t& res) {
           SPATTN_CHECK(res.size() == 2, "--dump-qkv takes LAYER DIR");
           o->dump_all = res[0] == "all";
           if (!o->dump_all) {
             try {
               o->dump_layer = std::stoll(res[0]);
             } catch (const std::exception&) {
               detail::fail("--dump-qkv: LAYER must be a number or all, got '", res[0], "'");
             }
             SPATTN_CHECK(o->dump_layer >= 0, "--dump-qkv: LAYER must be >= 0");
           }
           o->dump_dir = res[1];
           return true;
         },
         "write layer LAYER's post-RoPE q, k, v over the prompt as q.npy, k.npy, v.npy "
         "in DIR (what spattn bench --qkv reads); LAYER all: every layer's in DIR/layerN/")
      ->expected(2)
      ->type_name("LAYER DIR");
  app->add_option("--h2o-trace", o->h2o_trace_dir,
                  "with --attn chunked_h2o: write every layer's memory sets per chunk and head "
                  "as DIR/layerN.h2o (what spattn h2o-report reads)")
      ->type_name("DIR");
  app->callback([o] { run(*o); });
}

}  // namespace spattn::cli
