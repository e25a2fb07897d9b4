// spattn_cp_check: run under `mpirun -np P`, every rank compares a context-parallel session
// (SessionOptions::cp) with a one-process session of the same model on the same prompt:
//   - per layer, the rows the rank owns of that layer's post-RoPE q, k, v (the inputs of layer
//     l are computed from layer l-1's attention output, so layer l >= 1 checks the ring's
//     output of the layer before); the last layer's attention is checked through the logits;
//   - every prompt row's logits (gathered to every rank);
//   - greedy decode: the same tokens, and each step's logits;
//   - the rank's KV cache bytes against the one-process cache's.
// Usage: spattn_cp_check MODEL.gguf TEXT_FILE P N_TOKENS N_DECODE CTK [TOL [ATTN UB [SKIP_TOL]]]
//   ATTN dense (default), gather (dense with --cp-gather), chunked_h2o (at -ub UB, -b 2 UB, local = heavy = UB / 4), an
//   a_shape spec (a_shape:sink=..,local=..) or a blasst one (blasst:lambda=X), or dsa (the
//   model's lightning indexer, prefill and decode), in both sessions, at -ub UB; TOL 0 asks
//   for the same bits. For blasst also the prefill's key tiles:
//   visited the same over the ranks as in one process, the skipped fraction within SKIP_TOL
//   (absolute) of one process's.
// Exit 0 when every check holds on this rank, 1 when one fails (printed), 77 when the model
// or text is absent (skip).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dist/ring_attention.hpp"
#include "model/kv_cache.hpp"
#include "spattn/decode.hpp"
#include "spattn/context_parallel.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/model.hpp"
#include "spattn/tokenizer.hpp"

using namespace spattn;

namespace {

// Every layer's rows by position: q [n, Hq d], k and v [n, Hkv d] (the session's attention
// shape: a latent attention's are the absorbed form's).
struct Rows {
  std::vector<std::vector<float>> q, k, v;
  int64_t dq = 0, dkv = 0;
  void tap(model::Session& s, const model::Config& c, int64_t n) {
    const model::Session::AttentionShape sh = s.attention_shape();
    dq = sh.q_heads * sh.dim, dkv = sh.kv_heads * sh.dim;
    q.assign(size_t(c.n_layer), std::vector<float>(size_t(n * dq)));
    k.assign(size_t(c.n_layer), std::vector<float>(size_t(n * dkv)));
    v = k;
    s.set_qkv_tap(model::Session::kTapAllLayers,
                  [this, n](int64_t l, int64_t pos0, int64_t rows, const float* qs, const float* ks,
                            const float* vs) {
                    if (pos0 + rows > n) return;  // decode rows
                    std::copy_n(qs, rows * dq, q[size_t(l)].data() + pos0 * dq);
                    std::copy_n(ks, rows * dkv, k[size_t(l)].data() + pos0 * dkv);
                    std::copy_n(vs, rows * dkv, v[size_t(l)].data() + pos0 * dkv);
                  });
  }
};

// max |a - b| over the rows at `positions`, relative to max |a| there.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b, int64_t width,
                const std::vector<int64_t>& positions) {
  double diff = 0, scale = 0;
  for (int64_t p : positions)
    for (int64_t i = p * width; i < (p + 1) * width; ++i) {
      diff = std::max(diff, double(std::fabs(a[size_t(i)] - b[size_t(i)])));
      scale = std::max(scale, double(std::fabs(a[size_t(i)])));
    }
  return scale > 0 ? diff / scale : diff;
}

// The dense prefill alone on seeded random rows (4 q heads, 2 kv heads, head dim 64, f32
// cache; n tokens on the 64-token grid): each rank's attention output against one
// attention_dense call over every key (the same bits: the chunks in position order) and the
// exact reference (float rounding), and decode's merged output against one attention_decode
// over every key, computed on the rank itself (only the order of sums differs: rounding).
bool ring_alone(dist::Group& g, int64_t n, double tol) {
  const int64_t Hq = 4, Hkv = 2, d = 64;
  const int r = g.rank();
  std::vector<float> q(size_t(n * Hq * d)), k(size_t(n * Hkv * d)), v(k.size());
  uint64_t x = 26;
  auto rnd = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return float(int64_t(x >> 40) - (1 << 23)) / float(1 << 23);
  };
  for (float& e : q) e = 2 * rnd();
  for (float& e : k) e = 2 * rnd();
  for (float& e : v) e = rnd();
  AttnOptions opt;
  opt.threads = 1;
  // One process: every key, rows by position.
  const PackedKV all = PackedKV::pack(TensorView::shd(k.data(), DType::f32, Hkv, n, d),
                                      TensorView::shd(v.data(), DType::f32, Hkv, n, d), 0, 1);
  std::vector<float> ref(q.size());  // the exact reference (double sums)
  attention_reference(TensorView::shd(q.data(), DType::f32, Hq, n, d),
                      TensorView::shd(k.data(), DType::f32, Hkv, n, d),
                      TensorView::shd(v.data(), DType::f32, Hkv, n, d),
                      TensorView::shd(ref.data(), DType::f32, Hq, n, d), opt);
  std::vector<float> one(q.size());  // one process's kernel over every key
  attention_dense(TensorView::shd(q.data(), DType::f32, Hq, n, d), all,
                  TensorView::shd(one.data(), DType::f32, Hq, n, d), opt);
  // This rank's rows, cache and prefill.
  const dist::Zigzag z{n, g.size(), kKeyBlock};
  const std::vector<int64_t> own = z.positions(r);
  const int64_t m = int64_t(own.size());
  std::vector<float> oq(size_t(m * Hq * d)), ok_(size_t(m * Hkv * d)), ov(ok_.size()),
      out(oq.size());
  for (int64_t i = 0; i < m; ++i) {
    std::copy_n(q.data() + own[size_t(i)] * Hq * d, Hq * d, oq.data() + i * Hq * d);
    std::copy_n(k.data() + own[size_t(i)] * Hkv * d, Hkv * d, ok_.data() + i * Hkv * d);
    std::copy_n(v.data() + own[size_t(i)] * Hkv * d, Hkv * d, ov.data() + i * Hkv * d);
  }
  PackedKV mine(Hkv, d, DType::f32, m + 1);
  mine.append(TensorView::shd(ok_.data(), DType::f32, Hkv, m, d),
              TensorView::shd(ov.data(), DType::f32, Hkv, m, d), own, 1);
  dist::RingScratch scratch;
  dist::ring_prefill(g, z,
                     {oq.data(), ok_.data(), ov.data(), &mine, Hq, Hkv, d, KVType::f32, KVType::f32,
                      opt, out.data()},
                     scratch, nullptr);
  double diff = 0, bits = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < Hq * d; ++c) {
      const float o = out[size_t(i * Hq * d + c)];
      diff = std::max(diff, double(std::fabs(o - ref[size_t(own[size_t(i)] * Hq * d + c)])));
      bits = std::max(bits, double(std::fabs(o - one[size_t(own[size_t(i)] * Hq * d + c)])));
    }
  // Decode: the last row's query over every key, the last key on rank 0 alone.
  std::vector<float> dref(size_t(Hq * d)), dout(size_t(Hq * d)), gather;
  const TensorView dq = TensorView::shd(q.data() + (n - 1) * Hq * d, DType::f32, Hq, 1, d);
  AttnOptions dopt = opt;
  dopt.q_start = n - 1;
  attention_decode(dq, all, TensorView::shd(dref.data(), DType::f32, Hq, 1, d), dopt);
  dist::decode_merge(g, dq, mine, TensorView::shd(dout.data(), DType::f32, Hq, 1, d), dopt, 7,
                     nullptr, gather);
  double ddiff = 0;
  for (size_t c = 0; c < dref.size(); ++c)
    ddiff = std::max(ddiff, double(std::fabs(dref[c] - dout[c])));
  std::printf(
      "rank %d: prefill alone (random rows, n %lld): attention max |diff| %.3g against "
      "the reference, %.3g against one call; decode merge %.3g\n",
      r, (long long)n, diff, bits, ddiff);
  return diff <= tol && bits == 0 && ddiff <= tol;
}

int argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int(best);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s MODEL TEXT P N_TOKENS N_DECODE CTK [TOL [ATTN UB]]\n", argv[0]);
    return 2;
  }
  const std::string model_path = argv[1], text_path = argv[2];
  const int P = std::atoi(argv[3]);
  const int64_t n = std::atoll(argv[4]), n_decode = std::atoll(argv[5]);
  const KVType ctk = parse_kv_type(argv[6]);
  const double tol = argc > 7 ? std::atof(argv[7]) : 1e-3;
  const std::string attn = argc > 8 ? argv[8] : "dense";
  const int64_t ub = argc > 9 ? std::atoll(argv[9]) : 64;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model_path, ec) ||
      !std::filesystem::is_regular_file(text_path, ec)) {
    std::fprintf(stderr, "skip: %s or %s is absent\n", model_path.c_str(), text_path.c_str());
    return 77;
  }
  try {
    auto group = dist::mpi_world(P);
    const int r = group->rank();
    bool ok = ring_alone(*group, 600, 2e-6);
    auto file = std::make_shared<const gguf::File>(gguf::File::open(model_path));
    const model::Model m = model::load_model(file);
    const Tokenizer tok = Tokenizer::from_gguf(*file);
    const model::Config& c = m.config();
    std::ifstream in(text_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::vector<int32_t> tokens = tok.encode(ss.str().substr(0, size_t(n) * 8));
    if (int64_t(tokens.size()) < n) {
      std::fprintf(stderr, "the text gives %zu tokens, fewer than %lld\n", tokens.size(),
                   (long long)n);
      return 1;
    }
    tokens.resize(size_t(n));
    const int64_t V = c.n_vocab;

    model::SessionOptions so;
    so.n_ctx = n + n_decode + 8;
    so.n_ubatch = ub;  // the one-process session in several chunks, as -ub does
    if (attn == "chunked_h2o") {
      so.attn = "chunked_h2o";
      so.n_batch = 2 * ub;  // several logical batches: the memory set carries across them
      so.h2o_local = so.h2o_heavy = ub / 4;
    } else if (attn == "gather") {  // dense over all-gathered K/V (SessionOptions::cp_gather)
    } else if (attn == "dsa") {
      so.attn = so.attn_decode = "dsa";
    } else if (attn.rfind("a_shape", 0) == 0 || attn.rfind("blasst", 0) == 0 ||
               attn.rfind("sliding_window", 0) == 0) {
      so.attn = attn;
    } else if (attn != "dense" && attn != "gather") {
      std::fprintf(stderr,
                   "ATTN: dense, chunked_h2o, a_shape[:...], blasst:..., dsa or "
                   "sliding_window:..., not %s\n",
                   attn.c_str());
      return 2;
    }
    so.threads = 1;  // ranks share 2 cores
    so.cache_type_k = so.cache_type_v = ctk;
    model::Session one(m, so);
    so.cp = group;
    so.cp_gather = attn == "gather";
    model::Session cp(m, so);
    Rows a, b;
    a.tap(one, c, n);
    b.tap(cp, c, n);
    std::vector<float> la(size_t(n * V)), lb(size_t(n * V));
    one.prefill(tokens, la.data(), 0);
    cp.prefill(tokens, lb.data(), 0);

    // chunked_h2o splits on the -ub grid (a prompt of one chunk runs dense), blasst and dense
    // on the 64-key tiles' (dense: when the prompt has 2P tiles; else, as --cp-gather, on
    // none).
    const bool blasst = attn.rfind("blasst", 0) == 0;
    const bool tiles = blasst || (attn == "dense" && (n + kKeyBlock - 1) / kKeyBlock >= 2 * P);
    const int64_t grid = attn == "chunked_h2o" && n > ub ? ub : tiles ? kKeyBlock : 1;
    if (blasst) {
      // The prefill's key tiles over every rank against one process's.
      const Stats& sa = one.timings().prefill_stats;
      const int64_t mine[2] = {cp.timings().prefill_stats.tiles_visited,
                               cp.timings().prefill_stats.tiles_skipped};
      std::vector<int64_t> every(size_t(2 * P));
      group->allgather(mine, sizeof mine, every.data());
      int64_t visited = 0, skipped = 0;
      for (int q = 0; q < P; ++q)
        visited += every[size_t(2 * q)], skipped += every[size_t(2 * q + 1)];
      const double fa = double(sa.tiles_skipped) / double(std::max<int64_t>(1, sa.tiles_visited)),
                   fb = double(skipped) / double(std::max<int64_t>(1, visited));
      const double skip_tol = argc > 10 ? std::atof(argv[10]) : 0.0;
      std::printf(
          "rank %d: blasst prefill tiles: one process %lld of %lld skipped (%.4f), %d "
          "ranks %lld of %lld (%.4f), difference %.4f\n",
          r, (long long)sa.tiles_skipped, (long long)sa.tiles_visited, fa, P, (long long)skipped,
          (long long)visited, fb, fb - fa);
      if (visited != sa.tiles_visited || std::fabs(fb - fa) > skip_tol || skipped == 0) ok = false;
    }
    const std::vector<int64_t> own = dist::Zigzag{n, P, grid}.positions(r);
    // Decode merges every rank's (O, LSE) in every mode (dense's flash-decoding, or dsa's
    // chosen tokens of each rank): its merge order rounds, so a prefill asked for the same bits
    // (TOL 0) still gives decode the dense tolerance.
    const double dtol = tol > 0 ? tol : 2e-3;
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;
    double worst = 0;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const double dq = rel_diff(a.q[size_t(l)], b.q[size_t(l)], a.dq, own);
      const double dk = rel_diff(a.k[size_t(l)], b.k[size_t(l)], a.dkv, own);
      const double dv = rel_diff(a.v[size_t(l)], b.v[size_t(l)], a.dkv, own);
      const double d = std::max({dq, dk, dv});
      worst = std::max(worst, d);
      if (r == 0 || d > tol)
        std::printf("rank %d layer %lld: q/k/v of own rows, max |diff| / max |x| = %.3g\n", r,
                    (long long)l, d);
      if (d > tol) ok = false;
    }
    const double dl = rel_diff(la, lb, V, all);
    std::printf("rank %d: logits of all %lld rows, max |diff| / max |x| = %.3g\n", r, (long long)n,
                dl);
    if (dl > tol) ok = false;
    // Greedy decode in lockstep: every rank has the same logits, so the same token.
    std::vector<float> da(static_cast<size_t>(V)), db(static_cast<size_t>(V));
    int ta = argmax(la.data() + (n - 1) * V, V), tb = argmax(lb.data() + (n - 1) * V, V);
    for (int64_t step = 0; step < n_decode; ++step) {
      if (ta != tb) {
        std::printf("rank %d: decode step %lld: token %d (one process) against %d (cp)\n", r,
                    (long long)step, ta, tb);
        ok = false;
        break;
      }
      one.decode(ta, da.data());
      cp.decode(tb, db.data());
      const double d = rel_diff(da, db, V, {0});
      if (d > dtol) {
        std::printf("rank %d: decode step %lld: logits max |diff| / max |x| = %.3g\n", r,
                    (long long)step, d);
        ok = false;
      }
      ta = argmax(da.data(), V);
      tb = argmax(db.data(), V);
    }
    if (cp.n_past() != one.n_past()) {
      std::printf("rank %d: n_past %lld against %lld\n", r, (long long)cp.n_past(),
                  (long long)one.n_past());
      ok = false;
    }
    const double share = double(cp.memory().kv_cache) / double(one.memory().kv_cache);
    std::printf(
        "rank %d: %s; layers worst %.3g; KV cache %zu bytes against %zu (%.3f of the "
        "one-process cache, %lld of %lld tokens)\n",
        r, ok ? "ok" : "FAILED", worst, cp.memory().kv_cache, one.memory().kv_cache, share,
        (long long)cp.cache().size(), (long long)one.n_past());
    std::fflush(stdout);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
