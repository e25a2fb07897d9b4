// The C ABI of spattn/spattn_c.h: argument structs to TensorViews, spattn::Error to a message.
#include "spattn/spattn_c.h"

#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/sparse_attention.hpp"
#include "spattn/workload.hpp"

struct spattn_c_plan {
  spattn::cuda::BlockSparsePlan plan;
};

namespace {

using namespace spattn;

BlockMask grid_mask(const uint8_t* grid, int64_t heads, int64_t q_len, int64_t kv_len,
                    int64_t block_q, int64_t block_k, bool causal) {
  SPATTN_CHECK(grid, "spattn_c: block_sparse needs a grid or a plan");
  SPATTN_CHECK(heads > 0 && q_len >= 0 && kv_len >= 0 && block_q > 0 && block_k > 0,
               "spattn_c: bad mask geometry");
  const int64_t nqb = (q_len + block_q - 1) / block_q, nkb = (kv_len + block_k - 1) / block_k;
  return BlockMask::from_dense(heads, q_len, kv_len, block_q, block_k, causal,
                               std::vector<uint8_t>(grid, grid + heads * nqb * nkb));
}

int fail(const char* msg, char* err, size_t err_len) {
  if (err && err_len) {
    std::strncpy(err, msg, err_len - 1);
    err[err_len - 1] = '\0';
  }
  return -1;
}

template <class F>
int guarded(F&& f, char* err, size_t err_len) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what(), err, err_len);
  }
}

TensorView view(const spattn_c_tensor& t, DType dt) {
  TensorView v;
  v.data = t.data, v.dtype = dt;
  v.heads = t.heads, v.seq = t.seq, v.dim = t.dim;
  v.stride_head = t.stride_head, v.stride_seq = t.stride_seq, v.stride_dim = 1;
  return v;
}

}  // namespace

extern "C" int spattn_c_cuda_device_count(void) { return spattn::cuda::device_count(); }

extern "C" int spattn_c_cuda_attention(spattn_c_attention* a, char* err, size_t err_len) {
  return guarded(
      [&] {
        SPATTN_CHECK(a && a->form, "spattn_c_cuda_attention: null arguments");
        SPATTN_CHECK(a->dtype == SPATTN_C_BF16 || a->dtype == SPATTN_C_F16,
                     "spattn_c_cuda_attention: dtype must be SPATTN_C_BF16 or SPATTN_C_F16");
        const DType dt = a->dtype == SPATTN_C_BF16 ? DType::bf16 : DType::f16;
        const TensorView q = view(a->q, dt), k = view(a->k, dt), v = view(a->v, dt),
                         out = view(a->out, dt);
        AttnOptions opt;
        opt.causal = a->causal != 0;
        opt.scale = a->scale;
        Stats st;
        Stats* stats = a->want_stats ? &st : nullptr;
        const std::string form = a->form;
        if (form == "dense") {
          cuda::attention_dense(q, k, v, out, opt, a->lse, stats, a->stream);
        } else if (form == "blasst") {
          cuda::attention_blasst(q, k, v, out, a->lambda, opt, a->lse, stats, nullptr,
                                 a->local_first ? BlasstOrder::local_first : BlasstOrder::in_order,
                                 a->stream);
        } else if (form == "decode") {
          DecodeOptions d;
          d.lambda = a->lambda;
          d.order = a->local_first ? BlasstOrder::local_first : BlasstOrder::in_order;
          cuda::attention_decode(q, k, v, out, opt, d, a->lse, stats, nullptr, a->stream);
        } else if (form == "block_sparse") {
          if (a->plan) {
            cuda::attention_block_sparse(q, k, v, out, a->plan->plan, opt, a->lse, stats,
                                         a->stream);
          } else {
            const BlockMask mask =
                grid_mask(a->grid, q.heads, q.seq, k.seq, a->block_q, a->block_k, opt.causal);
            cuda::attention_block_sparse(q, k, v, out, mask, opt, a->lse, stats, a->stream);
          }
        } else if (form == "query_sparse") {
          SPATTN_CHECK(a->row_stride >= 1, "spattn_c_cuda_attention: row_stride must be >= 1");
          cuda::attention_query_sparse(q, k, v, strided_rows(q.seq, a->row_stride), out, opt,
                                       a->lse, stats, a->stream);
        } else {
          detail::fail("spattn_c_cuda_attention: unknown form '", form,
                       "' (dense, blasst, decode, block_sparse, query_sparse)");
        }
        a->tiles_visited = st.tiles_visited, a->tiles_skipped = st.tiles_skipped;
        a->score_entries = st.score_entries, a->causal_entries = st.causal_entries;
      },
      err, err_len);
}

extern "C" int spattn_c_cuda_plan_block_sparse(const uint8_t* grid, int64_t heads, int64_t q_len,
                                               int64_t kv_len, int64_t block_q, int64_t block_k,
                                               int causal, spattn_c_plan** plan, char* err,
                                               size_t err_len) {
  return guarded(
      [&] {
        SPATTN_CHECK(plan, "spattn_c_cuda_plan_block_sparse: null plan pointer");
        *plan = new spattn_c_plan{cuda::BlockSparsePlan(
            grid_mask(grid, heads, q_len, kv_len, block_q, block_k, causal != 0))};
      },
      err, err_len);
}

extern "C" void spattn_c_cuda_plan_free(spattn_c_plan* plan) { delete plan; }

extern "C" int spattn_c_cuda_plan_method(const char* spec, spattn_c_attention* a,
                                         spattn_c_plan** plan, double* mask_host_ms, char* err,
                                         size_t err_len) {
  return guarded(
      [&] {
        SPATTN_CHECK(spec && a && plan, "spattn_c_cuda_plan_method: null arguments");
        const DType dt = a->dtype == SPATTN_C_BF16 ? DType::bf16 : DType::f16;
        AttnOptions opt;
        opt.causal = a->causal != 0;
        opt.scale = a->scale;
        const MethodReport r = make_method(spec)->run(
            view(a->q, dt), view(a->k, dt), view(a->v, dt), view(a->out, dt), opt, a->lse);
        SPATTN_CHECK(r.mask, "spattn_c_cuda_plan_method: ", spec, " builds no block mask");
        if (mask_host_ms)
          *mask_host_ms = r.extras.count("mask_host_ms") ? r.extras.at("mask_host_ms") : 0.0;
        a->tiles_visited = r.stats.tiles_visited, a->tiles_skipped = r.stats.tiles_skipped;
        a->score_entries = r.stats.score_entries, a->causal_entries = r.stats.causal_entries;
        *plan = new spattn_c_plan{cuda::BlockSparsePlan(*r.mask)};
      },
      err, err_len);
}

extern "C" int spattn_c_cuda_method(const char* spec, spattn_c_attention* a, char* err,
                                    size_t err_len) {
  return guarded(
      [&] {
        SPATTN_CHECK(spec && a, "spattn_c_cuda_method: null arguments");
        const DType dt = a->dtype == SPATTN_C_BF16 ? DType::bf16 : DType::f16;
        AttnOptions opt;
        opt.causal = a->causal != 0;
        opt.scale = a->scale;
        opt.stream = a->stream;
        const MethodReport r = make_method(spec)->run(
            view(a->q, dt), view(a->k, dt), view(a->v, dt), view(a->out, dt), opt, a->lse);
        a->tiles_visited = r.stats.tiles_visited, a->tiles_skipped = r.stats.tiles_skipped;
        a->score_entries = r.stats.score_entries, a->causal_entries = r.stats.causal_entries;
      },
      err, err_len);
}

extern "C" int spattn_c_workload_bf16(const char* kind, int64_t seq, int64_t heads,
                                      int64_t kv_heads, int64_t dim, uint64_t seed, void* q,
                                      void* k, void* v, char* err, size_t err_len) {
  return guarded(
      [&] {
        WorkloadConfig c;
        c.kind = parse_workload_kind(kind ? kind : "");
        c.seq = seq, c.heads = heads, c.kv_heads = kv_heads, c.dim = dim, c.seed = seed;
        c.dtype = DType::bf16;
        const Workload w = make_workload(c);
        std::memcpy(q, w.q.data(), w.q.nbytes());
        std::memcpy(k, w.k.data(), w.k.nbytes());
        std::memcpy(v, w.v.data(), w.v.nbytes());
      },
      err, err_len);
}
