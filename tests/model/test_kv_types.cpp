// KV cache storage types (-ctk / -ctv): a PackedKV storing K and V as f16, bf16 or q8_0 must
// compute exactly what an f32 PackedKV of the same values rounded the same way computes (the
// kernels widen each tile to the same f32 values, or read 16-bit ones in place in the same
// order; same arithmetic, so the same bits), and that is the exact reference over the rounded
// K/V within float tolerance (decode over key ranges read in place groups keys into tiles its
// own way: the reference only). The rounding itself
// is checked against plain scalar twins written from the formats (and ggml's own dequantizer
// for q8_0's bytes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/flash-inl.h"
#include "kernels/packed_kv.hpp"
#include "model/kv_cache.hpp"
#include "packed_kv_state.hpp"
#include "spattn/attention.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/row_groups.hpp"
#include "spattn/sparse_attention.hpp"
#include "targets.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

constexpr KVType kTypes[] = {KVType::f32, KVType::f16, KVType::bf16, KVType::q8_0};

// t with every row rounded as a cache of `type` stores it (f32 tensor).
Tensor rounded(const TensorView& t, KVType type) {
  Tensor r(DType::f32, t.heads, t.seq, t.dim);
  std::vector<float> row(size_t(t.dim));
  for (int64_t h = 0; h < t.heads; ++h)
    for (int64_t s = 0; s < t.seq; ++s) {
      for (int64_t c = 0; c < t.dim; ++c) row[size_t(c)] = t.get(h, s, c);
      kv_round_row(type, row.data(), row.data(), t.dim);
      for (int64_t c = 0; c < t.dim; ++c) r.view().set(h, s, c, row[size_t(c)]);
    }
  return r;
}

// ---------------------------------------------------------------------------------------
// The types and their rounding.

TEST(KVType, NamesParseAndNonsenseIsANamedError) {
  for (KVType t : kTypes) EXPECT_EQ(parse_kv_type(kv_type_name(t)), t);
  try {
    parse_kv_type("nonsense");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown KV cache type 'nonsense' (expected f32, f16, bf16 or q8_0)");
  }
  EXPECT_THROW(parse_kv_type("F16"), Error);
  EXPECT_THROW(parse_kv_type("q4_0"), Error);
  EXPECT_THROW(parse_kv_type(""), Error);
}

TEST(KVType, HalfTypesRoundToNearestEven) {
  std::vector<float> x = {0.0f,     -0.0f,    1.0f,  1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                          65504.0f, 70000.0f, 1e-8f, -3.14159265f,       1.0f + 1.0f / 256};
  std::vector<float> y(x.size());
  kv_round_row(KVType::f16, x.data(), y.data(), int64_t(x.size()));
  EXPECT_EQ(y[3], 1.0f);               // tie at 1 + 2^-11: to even (1.0)
  EXPECT_EQ(y[4], 1.0f + 1.0f / 512);  // tie at 1 + 3 * 2^-11: to even (1 + 2^-9)
  EXPECT_TRUE(std::isinf(y[6]));       // beyond f16's range
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], f16_to_f32(f32_to_f16(x[i]))) << x[i];
  kv_round_row(KVType::bf16, x.data(), y.data(), int64_t(x.size()));
  EXPECT_EQ(y[9], 1.0f);  // tie at 1 + 2^-8: to even (1.0)
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], bf16_to_f32(f32_to_bf16(x[i]))) << x[i];
  kv_round_row(KVType::f32, x.data(), y.data(), int64_t(x.size()));
  EXPECT_EQ(x, y);
}

// The f16 round trip runs on vectors where the target converts (F16C, AVX-512): every target's
// result must be the scalar converters' bits, at the range's edges (the largest half, the first
// value that overflows, subnormals and their halfway points, zeros), on NaNs whatever their
// payload, and on random values of every magnitude, in rows whose lengths leave every tail.
TEST(KVType, HalfRoundingIsTheScalarConvertersOnEveryTarget) {
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x477fe000u, 0x477fefffu, 0x477ff000u,
                                0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00123u, 0x7fffffffu,
                                0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u, 0x32ffffffu,
                                0x33c00000u, 0xb3c00000u, 0x00000001u, 0x3f801000u, 0x3f803000u};
  std::mt19937 rng(3);
  for (int i = 0; i < 4000; ++i) bits.push_back(rng());
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * sizeof(float));
  test::for_each_target([&] {
    for (int64_t n : {int64_t(x.size()), int64_t(1), int64_t(7), int64_t(17), int64_t(33)}) {
      std::vector<float> y(size_t(n), 12345.0f);
      kv_round_row(KVType::f16, x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float want = f16_to_f32(f32_to_f16(x[size_t(i)]));
        ASSERT_EQ(std::memcmp(&y[size_t(i)], &want, sizeof(float)), 0)
            << "input bits 0x" << std::hex << bits[size_t(i)] << ": got " << y[size_t(i)]
            << ", want " << want;
      }
    }
    std::vector<float> z = x;  // in place, as the runner rounds its rows
    kv_round_row(KVType::f16, z.data(), z.data(), int64_t(z.size()));
    for (size_t i = 0; i < z.size(); ++i) {
      const float want = f16_to_f32(f32_to_f16(x[i]));
      ASSERT_EQ(std::memcmp(&z[i], &want, sizeof(float)), 0) << "in place, at " << i;
    }
  });
}

// q8_0 from the format: per block of 32, d = max|x| / 127 stored as f16, q = round(x / d) in
// [-127, 127], value q * f16(d). ggml's CPU quantizer (what llama.cpp's cache writes with)
// multiplies by 127 / max|x| and rounds half to even on x86; its reference quantizer
// multiplies by 1 / d and rounds half away from zero. Each value must be one of the two.
TEST(KVType, Q8_0RoundsAsGgmlQuantizes) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float sigma : {1.0f, 1e-3f, 300.0f}) {
    std::vector<float> x(256), y(256);
    for (float& v : x) v = n(rng) * sigma;
    for (int i = 32; i < 64; ++i) x[size_t(i)] = float(i - 48) * 0.5f;  // exact ties at 127 / 8
    for (int i = 64; i < 96; ++i) x[size_t(i)] = 0.0f;                  // an all-zero block
    kv_round_row(KVType::q8_0, x.data(), y.data(), 256);
    for (int b = 0; b < 256; b += 32) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(x[size_t(b + i)]));
      const float d = f16_to_f32(f32_to_f16(amax / 127.0f));
      const float id_cpu = amax != 0 ? 127.0f / amax : 0.0f;
      const float dref = amax / 127.0f, id_ref = dref != 0 ? 1.0f / dref : 0.0f;
      for (int i = 0; i < 32; ++i) {
        const float xi = x[size_t(b + i)];
        const float a = std::nearbyint(xi * id_cpu) * d, r = std::round(xi * id_ref) * d;
        EXPECT_TRUE(y[size_t(b + i)] == a || y[size_t(b + i)] == r)
            << "sigma " << sigma << " value " << b + i << ": " << y[size_t(b + i)] << " vs " << a;
      }
    }
    // The bytes kv_quantize_q8_0 writes, as block_q8_0, decode with ggml's dequantizer to the
    // same values.
    std::vector<int8_t> qs(256);
    std::vector<uint16_t> sc(8);
    kv_quantize_q8_0(x.data(), 256, qs.data(), sc.data());
    std::vector<uint8_t> blocks(8 * 34);
    for (int b = 0; b < 8; ++b) {
      std::memcpy(blocks.data() + b * 34, &sc[size_t(b)], 2);
      std::memcpy(blocks.data() + b * 34 + 2, qs.data() + b * 32, 32);
    }
    std::vector<float> z(256);
    gguf::dequantize_row(gguf::GgmlType::q8_0, blocks.data(), z.data(), 256);
    EXPECT_EQ(y, z);
    // Rounding twice changes nothing (the session rounds rows before the cache packs them).
    std::vector<float> w(256);
    kv_round_row(KVType::q8_0, y.data(), w.data(), 256);
    EXPECT_EQ(y, w);
  }
  std::vector<float> odd(40);
  EXPECT_THROW(kv_round_row(KVType::q8_0, odd.data(), odd.data(), 40), Error);
}

// ---------------------------------------------------------------------------------------
// Kernels over stored types: bitwise the f32 cache of the rounded values, and near the exact
// reference.

struct Case {
  KVType k, v;
};
std::vector<Case> type_cases() {
  std::vector<Case> c;
  for (KVType t : kTypes) c.push_back({t, t});
  c.push_back({KVType::q8_0, KVType::f16});  // llama.cpp lets -ctk and -ctv differ
  c.push_back({KVType::f32, KVType::bf16});
  return c;
}
std::string name(const Case& c) { return std::string(kv_type_name(c.k)) + "/" + kv_type_name(c.v); }

struct Inputs {
  Tensor q, k, v, kr, vr;
  Inputs(int64_t hq, int64_t hk, int64_t lq, int64_t lk, int64_t d, Case c, float q_sigma = 1)
      : q(test::random_tensor(DType::f32, hq, lq, d, 31, q_sigma)),
        k(test::random_tensor(DType::f32, hk, lk, d, 32)),
        v(test::random_tensor(DType::f32, hk, lk, d, 33)),
        kr(rounded(k, c.k)),
        vr(rounded(v, c.v)) {}
};

TEST(KVTypes, DenseAndDecodeEqualTheF32CacheOfRoundedValues) {
  for (const Case& c : type_cases())
    for (bool causal : {true, false})
      // Decode's groups of 4, 2 and 3 q heads read 16-bit tiles in place in row strips of
      // 4, 2 and 4 (one of padding), their P V over 128 dims (one 8-vector strip on AVX-512)
      // or 96.
      for (auto [hq, hk, lq, lk, d] :
           {std::array<int64_t, 5>{4, 2, 77, 333, 64}, std::array<int64_t, 5>{3, 3, 64, 64, 64},
            std::array<int64_t, 5>{8, 2, 1, 2100, 64}, std::array<int64_t, 5>{4, 2, 1, 1000, 128},
            std::array<int64_t, 5>{6, 2, 1, 700, 96}}) {
        if (lq == 1 && !causal) continue;  // one query sees every key either way
        Inputs in(hq, hk, lq, lk, d, c, 1.0f);
        AttnOptions opt;
        opt.causal = causal;
        Tensor r(DType::f32, hq, lq, d);
        attention_reference(in.q, in.kr, in.vr, r, opt);
        const PackedKV plain = PackedKV::pack(in.kr, in.vr);
        test::for_each_target([&] {
          const PackedKV stored = PackedKV::pack(in.k, in.v, 0, 0, true, c.k, c.v);
          EXPECT_EQ(stored.k_type(), c.k);
          EXPECT_EQ(stored.v_type(), c.v);
          Tensor a(DType::f32, hq, lq, d), b(DType::f32, hq, lq, d);
          std::vector<float> la(size_t(hq * lq)), lb(size_t(hq * lq));
          attention_dense(in.q, stored, a, opt, la.data());
          attention_dense(in.q, plain, b, opt, lb.data());
          EXPECT_TRUE(test::bitwise_equal(a, b)) << name(c);
          EXPECT_EQ(la, lb) << name(c);
          const test::Diff df = test::diff(a, r);
          EXPECT_LT(df.max_abs, 2e-5 * std::max(1.0, df.ref_max)) << name(c);
          if (lq <= kMaxDecodeQueries) {
            Tensor e(DType::f32, hq, lq, d), f(DType::f32, hq, lq, d);
            attention_decode(in.q, stored, e, opt);
            attention_decode(in.q, plain, f, opt);
            EXPECT_TRUE(test::bitwise_equal(e, f)) << name(c);
            EXPECT_LT(test::diff(e, r).max_abs, 2e-5) << name(c);
            // A GQA group's q heads run as one item's rows (when nothing is recorded per q
            // head): the same bits as one item per q head, which a skip record still asks for.
            Tensor g(DType::f32, hq, lq, d);
            SkipStats per_head;
            attention_decode(in.q, stored, g, opt, {}, nullptr, nullptr, &per_head);
            EXPECT_TRUE(test::bitwise_equal(e, g)) << name(c);
            // BLASST's skipping decode (local-first) reads the same tiles.
            DecodeOptions dopt;
            dopt.lambda = 1e-3;
            dopt.order = BlasstOrder::local_first;
            attention_decode(in.q, stored, e, opt, dopt);
            attention_decode(in.q, plain, f, opt, dopt);
            EXPECT_TRUE(test::bitwise_equal(e, f)) << name(c);
          }
        });
      }
}

TEST(KVTypes, ExtremeLogitsStayExact) {
  for (const Case& c : type_cases()) {
    Inputs in(2, 1, 70, 200, 64, c, 40.0f);  // scores in the hundreds: one key dominates
    const PackedKV stored = PackedKV::pack(in.k, in.v, 0, 0, true, c.k, c.v);
    Tensor a(DType::f32, 2, 70, 64), r(DType::f32, 2, 70, 64);
    attention_dense(in.q, stored, a);
    attention_reference(in.q, in.kr, in.vr, r);
    const test::Diff df = test::diff(a, r);
    EXPECT_LT(df.max_abs, 1e-4 * std::max(1.0, df.ref_max)) << name(c);
  }
}

TEST(KVTypes, SparseFormsEqualTheF32CacheOfRoundedValues) {
  test::for_each_target([] {
    for (const Case& c : type_cases()) {
      Inputs in(4, 2, 200, 450, 64, c);
      const PackedKV stored = PackedKV::pack(in.k, in.v, 0, 0, true, c.k, c.v);
      const PackedKV plain = PackedKV::pack(in.kr, in.vr);
      // Block-sparse: about half the causal key blocks, the diagonal's always.
      const int64_t qb = (200 + 63) / 64, kb = (450 + 63) / 64;
      std::vector<std::vector<int32_t>> lists;
      BlockMask full = BlockMask::full(4, 200, 450, 64, 64, true);
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t i = 0; i < qb; ++i) {
          std::vector<int32_t> l;
          const auto row = full.row(h, i);
          for (size_t j = 0; j < row.size(); ++j)
            if ((i + row[j] + h) % 2 == 0 || j + 1 == row.size()) l.push_back(row[j]);
          lists.push_back(l);
        }
      (void)kb;
      const BlockMask mask = BlockMask::from_lists(4, 200, 450, 64, 64, true, lists);
      mask.validate();
      Tensor a(DType::f32, 4, 200, 64), b(DType::f32, 4, 200, 64);
      attention_block_sparse(in.q, stored, a, mask);
      attention_block_sparse(in.q, plain, b, mask);
      EXPECT_TRUE(test::bitwise_equal(a, b)) << name(c);
      // Query-sparse: every third row.
      std::vector<int64_t> rows;
      for (int64_t i = 0; i < 200; i += 3) rows.push_back(i);
      Tensor e(DType::f32, 4, int64_t(rows.size()), 64), f(DType::f32, 4, int64_t(rows.size()), 64);
      attention_query_sparse(in.q, stored, rows, e);
      attention_query_sparse(in.q, plain, rows, f);
      EXPECT_TRUE(test::bitwise_equal(e, f)) << name(c);
      // Row groups over ranges off the 64-key grid (shifted tiles and copied pieces).
      std::vector<RowGroup> groups(2);
      for (int64_t i = 0; i < 200; ++i) groups[size_t(i % 2)].rows.push_back(i);
      groups[0].keys = {{5, 90}, {130, 131}, {200, 380}};
      groups[1].keys = {{33, 250}, {251, 299}};
      Tensor g(DType::f32, 4, 200, 64), h(DType::f32, 4, 200, 64);
      attention_row_groups(in.q, stored, groups, g);
      attention_row_groups(in.q, plain, groups, h);
      EXPECT_TRUE(test::bitwise_equal(g, h)) << name(c);
    }
  });
}

// Decode over key ranges with K and V stored in 16 bits reads the ranges' 16-key groups in
// place, four to a tile (kernels/group_tiles-inl.h): ranges off the group grid, ranges
// sharing a group, single keys, the cache's last partial group, K and V in different 16-bit
// types, causal rows at the end of the cache, and more rows than the in-place path takes
// (widened instead). Each row against a double softmax over exactly its keys, rounded as stored.
TEST(KVTypes, DecodeOverRangesReadsStoredGroupsInPlace) {
  const int64_t d = 64, hk = 2, n = 1000;
  const std::vector<std::vector<KeyRange>> shapes = {
      {{0, 16}, {48, 80}, {992, 1000}},          // whole groups and the last partial one
      {{5, 21}, {21, 22}, {30, 31}, {40, 700}},  // off the grid, sharing groups, one key
      {{3, 4}, {17, 18}, {33, 34}, {49, 50}, {65, 999}},
      {{0, 1000}}};
  test::for_each_target([&] {
    for (Case c : {Case{KVType::f16, KVType::f16}, Case{KVType::bf16, KVType::bf16},
                   Case{KVType::f16, KVType::bf16}, Case{KVType::bf16, KVType::f16}})
      for (int64_t rows : {1, 3, 5, 8, 9})  // 9 rows pad to 12: widened, not in place
        for (bool causal : {false, true}) {
          const int64_t hq = 4;
          Inputs in(hq, hk, rows, n, d, c);
          const PackedKV kv = PackedKV::pack(in.k, in.v, 0, 0, true, c.k, c.v);
          std::vector<std::vector<KeyRange>> ranges;
          for (int64_t h = 0; h < hq; ++h) ranges.push_back(shapes[size_t(h)]);
          AttnOptions opt;
          opt.causal = causal;  // rows at positions n - rows .. n - 1
          Tensor out(DType::f32, hq, rows, d);
          std::vector<float> lse(size_t(hq * rows));
          attention_decode_ranges(in.q, kv, out, ranges, opt, lse.data());
          const double scale = 1.0 / std::sqrt(double(d));
          for (int64_t h = 0; h < hq; ++h)
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t pos = causal ? n - rows + r : n - 1;
              std::vector<double> logit, acc(size_t(d), 0.0);
              std::vector<int64_t> keys;
              for (const KeyRange& kr : ranges[size_t(h)])
                for (int64_t j = kr.begin; j < std::min(kr.end, pos + 1); ++j) keys.push_back(j);
              double mx = -1e300;
              for (int64_t j : keys) {
                double x = 0;
                for (int64_t e = 0; e < d; ++e)
                  x += double(in.q.view().get(h, r, e)) * in.kr.view().get(h / 2, j, e);
                logit.push_back(x * scale);
                mx = std::max(mx, x * scale);
              }
              double sum = 0;
              for (size_t i = 0; i < keys.size(); ++i) {
                const double w = std::exp(logit[i] - mx);
                sum += w;
                for (int64_t e = 0; e < d; ++e)
                  acc[size_t(e)] += w * in.vr.view().get(h / 2, keys[i], e);
              }
              for (int64_t e = 0; e < d; ++e)
                ASSERT_NEAR(out.view().get(h, r, e), acc[size_t(e)] / sum, 2e-5)
                    << name(c) << " rows " << rows << " causal " << causal << " head " << h
                    << " row " << r << " dim " << e;
              EXPECT_NEAR(lse[size_t(h * rows + r)], mx + std::log(sum), 2e-5) << name(c);
            }
        }
  });
}

// The loop's other ways of reading tiles, with test policies: gathered key columns (kGather),
// ranges packed as shifted tiles and pieces (kPackFragments) and per-head packed columns
// (kPackedColumns). Compiled for this TU's static target.
namespace kn = kernels::HWY_NAMESPACE;

struct ColumnsAndFragments : kernels::DensePolicy {
  struct KeySource : kernels::DensePolicy::KeySource {
    static constexpr bool kGather = true;
  };
  void key_ranges(const kernels::Problem&, int64_t h, int64_t t, int64_t limit,
                  std::vector<KeyRange>& out) const {
    out.push_back(
        {std::max<int64_t>(0, limit - 150 + 7 * h), std::max<int64_t>(0, limit - 70 + t)});
  }
  void key_columns(const kernels::Problem&, int64_t h, int64_t, int64_t,
                   std::vector<int64_t>& out) const {
    for (int64_t j = 3 + h; j < 420; j += 7) out.push_back(j);
  }
};
struct SlashLike : kernels::DensePolicy {
  struct KeySource : kernels::DensePolicy::KeySource {
    static constexpr bool kPackedColumns = true;
    static constexpr bool kPackFragments = true;
  };
  void key_ranges(const kernels::Problem&, int64_t h, int64_t t, int64_t limit,
                  std::vector<KeyRange>& out) const {
    const int64_t a = t * 64 + 11 * h + 1;  // off the grid
    out.push_back({a, std::min(limit, a + 100)});
    out.push_back({a + 120, std::min(limit, a + 150)});
  }
  void head_columns(const kernels::Problem&, int64_t h, std::vector<int64_t>& out) const {
    for (int64_t j = h; j < 400; j += 13) out.push_back(j);
  }
};

template <class Policy>
void run_policy(const Inputs& in, const PackedKV& kv, const TensorView& out) {
  AttnOptions opt;
  kernels::Problem p = kernels::make_problem(in.q, kv.data(), out, opt, nullptr);
  Policy pol;
  kn::RunFlash(p, pol, nullptr);
}

TEST(KVTypes, GatheredShiftedAndColumnTilesEqualTheF32Cache) {
  // 197 rows: the last query tile's 5 rows read 16-bit tiles in place (group_tiles-inl.h).
  for (int64_t rows : {230, 197})
    for (const Case& c : type_cases()) {
      Inputs in(4, 2, rows, 460, 64, c);
      const PackedKV stored = PackedKV::pack(in.k, in.v, 0, 0, true, c.k, c.v);
      const PackedKV plain = PackedKV::pack(in.kr, in.vr);
      Tensor a(DType::f32, 4, rows, 64), b(DType::f32, 4, rows, 64);
      run_policy<ColumnsAndFragments>(in, stored, a);
      run_policy<ColumnsAndFragments>(in, plain, b);
      EXPECT_TRUE(test::bitwise_equal(a, b)) << name(c) << " rows " << rows;
      Tensor e(DType::f32, 4, rows, 64), f(DType::f32, 4, rows, 64);
      run_policy<SlashLike>(in, stored, e);
      run_policy<SlashLike>(in, plain, f);
      EXPECT_TRUE(test::bitwise_equal(e, f)) << name(c) << " rows " << rows;
    }
}

// ---------------------------------------------------------------------------------------
// The cache's life: appends, truncate, copy.

TEST(KVTypes, AppendInChunksTruncateAndCopyKeepTheBytes) {
  for (const Case& c : type_cases()) {
    Inputs in(4, 2, 1, 700, 96, c);
    const PackedKV whole = PackedKV::pack(in.k, in.v, 1000, 0, true, c.k, c.v);
    PackedKV grown(2, 96, DType::f32, 1000, true, c.k, c.v);
    int64_t at = 0;
    for (int64_t piece : {1, 63, 100, 64, 200, 272}) {
      grown.append(in.k.view().rows(at, piece), in.v.view().rows(at, piece));
      at += piece;
    }
    EXPECT_EQ(test::packed_kv_difference(whole, grown), "") << name(c);
    // truncate(n) leaves what packing n keys leaves; copy(n) too.
    for (int64_t n : {0, 1, 64, 333}) {
      PackedKV t = whole.copy();
      t.truncate(n);
      PackedKV fresh(2, 96, DType::f32, 1000, true, c.k, c.v);
      if (n > 0) fresh.append(in.k.view().rows(0, n), in.v.view().rows(0, n));
      EXPECT_EQ(test::packed_kv_difference(t, fresh), "") << name(c) << " n " << n;
      EXPECT_EQ(test::packed_kv_difference(whole.copy(n), fresh), "") << name(c) << " n " << n;
    }
  }
}

// The runner's cache: its raw rows (method mode) hold what its packed tiles hold, rounded to
// the cache's types, and a fork keeps the types.
TEST(KVTypes, RunnerCacheRawRowsAreRoundedAsThePackedOnes) {
  const Case c{KVType::q8_0, KVType::f16};
  Inputs in(4, 2, 1, 150, 64, c);
  model::KVCache cache(2, 2, 64, 200, DType::f32, /*raw=*/true, c.k, c.v);
  for (int64_t l = 0; l < 2; ++l) {
    cache.append(l, in.k.view().rows(0, 100), in.v.view().rows(0, 100), 1);
    cache.append(l, in.k.view().rows(100, 50), in.v.view().rows(100, 50), 1);
  }
  cache.commit();
  EXPECT_TRUE(test::bitwise_equal(cache.raw_k(1), in.kr));
  EXPECT_TRUE(test::bitwise_equal(cache.raw_v(1), in.vr));
  const PackedKV plain = PackedKV::pack(in.kr, in.vr, 200);
  Tensor a(DType::f32, 4, 1, 64), b(DType::f32, 4, 1, 64);
  attention_decode(in.q, cache.packed(1), a);
  attention_decode(in.q, plain, b);
  EXPECT_TRUE(test::bitwise_equal(a, b));
  const model::KVCache f = cache.fork(120);
  EXPECT_EQ(f.k_type(), c.k);
  EXPECT_EQ(f.v_type(), c.v);
  EXPECT_EQ(f.packed(0).k_type(), c.k);
  const size_t tiles = PackedKV(2, 64, DType::f32, 200, true, c.k, c.v).bytes();  // no keys
  EXPECT_GE(cache.packed_bytes(), 2 * tiles);  // and each layer's positions
  EXPECT_LE(cache.packed_bytes(), 2 * tiles + 2 * 200 * sizeof(int64_t));
}

TEST(KVTypes, BytesFollowTheTypes) {
  const int64_t d = 128, cap = 4096;
  const auto bytes = [&](KVType k, KVType v) {
    return double(PackedKV(8, d, DType::f32, cap, true, k, v).bytes());  // no keys: tiles only
  };
  const double f32 = bytes(KVType::f32, KVType::f32);
  EXPECT_EQ(f32, 2.0 * 8 * cap * d * 4);
  EXPECT_EQ(bytes(KVType::f16, KVType::f16), f32 / 2);
  EXPECT_EQ(bytes(KVType::bf16, KVType::bf16), f32 / 2);
  EXPECT_EQ(bytes(KVType::q8_0, KVType::q8_0), f32 * 34 / 128);
  EXPECT_EQ(bytes(KVType::q8_0, KVType::f16), f32 * (34.0 / 128 + 0.5) / 2);
}

TEST(KVTypes, Q8_0NeedsBlocksOf32) {
  try {
    PackedKV kv(2, 40, DType::f32, 100, true, KVType::q8_0, KVType::f16);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(PackedKV(2, 40, DType::f32, 100, true, KVType::f32, KVType::q8_0), Error);
  EXPECT_NO_THROW(PackedKV(2, 40, DType::f32, 100, true, KVType::f16, KVType::bf16));
}

}  // namespace
}  // namespace spattn
