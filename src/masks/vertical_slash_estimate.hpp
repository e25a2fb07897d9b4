// The vertical-slash estimate behind vertical_slash_index and its per-modality form (private
// to src/masks).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "spattn/masks.hpp"

namespace spattn::masks {

// The estimate both vertical-slash and the grid head start from (MInference's and MMInference's
// A_hat): for q head h, rows `est_rows` (sorted) against the candidate keys `keys` (ascending
// positions; null: every key), A_hat[r][i] = softmax_i(scale q_r . k_i) over the candidates at
// positions <= p_r. One sgemm per head; softmax in double. For each row, visit(p, e, l, vis) is
// called with the row's position p, the number of visible candidates vis, and e[i] / l =
// A_hat[r][i] for i < vis (rows that see no candidate are skipped). A kv head's keys are
// gathered once for the q heads of its group when heads are asked in order.
class AHatEstimator {
 public:
  AHatEstimator(const TensorView& q, const TensorView& k, const std::vector<int64_t>* keys,
                const AttnOptions& opt);
  void head(int64_t h, const std::vector<int64_t>& est_rows,
            const std::function<void(int64_t p, const double* e, double l, int64_t vis)>& visit);
  // Heads [h0, h0 + count) at once: their sgemms one after another (OpenBLAS threads each),
  // then their rows' softmax one head per thread, visit(i, p, e, l, vis) for head h0 + i. Each
  // head's rows are visited in order by one thread, so a visit that sums per head gets the same
  // bits as head() would give; the softmax in double (an exp per key and row) took most of the
  // estimate's time on one thread.
  void heads(int64_t h0, int64_t count, const std::vector<int64_t>& est_rows,
             const std::function<void(int64_t i, int64_t p, const double* e, double l,
                                      int64_t vis)>& visit);
  int threads() const { return threads_; }

 private:
  const TensorView q_, k_;
  const std::vector<int64_t>* keys_;
  float scale_;
  int threads_;
  int64_t loaded_kvh_ = -1;
  std::vector<float> kf_, qf_;
  std::vector<std::vector<float>> s_;   // per head of a batch: its rows' scores [n, nk]
  std::vector<std::vector<double>> e_;  // per head of a batch: one row's exp
};

// Estimates from q rows `est_rows` (sorted) against the candidate keys `keys` (ascending
// positions; null: every key) which columns and diagonals carry the attention (see
// vertical_slash.cpp). `forced` are indices into the candidates always kept as columns. The
// returned columns are key positions; its rows are left absent (every row).
VerticalSlashIndex estimate_vertical_slash(const TensorView& q, const TensorView& k,
                                           const VerticalSlashConfig& c, const AttnOptions& opt,
                                           const std::vector<int64_t>& est_rows,
                                           const std::vector<int64_t>* keys,
                                           const std::vector<int64_t>& forced);

}  // namespace spattn::masks
