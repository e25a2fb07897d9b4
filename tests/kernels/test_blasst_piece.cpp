// attention_blasst_piece and blasst_seed_max (spattn/blasst.hpp): BLASST's rule over pieces
// of the keys with a carried running max, as context parallelism's ring runs it. Against the
// one-call kernel (one piece holding every key: the same skips, provably) and against a plain
// reference twin of the carried rule (two pieces, double sums).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "spattn/blasst.hpp"
#include "spattn/error.hpp"
#include "spattn/merge.hpp"
#include "spattn/packed_kv.hpp"

using namespace spattn;

namespace {

constexpr int64_t Hq = 4, Hkv = 2, d = 64;
constexpr double kLambda = 0.05;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Seeded rows where real heads' shape shows: keys near the diagonal and the sink score high.
struct Rows {
  int64_t n;
  std::vector<float> q, k, v;
  explicit Rows(int64_t n_) : n(n_), q(size_t(n * Hq * d)), k(size_t(n * Hkv * d)), v(k.size()) {
    uint64_t x = 26;
    auto rnd = [&] {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return float(int64_t(x >> 40) - (1 << 23)) / float(1 << 23);
    };
    for (float& e : q) e = rnd();
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < Hkv * d; ++c) {
        // A shared direction every q leans on, strongest for the sink's keys.
        const float lean = c % d < 8 ? (j < 4 ? 5.0f : 0.5f) : 0.0f;
        k[size_t(j * Hkv * d + c)] = rnd() + lean;
        v[size_t(j * Hkv * d + c)] = rnd();
      }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t c = 0; c < 8; ++c) q[size_t((i * Hq + h) * d + c)] += 1.5f;
  }
  TensorView qv(int64_t row0, int64_t rows) {
    return TensorView::shd(q.data() + row0 * Hq * d, DType::f32, Hq, rows, d);
  }
};

// K/V rows at `pos` (ascending) packed with their positions, f32 dot products.
PackedKV piece(Rows& x, const std::vector<int64_t>& pos) {
  std::vector<float> k(pos.size() * size_t(Hkv * d)), v(k.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    std::copy_n(x.k.data() + pos[i] * Hkv * d, Hkv * d, k.data() + i * size_t(Hkv * d));
    std::copy_n(x.v.data() + pos[i] * Hkv * d, Hkv * d, v.data() + i * size_t(Hkv * d));
  }
  const int64_t m = int64_t(pos.size());
  PackedKV kv(Hkv, d, DType::f32, m, /*bf16_dot=*/false);
  kv.append(TensorView::shd(k.data(), DType::f32, Hkv, m, d),
            TensorView::shd(v.data(), DType::f32, Hkv, m, d), pos, 1);
  return kv;
}

std::vector<int64_t> range(int64_t a, int64_t b) {
  std::vector<int64_t> r;
  for (int64_t i = a; i < b; ++i) r.push_back(i);
  return r;
}

AttnOptions opts(int64_t q_start) {
  AttnOptions o;
  o.threads = 1;
  o.bf16_dot = false;
  o.q_start = q_start;
  return o;
}

TEST(BlasstPiece, OnePieceHoldingEveryKeySkipsAsOneCall) {
  const int64_t n = 384;
  Rows x(n);
  std::vector<float> out1(x.q.size()), out2(x.q.size()), lse1(size_t(Hq * n)), lse2(lse1.size());
  Stats s1, s2;
  attention_blasst(x.qv(0, n), TensorView::shd(x.k.data(), DType::f32, Hkv, n, d),
                   TensorView::shd(x.v.data(), DType::f32, Hkv, n, d),
                   TensorView::shd(out1.data(), DType::f32, Hq, n, d), kLambda, opts(-1),
                   lse1.data(), &s1, nullptr, BlasstOrder::local_first);
  const PackedKV all = piece(x, range(0, n)), sink = piece(x, range(0, 64));
  std::vector<float> carry(size_t(Hq * n), -kInf);
  blasst_seed_max(x.qv(0, n), all, /*diagonal_only=*/true, carry.data(), opts(0));
  blasst_seed_max(x.qv(0, n), sink, /*diagonal_only=*/false, carry.data(), opts(0));
  attention_blasst_piece(x.qv(0, n), all, TensorView::shd(out2.data(), DType::f32, Hq, n, d),
                         kLambda, carry.data(), opts(0), lse2.data(), &s2);
  // The seed is the running max one call has after its first two tiles; every later tile
  // meets the same max, so the same tiles are skipped.
  EXPECT_GT(s1.tiles_skipped, 0);
  EXPECT_EQ(s2.tiles_visited, s1.tiles_visited);
  EXPECT_EQ(s2.tiles_skipped, s1.tiles_skipped);
  double diff = 0;
  for (size_t i = 0; i < out1.size(); ++i)
    diff = std::max(diff, double(std::fabs(out1[i] - out2[i])));
  EXPECT_LE(diff, 1e-5);  // only the max the exponentials are taken against differs
  for (size_t i = 0; i < lse1.size(); ++i) EXPECT_NEAR(lse1[i], lse2[i], 1e-5) << i;
  // The carried max leaves as every visible key's (a skipped tile lies below it).
  const double c = 1.0 / std::sqrt(double(d)) / std::log(2.0);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < n; i += 37) {
      double best = -1e300;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e)
          dot += double(x.q[size_t((i * Hq + h) * d + e)]) *
                 double(x.k[size_t((j * Hkv + h / 2) * d + e)]);
        best = std::max(best, dot * c);
      }
      EXPECT_NEAR(carry[size_t(h * n + i)], best, 1e-4) << h << " " << i;
    }
}

// The plain twin: for each (head, 64-row query tile) of a run, the running max seeded in
// double from the diagonal and sink tiles, then every piece's tiles in local-first order
// (diagonal-spanning tile, sink tile, nearest first) against it, skipping by the same rule;
// each row's softmax over the kept keys in double. Returns tiles skipped.
int64_t reference(Rows& x, const std::vector<std::vector<int64_t>>& pieces, int64_t run_pos,
                  int64_t run_len, std::vector<double>& out) {
  const double c = 1.0 / std::sqrt(double(d)) / std::log(2.0), log2_lambda = std::log2(kLambda);
  out.assign(size_t(run_len * Hq * d), 0.0);
  int64_t skipped = 0;
  const auto score = [&](int64_t h, int64_t i, int64_t j) {
    double dot = 0;
    for (int64_t e = 0; e < d; ++e)
      dot += double(x.q[size_t((i * Hq + h) * d + e)]) *
             double(x.k[size_t((j * Hkv + h / 2) * d + e)]);
    return dot * c;
  };
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t t0 = run_pos; t0 < run_pos + run_len; t0 += 64) {
      const int64_t t1 = std::min(t0 + 64, run_pos + run_len), last = t1 - 1;
      std::vector<double> m(size_t(t1 - t0), -1e300);
      // Seed: the diagonal tile and the sink tile.
      for (int64_t i = t0; i < t1; ++i)
        for (int64_t j = 0; j <= i; ++j)
          if (j / 64 == last / 64 || j < 64)
            m[size_t(i - t0)] = std::max(m[size_t(i - t0)], score(h, i, j));
      std::vector<char> kept(size_t(last + 1), 0);
      for (const auto& pc : pieces) {
        // The piece's 64-key tiles (packed order) with a visible key, local-first.
        std::vector<std::vector<int64_t>> tiles;
        for (size_t a = 0; a < pc.size(); a += 64) {
          std::vector<int64_t> tk;
          for (size_t b = a; b < std::min(pc.size(), a + 64); ++b) tk.push_back(pc[b]);
          if (tk.front() <= last) tiles.push_back(tk);
        }
        const auto dist = [&](const std::vector<int64_t>& tk) {
          return tk.back() < last ? last - tk.back() : tk.front() > last ? tk.front() - last : 0;
        };
        int64_t diag = -1, best = std::numeric_limits<int64_t>::max();
        for (size_t a = 0; a < tiles.size(); ++a)
          if (dist(tiles[a]) < best) best = dist(tiles[a]), diag = int64_t(a);
        std::vector<size_t> order(tiles.size());
        for (size_t a = 0; a < order.size(); ++a) order[a] = a;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          const auto rank = [&](size_t z) {
            return int64_t(z) == diag ? 0 : tiles[z].front() == 0 ? 1 : 2;
          };
          return std::pair(rank(a), dist(tiles[a])) < std::pair(rank(b), dist(tiles[b]));
        });
        for (size_t a : order) {
          const std::vector<int64_t>& tk = tiles[a];
          bool keep = tk.front() <= last && tk.back() >= last;  // spans the diagonal
          std::vector<double> tmax(m.size(), -1e300);
          for (int64_t i = t0; i < t1; ++i)
            for (int64_t j : tk)
              if (j <= i) tmax[size_t(i - t0)] = std::max(tmax[size_t(i - t0)], score(h, i, j));
          for (size_t r = 0; r < m.size(); ++r)
            if (tmax[r] - m[r] >= log2_lambda) keep = true;
          if (!keep) {
            ++skipped;
            continue;
          }
          for (size_t r = 0; r < m.size(); ++r) m[r] = std::max(m[r], tmax[r]);
          for (int64_t j : tk) kept[size_t(j)] = 1;
        }
      }
      for (int64_t i = t0; i < t1; ++i) {
        double mx = -1e300, l = 0;
        for (int64_t j = 0; j <= i; ++j)
          if (kept[size_t(j)]) mx = std::max(mx, score(h, i, j));
        std::vector<double> o(size_t(d), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          if (!kept[size_t(j)]) continue;
          const double p = std::exp2(score(h, i, j) - mx);
          l += p;
          for (int64_t e = 0; e < d; ++e)
            o[size_t(e)] += p * double(x.v[size_t((j * Hkv + h / 2) * d + e)]);
        }
        for (int64_t e = 0; e < d; ++e)
          out[size_t(((i - run_pos) * Hq + h) * d + e)] = o[size_t(e)] / l;
      }
    }
  return skipped;
}

// Rank 0 of a two-rank ring in one process: runs [0, 128) and [320, 384) (its own piece), the
// other rank's [128, 320) second; each run seeded, each piece merged by (O, LSE).
TEST(BlasstPiece, TwoPiecesMatchThePlainCarriedRule) {
  const int64_t n = 384;
  Rows x(n);
  std::vector<int64_t> own = range(0, 128), other = range(128, 320);
  for (int64_t p = 320; p < n; ++p) own.push_back(p);
  const PackedKV mine = piece(x, own), theirs = piece(x, other), sink = piece(x, range(0, 64));
  int64_t skipped = 0, ref_skipped = 0;
  for (const auto [pos, len] : {std::pair<int64_t, int64_t>{0, 128}, {320, 64}}) {
    std::vector<float> carry(size_t(Hq * len), -kInf), out(size_t(len * Hq * d)), tmp(out.size()),
        lse(size_t(Hq * len)), tlse(lse.size());
    const TensorView qv = x.qv(pos, len);
    blasst_seed_max(qv, mine, true, carry.data(), opts(pos));
    blasst_seed_max(qv, sink, false, carry.data(), opts(pos));
    Stats st;
    const TensorView ov = TensorView::shd(out.data(), DType::f32, Hq, len, d),
                     tv = TensorView::shd(tmp.data(), DType::f32, Hq, len, d);
    attention_blasst_piece(qv, mine, ov, kLambda, carry.data(), opts(pos), lse.data(), &st);
    if (pos > 128) {
      attention_blasst_piece(qv, theirs, tv, kLambda, carry.data(), opts(pos), tlse.data(), &st);
      merge_attention(ov, lse.data(), tv, tlse.data(), ov, lse.data());
    }
    skipped += st.tiles_skipped;
    std::vector<double> ref;
    const std::vector<std::vector<int64_t>> seen =
        pos > 128 ? std::vector<std::vector<int64_t>>{own, other}
                  : std::vector<std::vector<int64_t>>{own};
    ref_skipped += reference(x, seen, pos, len, ref);
    double diff = 0;
    for (size_t i = 0; i < out.size(); ++i)
      diff = std::max(diff, std::fabs(double(out[i]) - ref[i]));
    EXPECT_LE(diff, 1e-4) << "run at " << pos;
  }
  EXPECT_GT(skipped, 0);
  EXPECT_EQ(skipped, ref_skipped);
}

TEST(BlasstPiece, NullRunningMaxIsAnError) {
  Rows x(64);
  const PackedKV kv = piece(x, range(0, 64));
  std::vector<float> out(x.q.size());
  EXPECT_THROW(
      attention_blasst_piece(x.qv(0, 64), kv, TensorView::shd(out.data(), DType::f32, Hq, 64, d),
                             kLambda, nullptr, opts(0)),
      Error);
  EXPECT_THROW(blasst_seed_max(x.qv(0, 64), kv, true, nullptr, opts(0)), Error);
  std::vector<float> carry(size_t(Hq * 64), -kInf);
  EXPECT_THROW(
      attention_blasst_piece(x.qv(0, 64), kv, TensorView::shd(out.data(), DType::f32, Hq, 64, d),
                             1.5, carry.data(), opts(0)),
      Error);
}

}  // namespace
