// `spattn perplexity`: llama-perplexity's protocol, for dense prefill and a sparse one on the
// same text. The text is tokenized once (BOS as the vocabulary says) and cut into
// non-overlapping windows of -c tokens; each window's first token is replaced by BOS (when the
// vocabulary adds one) and is prefilled from position 0 in -b / -ub chunks; only the second
// half is scored: the logits after token j (c/2 <= j < c - 1) against token j + 1. Perplexity
// is exp(mean NLL) with standard error ppl * sqrt((mean NLL^2 - mean NLL^2) / (count - 1)),
// as llama-perplexity prints it. Windows alternate between the two modes, so their prefill
// and attention times are measured under the same conditions.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "runner.hpp"
#include "model/kv_cache.hpp"
#include "spattn/decode.hpp"
#include "spattn/quest.hpp"
#include "spattn/error.hpp"

namespace spattn::cli {
namespace {

struct PplOptions {
  RunnerOptions r;
  std::string file;
  std::string sparse = "chunked_h2o";  // --attn: the mode compared with dense
  int64_t chunks = -1;                 // --chunks: at most this many windows (-1: all)
  bool dense_only = false;
  int64_t decode_tail = 0;     // --decode-tail N: score each window's last N tokens by decode
  bool decode_recall = false;  // --decode-recall: quest's attention recall per decode step
};

// Quest's recall (--decode-recall): after each decode step, per sparse layer and q head, the
// share of the dense softmax mass on the keys the step read: exp(LSE over the chosen pages -
// LSE over every key). The step's post-RoPE q rows come from the session's tap; the choice is
// made again from the same summaries and q, so it is the step's own. Outside the timed decode.
// Per layer too, the dense layers (Quest's dense_layers) included: there the mass Quest's choice
// would keep if the layer were sparse (the layer itself read every key), so one run shows which
// layers a budget can serve. The mean and worst are the sparse layers'. A step whose budget
// reaches dense_at of the cache decodes densely (quest_reads_every_key) and keeps all of it.
struct RecallTally {
  struct Share {
    double sum = 0, worst = 1;
    int64_t count = 0;  // head-steps
    double mean() const { return sum / double(count); }
    void add(double r) { sum += r, worst = std::min(worst, r), ++count; }
    void add(const Share& o) { sum += o.sum, worst = std::min(worst, o.worst), count += o.count; }
  };
  std::vector<Share> layers;          // per layer (sized with q)
  std::vector<std::vector<float>> q;  // per layer, the last decoded row's q [Hq * d]
  // Over the sparse layers [dense_layers, n_layer).
  Share sparse(int64_t dense_layers) const {
    Share all;
    for (size_t l = size_t(dense_layers); l < layers.size(); ++l) all.add(layers[l]);
    return all;
  }
  void measure(const model::Session& s, const model::Config& cfg, const QuestParams& qp) {
    const model::KVCache& c = s.cache();
    AttnOptions a;
    a.q_start = s.n_past() - 1;
    a.threads = 2;
    const int64_t H = cfg.n_head, d = s.attention_shape().dim;  // the cache's head dim
    Tensor out(DType::f32, H, 1, d);
    std::vector<float> lse_sel(static_cast<size_t>(H)), lse_all(static_cast<size_t>(H));
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      const TensorView qv = TensorView::shd(q[size_t(l)].data(), DType::f32, H, 1, d);
      attention_decode(qv, c.packed(l), out, a, DecodeOptions{}, lse_all.data());
      if (quest_reads_every_key(qp, c.packed(l).size())) {
        lse_sel = lse_all;  // decoded densely: every key's mass kept
      } else {
        const auto ranges =
            quest_select(qv, c.pages(l), qp, softmax_scale(a, d), nullptr, 1, &c.packed(l));
        quest_attend(qv, c.packed(l), ranges, out, a, lse_sel.data());
      }
      for (int64_t h = 0; h < cfg.n_head; ++h) {
        layers[size_t(l)].add(std::exp(double(lse_sel[size_t(h)]) - double(lse_all[size_t(h)])));
      }
    }
  }
};

struct Tally {
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  double prefill_ms = 0, attn_ms = 0;
  Stats stats;
  double ppl() const { return std::exp(nll / double(count)); }
  double err() const {
    const double m = nll / double(count), v = nll2 / double(count) - m * m;
    return v > 0 && count > 1 ? ppl() * std::sqrt(v / double(count - 1)) : 0.0;
  }
  nlohmann::json json() const {
    return {{"ppl", ppl()},
            {"ppl_err", err()},
            {"tokens_scored", count},
            {"prefill_ms", prefill_ms},
            {"attn_ms", attn_ms},
            {"score_entries", stats.score_entries},
            {"causal_entries", stats.causal_entries},
            {"tiles_visited", stats.tiles_visited},
            {"tiles_skipped", stats.tiles_skipped}};
  }
};

// NLL of the scored tokens of one window from its logits rows.
void score(const std::vector<float>& logits, int64_t V, const int32_t* next, int64_t rows,
           Tally& t) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* l = logits.data() + i * V;
    double mx = l[0];
    for (int64_t j = 1; j < V; ++j) mx = std::max(mx, double(l[j]));
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(double(l[j]) - mx);
    const double logp = double(l[next[i]]) - mx - std::log(sum);
    t.nll -= logp;
    t.nll2 += logp * logp;
    ++t.count;
  }
}

// --decode-tail N: the decode path's quality. Per window w[0..c), dense prefill of
// w[0..c-1-N), then w[c-1-N .. c-2] decoded one by one (teacher forcing), each step's logits
// scoring the next token: N tokens, all predicted by decode. Dense decode and --attn-decode's
// method run on the same windows, alternating which goes first; dense's prefill of w[0..c-1)
// scoring the same N tokens from its logits rows is printed beside them (`prefill`): dense
// decode must equal it up to float rounding.
// The text's whole windows of c tokens, at most `chunks` of them (when > 0).
int64_t count_windows(const std::vector<int32_t>& tokens, int64_t c, int64_t chunks) {
  const int64_t windows = int64_t(tokens.size()) / c;
  SPATTN_CHECK(windows >= 1, "the text has ", tokens.size(), " tokens, fewer than -c ", c,
               " (one window)");
  return chunks > 0 ? std::min(windows, chunks) : windows;
}

// Window w of the text (window.size() tokens), its first token BOS where the vocabulary adds
// one, as llama-perplexity scores it.
void fill_window(std::vector<int32_t>& window, const std::vector<int32_t>& tokens, int64_t w,
                 const Tokenizer& tok) {
  std::copy_n(tokens.begin() + w * int64_t(window.size()), window.size(), window.begin());
  if (tok.add_bos() && tok.bos() >= 0) window[0] = tok.bos();
}

void run_decode_tail(const PplOptions& o) {
  const int64_t c = o.r.n_ctx, N = o.decode_tail;
  SPATTN_CHECK(N >= 1 && N <= c - 2, "--decode-tail must be in [1, -c - 2] = [1, ", c - 2,
               "], got ", N);
  SPATTN_CHECK(o.chunks == -1 || o.chunks >= 1, "--chunks must be >= 1 (or -1: all)");
  std::vector<std::string> modes = {"dense"};
  // --attn-decode's default (the model's own) compares nothing here: dense against itself.
  if (o.r.attn_decode != "dense" && o.r.attn_decode != model::kModelAttention)
    modes.push_back(o.r.attn_decode);
  std::vector<model::SessionOptions> so;
  for (const auto& m : modes) {
    RunnerOptions r = o.r;
    r.attn_decode = m;
    so.push_back(session_options(r, "dense"));
  }
  // The recall measure chooses pages in every layer, Quest's dense ones included.
  so.back().quest_pages_every_layer = o.decode_recall;
  const std::string text = read_prompt("", o.file);
  LoadedModel lm = load_model_and_tokenizer(o.r);
  const int64_t V = lm.model.config().n_vocab;
  const std::vector<int32_t> tokens = lm.tokenizer.encode(text);
  const int64_t windows = count_windows(tokens, c, o.chunks);
  const int64_t prefix = c - 1 - N;
  std::vector<std::unique_ptr<model::Session>> sessions;
  for (const auto& s : so) sessions.push_back(std::make_unique<model::Session>(lm.model, s));
  std::vector<Tally> tally(modes.size());
  std::vector<double> decode_ms(modes.size()), decode_attn_ms(modes.size()),
      decode_select_ms(modes.size());
  std::vector<int64_t> keys_read(modes.size()), keys_total(modes.size());
  Tally prefill_tally;
  const model::Config& cfg = lm.model.config();
  // The recall measure is Quest's own (its page choice against the dense mass): it reads the
  // compared spec's Quest parameters.
  const MethodSpec compared_spec = parse_method_spec(modes.back());
  const bool recall = o.decode_recall && compared_spec.name == "quest";
  const QuestParams quest = recall ? parse_quest_params(compared_spec) : QuestParams{};
  SPATTN_CHECK(!o.decode_recall || recall, "--decode-recall needs --attn-decode quest[:...]");
  RecallTally rt;
  if (recall) {
    const model::Session::AttentionShape a = sessions.back()->attention_shape();
    const int64_t qw = a.q_heads * a.dim;  // a decode row's q (the latent attention's absorbed)
    rt.q.assign(size_t(cfg.n_layer), std::vector<float>(size_t(qw)));
    rt.layers.assign(size_t(cfg.n_layer), {});
    sessions.back()->set_qkv_tap(
        model::Session::kTapAllLayers,
        [&rt, qw](int64_t l, int64_t, int64_t n, const float* q, const float*, const float*) {
          if (n == 1) std::copy_n(q, qw, rt.q[size_t(l)].data());
        });
  }
  std::vector<float> logits(size_t(N * V));
  std::vector<int32_t> window(static_cast<size_t>(c));
  Progress progress("decode tail");
  for (int64_t w = 0; w < windows; ++w) {
    fill_window(window, tokens, w, lm.tokenizer);
    for (size_t i = 0; i < modes.size(); ++i) {
      const size_t m = (size_t(w) + i) % modes.size();
      model::Session& s = *sessions[m];
      s.reset();
      s.reset_timings();
      if (prefix > 0) s.prefill(std::span(window).first(size_t(prefix)), nullptr, 0);
      for (int64_t j = 0; j < N; ++j) {
        s.decode(window[size_t(prefix + j)], logits.data() + j * V);
        if (recall && m + 1 == modes.size()) rt.measure(s, cfg, quest);
      }
      score(logits, V, window.data() + prefix + 1, N, tally[m]);
      const model::Timings& t = s.timings();
      decode_ms[m] += t.decode_ms;
      decode_attn_ms[m] += t.decode_attn_ms;
      decode_select_ms[m] += t.decode_select_ms;
      keys_read[m] += t.decode_keys_read;
      keys_total[m] += t.decode_keys_total;
      if (m == 0) {  // dense prefill of the same tokens, scored on the same N tokens
        s.reset();
        s.prefill(std::span(window).first(size_t(c - 1)), logits.data(), prefix);
        score(logits, V, window.data() + prefix + 1, N, prefill_tally);
      }
    }
    std::string status = fmt::format("window {}/{}", w + 1, windows);
    for (size_t m = 0; m < modes.size(); ++m)
      status += fmt::format(", {} {:.4f}", modes[m], tally[m].ppl());
    progress.update(status);
  }
  progress.done();
  const auto mean_ll = [](const Tally& t) { return -t.nll / double(t.count); };
  const double rel = modes.size() > 1 ? tally[1].ppl() / tally[0].ppl() - 1.0 : 0.0;
  if (o.r.json) {
    nlohmann::json j;
    j["model"] = o.r.model;
    j["file"] = o.file;
    j["n_ctx"] = c;
    j["decode_tail"] = N;
    j["windows"] = windows;
    j["text_tokens"] = tokens.size();
    j["prefill"] = {{"ppl", prefill_tally.ppl()},
                    {"mean_loglik", mean_ll(prefill_tally)},
                    {"tokens_scored", prefill_tally.count}};
    for (size_t m = 0; m < modes.size(); ++m)
      j["results"][modes[m]] = {{"ppl", tally[m].ppl()},
                                {"ppl_err", tally[m].err()},
                                {"mean_loglik", mean_ll(tally[m])},
                                {"tokens_scored", tally[m].count},
                                {"decode_ms", decode_ms[m]},
                                {"decode_attn_ms", decode_attn_ms[m]},
                                {"decode_select_ms", decode_select_ms[m]},
                                {"decode_keys_read", keys_read[m]},
                                {"decode_keys_total", keys_total[m]}};
    for (size_t m = 0; m < modes.size(); ++m)
      j["results"][modes[m]]["decode_tok_s"] = 1e3 * double(tally[m].count) / decode_ms[m];
    if (recall) {
      nlohmann::json layers = nlohmann::json::array();
      for (size_t l = 0; l < rt.layers.size(); ++l)
        layers.push_back({{"layer", l},
                          {"dense", int64_t(l) < quest.dense_layers},
                          {"mean", rt.layers[l].mean()},
                          {"worst", rt.layers[l].worst}});
      const RecallTally::Share all = rt.sparse(quest.dense_layers);
      j["results"][modes.back()]["recall"] = {{"mean", all.mean()},
                                              {"worst", all.worst},
                                              {"head_steps", all.count},
                                              {"per_layer", layers}};
    }
    if (modes.size() > 1) {
      j["relative_loss"] = rel;
      j["decode_attn_speedup"] = decode_attn_ms[0] / decode_attn_ms[1];
      j["decode_speedup"] = decode_ms[0] / decode_ms[1];
    }
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print(
      "decode tail: {} tokens, {} windows of {}, the last {} tokens of each scored "
      "through decode after a dense prefill of {}\n",
      tokens.size(), windows, c, N, prefix);
  fmt::print("{:<28} PPL = {:.4f}   mean log-likelihood {:.5f}   (dense prefill, same tokens)\n",
             "prefill", prefill_tally.ppl(), mean_ll(prefill_tally));
  for (size_t m = 0; m < modes.size(); ++m)
    fmt::print(
        "{:<28} PPL = {:.4f} +/- {:.5f}   mean log-likelihood {:.5f}   decode {:9.1f} "
        "ms ({:.1f} tok/s), attention {:9.1f} ms, keys read {:.1f}%\n",
        modes[m], tally[m].ppl(), tally[m].err(), mean_ll(tally[m]), decode_ms[m],
        1e3 * double(tally[m].count) / decode_ms[m], decode_attn_ms[m],
        100.0 * double(keys_read[m]) / double(keys_total[m]));
  if (recall) {
    const RecallTally::Share all = rt.sparse(quest.dense_layers);
    fmt::print(
        "{} attention recall of the decode queries: mean {:.4f}, worst head-step {:.4f} "
        "({} head-steps)\n",
        modes.back(), all.mean(), all.worst, all.count);
    std::string per_layer;
    for (size_t l = 0; l < rt.layers.size(); ++l)
      per_layer += fmt::format("  {}{} {:.4f}/{:.4f}", l,
                               int64_t(l) < quest.dense_layers ? " (dense: if sparse)" : "",
                               rt.layers[l].mean(), rt.layers[l].worst);
    fmt::print("  per layer, mean/worst:{}\n", per_layer);
  }
  if (modes.size() > 1)
    fmt::print("relative loss {:+.3f}%   decode attention {:.2f}x faster, decode {:.2f}x faster\n",
               100 * rel, decode_attn_ms[0] / decode_attn_ms[1], decode_ms[0] / decode_ms[1]);
}

void run_windows(const PplOptions& o, const std::shared_ptr<dist::Group>& grp);

void run(const PplOptions& o) {
  const std::shared_ptr<dist::Group> grp = cp_group(o.r);
  with_cp(grp.get(), [&] {
    if (grp) SPATTN_CHECK(o.decode_tail == 0, "--cp: --decode-tail is not context-parallel");
    if (o.decode_tail != 0) return run_decode_tail(o);
    run_windows(o, grp);
  });
}

void run_windows(const PplOptions& o, const std::shared_ptr<dist::Group>& grp) {
  // Under --cp the sparse mode too where it is context-parallel (chunked_h2o, a_shape; the
  // session refuses the others by name); rank 0 prints.
  std::vector<std::string> modes = {"dense"};
  if (!o.dense_only) modes.push_back(o.sparse);
  std::vector<model::SessionOptions> so;
  for (const auto& m : modes) {
    so.push_back(session_options(o.r, m));
    so.back().cp = grp;
    on_every_rank(grp.get(), "checking the options", [&] { so.back().validate(); });
  }
  const int64_t c = o.r.n_ctx;
  SPATTN_CHECK(c >= 4, "-c must be >= 4 for perplexity, got ", c);
  SPATTN_CHECK(o.chunks == -1 || o.chunks >= 1, "--chunks must be >= 1 (or -1: all)");
  std::string text;
  if (!grp) text = read_prompt("", o.file);
  LoadedModel lm = load_runner_model(o.r, grp.get());
  const int64_t V = lm.model.config().n_vocab;
  std::vector<int32_t> tokens;
  int64_t windows = 0;
  const auto tokenize = [&] {
    if (grp) text = read_prompt("", o.file);
    tokens = lm.tokenizer.encode(text);
    windows = count_windows(tokens, c, o.chunks);
  };
  on_every_rank(grp.get(), "reading the text", tokenize);
  const int64_t first = c / 2, rows = c - 1 - first;
  std::vector<std::unique_ptr<model::Session>> sessions;
  for (const auto& s : so) sessions.push_back(std::make_unique<model::Session>(lm.model, s));
  std::vector<Tally> tally(modes.size());
  std::vector<float> logits(size_t(rows * V));
  std::vector<int32_t> window(static_cast<size_t>(c));
  Progress progress("perplexity");
  for (int64_t w = 0; w < windows; ++w) {
    fill_window(window, tokens, w, lm.tokenizer);
    for (size_t i = 0; i < modes.size(); ++i) {
      // Alternate which mode goes first, so neither always runs on a warm cache.
      const size_t m = (size_t(w) + i) % modes.size();
      model::Session& s = *sessions[m];
      s.reset();
      s.reset_timings();
      s.prefill(std::span(window).first(size_t(c - 1)), logits.data(), first);
      score(logits, V, window.data() + first + 1, rows, tally[m]);
      tally[m].prefill_ms += s.timings().prefill_ms;
      tally[m].attn_ms += s.timings().prefill_attn_ms;
      tally[m].stats.add(s.timings().prefill_stats);
    }
    std::string status = fmt::format("window {}/{}", w + 1, windows);
    for (size_t m = 0; m < modes.size(); ++m)
      status += fmt::format(", {} {:.4f}", modes[m], tally[m].ppl());
    progress.update(status);
  }
  progress.done();
  const double rel = modes.size() > 1 ? tally[1].ppl() / tally[0].ppl() - 1.0 : 0.0;
  nlohmann::json cp;
  if (grp) {
    // The entries and key tiles every rank computed and skipped (BLASST's rule), summed over
    // the ranks so the counts are the whole prompt's, as one process reports them.
    for (Tally& t : tally) {
      int64_t* const f[4] = {&t.stats.score_entries, &t.stats.causal_entries,
                             &t.stats.tiles_visited, &t.stats.tiles_skipped};
      int64_t mine[4];
      for (int i = 0; i < 4; ++i) mine[i] = *f[i];
      std::vector<int64_t> all(size_t(4 * grp->size()));
      grp->allgather(mine, sizeof mine, all.data());
      for (int i = 0; i < 4; ++i) {
        *f[i] = 0;
        for (int q = 0; q < grp->size(); ++q) *f[i] += all[size_t(4 * q + i)];
      }
    }
    cp = cp_json(*grp, lm, *sessions[0]);  // every rank takes part
    // The sparse mode's own communication (BLASST's seed, a_shape's rows) beside dense's.
    if (sessions.size() > 1) cp["sparse"] = cp_json(*grp, lm, *sessions[1]);
    cp["window"] = "the last";  // the timings restart with each window
  }
  if (grp && grp->rank() != 0) return;
  if (o.r.json) {
    nlohmann::json j;
    j["model"] = o.r.model;
    j["file"] = o.file;
    j["n_ctx"] = c;
    if (grp) j["cp"] = cp;
    j["n_batch"] = so[0].n_batch;
    j["n_ubatch"] = so[0].n_ubatch;
    j["h2o_local"] = o.r.h2o_local;
    j["h2o_heavy"] = o.r.h2o_heavy;
    j["windows"] = windows;
    j["text_tokens"] = tokens.size();
    for (size_t m = 0; m < modes.size(); ++m) j["results"][modes[m]] = tally[m].json();
    if (modes.size() > 1) {
      j["relative_loss"] = rel;
      j["attn_speedup"] = tally[0].attn_ms / tally[1].attn_ms;
      j["prefill_speedup"] = tally[0].prefill_ms / tally[1].prefill_ms;
    }
    for (size_t m = 0; m < modes.size(); ++m)
      j["memory"][modes[m]] = memory_json(lm, {sessions[m].get()});
    j["memory_peak_rss_bytes"] = j["memory"][modes[0]]["peak_rss_bytes"];
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print(
      "perplexity: {} tokens, {} windows of {} (-b {}, -ub {}), {} tokens scored per "
      "window\n",
      tokens.size(), windows, c, so[0].n_batch, so[0].n_ubatch, rows);
  for (size_t m = 0; m < modes.size(); ++m) {
    std::string name = modes[m];
    if (parse_method_spec(so[m].attn).name == "chunked_h2o")  // its sizes are the flags'
      name += fmt::format(" (L {}, H {})", o.r.h2o_local, o.r.h2o_heavy);
    fmt::print("{:<28} PPL = {:.4f} +/- {:.5f}   prefill {:9.1f} ms, attention {:9.1f} ms\n", name,
               tally[m].ppl(), tally[m].err(), tally[m].prefill_ms, tally[m].attn_ms);
  }
  if (modes.size() > 1)
    fmt::print("relative loss {:+.2f}%   attention {:.2f}x faster, prefill {:.2f}x faster\n",
               100 * rel, tally[0].attn_ms / tally[1].attn_ms,
               tally[0].prefill_ms / tally[1].prefill_ms);
  for (size_t m = 0; m < modes.size(); ++m)
    fmt::print("{:<12} {}\n", modes[m], memory_line(lm, {sessions[m].get()}));
  if (grp) fmt::print("{}\n", cp_line(cp));
}

}  // namespace

void add_perplexity_command(CLI::App& root) {
  auto o = std::make_shared<PplOptions>();
  CLI::App* app = root.add_subcommand(
      "perplexity", "perplexity of a text as llama-perplexity computes it, dense and sparse");
  add_runner_options(*app, o->r);
  app->add_option("-f,--file", o->file, "text file")->required();
  app->add_option("--attn", o->sparse,
                  "the prefill compared with dense: chunked_h2o or a method spec")
      ->capture_default_str();
  app->add_option("--chunks", o->chunks, "score at most this many windows (-1: all)")
      ->capture_default_str();
  app->add_flag("--dense-only", o->dense_only, "dense prefill only");
  app->add_option("--decode-tail", o->decode_tail,
                  "score each window's last N tokens token by token through decode, dense "
                  "decode against --attn-decode (prefill dense)")
      ->capture_default_str();
  app->add_flag("--decode-recall", o->decode_recall,
                "with --decode-tail and --attn-decode quest: the dense attention mass on the "
                "keys each decode step read (per sparse layer and q head)");
  app->callback([o] { run(*o); });
}

}  // namespace spattn::cli
