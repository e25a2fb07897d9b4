// Per-token modality of a multi-modal prompt (text, vision, audio, ...) and the frame geometry
// of its vision runs: the input MMInference's modality-aware heads are built on ("MMInference:
// Modality-Aware Permutation Sparse Attention", §2-3). Ids are small integers: 0 text,
// 1 vision (the only modality with frames), 2 audio, ... up to kMaxModality.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spattn {

inline constexpr uint8_t kTextModality = 0;
inline constexpr uint8_t kVisionModality = 1;
inline constexpr uint8_t kMaxModality = 15;  // ids above this are rejected as unknown

// Tokens [begin, end) all of one modality.
struct ModalitySegment {
  int64_t begin, end;
  uint8_t modality;
};

struct ModalityLayout {
  std::vector<uint8_t> ids;  // per kv token
  int64_t frame_tokens = 0;  // tokens per frame of every vision run (0: none given)

  // Throws spattn::Error naming the problem: ids.size() != seq, an id above kMaxModality, a
  // negative frame size, or a vision run whose length is not a whole number of frames. The one
  // exception is a vision run that ends the sequence: a prompt cut at the context length may
  // end inside a frame (its frames still start at the run's first token).
  void validate(int64_t seq) const;
  // Maximal runs of one id, in order; empty for empty ids.
  std::vector<ModalitySegment> segments() const;
  // 1 + the largest id present (0 for empty ids): modalities are indexed 0..n-1.
  int num_modalities() const;
  bool empty() const { return ids.empty(); }
};

// A layout of `seq` tokens of one modality (text prompts, or a --qkv dump given no file).
ModalityLayout uniform_modality(int64_t seq, uint8_t modality = kTextModality,
                                int64_t frame_tokens = 0);

// Reads per-token modality ids from `path`:
//  - a `.npy` file holding an integer array (any of i1/u1/i2/u2/i4/u4/i8/u8 or bool, shape
//    (seq,) or (1, seq)), or
//  - a `.safetensors` file holding an integer tensor named `modality` (I8..U64 or BOOL, same
//    shapes); it may be the very file that holds q, k and v.
// The frame size: `frame_tokens` when >= 0 (the CLI's --frame-tokens); otherwise the
// safetensors file's `__metadata__` entry "frame_tokens" (a decimal string) when present, else
// 0. When both are given they must agree. Float arrays, ids outside [0, kMaxModality] and
// malformed files raise spattn::Error naming the file; the length is checked by validate().
ModalityLayout load_modality(const std::string& path, int64_t frame_tokens = -1);

// Writes ids as a `.npy` u1 array of shape (seq,) (for tests and for users preparing inputs).
void write_modality_npy(const std::string& path, const std::vector<uint8_t>& ids);

}  // namespace spattn
