// attention_dense_continue (spattn/attention_state.hpp): the dense loop over a range of packed
// keys, its rows' online-softmax state loaded before the first tile and stored after the last
// (the flash loop's kCarry hooks) instead of starting empty and normalising.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense_continue.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/flash-inl.h"
#include "spattn/attention_state.hpp"

#ifndef SPATTN_KERNELS_DENSE_CONTINUE_POLICY_
#define SPATTN_KERNELS_DENSE_CONTINUE_POLICY_
namespace spattn::kernels {

// The dense policy over packed keys [begin, end), its state in an AttnState.
struct ContinuePolicy : DensePolicy {
  struct TileState : DensePolicy::TileState {
    static constexpr bool kCarry = true;
  };
  AttnState* state = nullptr;
  int64_t begin = 0, end = 0;

  void key_ranges(const Problem&, int64_t, int64_t, int64_t key_limit,
                  std::vector<KeyRange>& out) const {
    out.push_back({begin, std::min(end, key_limit)});
  }
  void load_state(const Problem&, const TileView& v, float* o, float* m, float* l,
                  int64_t dp) const {
    const AttnState& s = *state;
    for (int64_t r = 0; r < v.n; ++r) {
      const size_t at = size_t(v.h * s.rows + v.out_rows[r]);
      m[r] = s.m[at];
      l[r] = s.l[at];
      std::copy_n(s.o.begin() + at * size_t(s.dim), s.dim, o + r * dp);
    }
  }
  void store_state(const Problem&, const TileView& v, const float* o, const float* m,
                   const float* l, int64_t dp) const {
    AttnState& s = *state;
    for (int64_t r = 0; r < v.n; ++r) {
      const size_t at = size_t(v.h * s.rows + v.out_rows[r]);
      s.m[at] = m[r];
      s.l[at] = l[r];
      std::copy_n(o + r * dp, s.dim, s.o.begin() + at * size_t(s.dim));
    }
  }
};

}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void ContinueEntry(const Problem& p, AttnState* state, KeyRange keys, Stats* stats) {
  ContinuePolicy pol;
  pol.state = state;
  pol.begin = keys.begin;
  pol.end = keys.end;
  RunFlash(p, pol, stats);
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>
#include <limits>

#include "spattn/error.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(ContinueEntry);
}

void AttnState::reset(int64_t h, int64_t r, int64_t d) {
  heads = h, rows = r, dim = d;
  m.assign(size_t(h * r), -std::numeric_limits<float>::infinity());
  l.assign(size_t(h * r), 0.0f);
  o.assign(size_t(h * r * d), 0.0f);
}

void attention_dense_continue(const TensorView& q, const PackedKV& kv, KeyRange keys,
                              AttnState& state, const AttnOptions& opt, Stats* stats) {
  SPATTN_CHECK(state.heads == q.heads && state.rows == q.seq && state.dim == q.dim &&
                   state.m.size() == size_t(q.heads * q.seq) && state.l.size() == state.m.size() &&
                   state.o.size() == state.m.size() * size_t(q.dim),
               "attention_dense_continue: the state holds ", state.heads, " x ", state.rows, " x ",
               state.dim, " rows, q is ", q.shape_str());
  SPATTN_CHECK(keys.begin >= 0 && keys.begin <= keys.end && keys.end <= kv.size(),
               "attention_dense_continue: keys [", keys.begin, ", ", keys.end,
               ") outside the PackedKV's [0, ", kv.size(), ")");
  if (keys.begin == keys.end) return;
  // The state's O as the problem's out: validated for its shape, never written (kCarry).
  const TensorView out = TensorView::hsd(state.o.data(), DType::f32, q.heads, q.seq, q.dim);
  const kernels::Problem p = kernels::make_problem(q, kv.data(), out, opt, nullptr);
  HWY_DYNAMIC_DISPATCH(kernels::ContinueEntry)(p, &state, keys, stats);
}

void attention_state_finish(const AttnState& state, const TensorView& out, float* lse) {
  SPATTN_CHECK(out.heads == state.heads && out.seq == state.rows && out.dim == state.dim,
               "attention_state_finish: out ", out.shape_str(), " against a state of ", state.heads,
               " x ", state.rows, " x ", state.dim);
  for (int64_t h = 0; h < state.heads; ++h)
    for (int64_t r = 0; r < state.rows; ++r) {
      const size_t at = size_t(h * state.rows + r);
      const float l = state.l[at];
      // Finalize's arithmetic (flash_softmax-inl.h): O times 1 / l, the LSE from RowLse.
      kernels::store_row(out, h, r, state.o.data() + at * size_t(state.dim), state.dim,
                         l > 0 ? 1.0f / l : 0.0f);
      if (lse) lse[at] = kernels::RowLse(state.m[at], l);
    }
}

}  // namespace spattn
#endif  // HWY_ONCE
