// A_hat's column and diagonal sums on the device (ahat_sums.cu), shared by MInference's
// vertical-slash estimate (vertical_slash.cu) and MMInference's grid search (grid.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "spattn/attention.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda {

// The keys a row's probabilities are summed over (its softmax is over every key it sees):
// keys >= key_lo, and with band_blocks >= 0 keys before the row's band, 64 * (tile(pos) -
// band_blocks) (the grid pass's keys: src/masks/grid.cpp's band_begin). Default: every key.
struct AHatWindow {
  int64_t key_lo = 0, band_blocks = -1;
};

// The rows and keys of one estimate (MMInference's boundary pieces: a modality's last queries
// against one modality's keys): rows[0, n_rows) query rows, ascending, and keys[0, n_keys) the
// candidate keys' positions, ascending, both on the device; each row's softmax is over the
// candidates it sees, and the vertical sums are indexed by candidate. Null: the last n_rows
// rows, every key.
struct AHatLists {
  const int* rows = nullptr;
  const int* keys = nullptr;
  int64_t n_keys = 0;
};

// vertical[h * n_keys + i] += sum over the rows r of A_hat[r][i], slash[h * kv_len + o] +=
// sum_r A_hat[r][p_r - o], over the window (both zeroed by the caller, [Hq][n_keys] and
// [Hq][kv_len] doubles; n_keys is kv_len without lists). With lists the window must be the
// default. q, k: checked by the caller (causal, q_len <= kv_len). Queued on s.
void ahat_sums(const TensorView& q, const TensorView& k, const AttnOptions& opt, int64_t n_rows,
               const AHatWindow& window, double* vertical, double* slash, cudaStream_t s,
               const AHatLists& lists = {});

}  // namespace spattn::cuda
