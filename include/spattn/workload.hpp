// Seeded, deterministic long-context Q/K/V with real RoPE and ground-truth structure.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "spattn/modality.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

enum class WorkloadKind { random, text, video, mixed };
WorkloadKind parse_workload_kind(std::string_view s);  // throws Error on unknown names
const char* workload_kind_name(WorkloadKind k);

struct WorkloadConfig {
  WorkloadKind kind = WorkloadKind::text;
  int64_t seq = 4096;    // kv length; queries are the last q_len tokens
  int64_t q_len = 0;     // 0: seq (prefill); 1..16: decode-like
  int64_t heads = 2;     // q heads
  int64_t kv_heads = 0;  // 0: heads
  int64_t dim = 128;
  DType dtype = DType::f32;
  uint64_t seed = 0;
  double rope_theta = 10000.0;
  int64_t frame_tokens = 0;  // video/mixed: tokens per frame (0: generator default)
};

// Ground truth the generator planted, per kv head unless noted. Positions are absolute.
struct Workload {
  WorkloadConfig config;
  Tensor q, k, v;  // [heads, q_len, dim], [kv_heads, seq, dim] x2
  // Per kv token: 0 text, 1 video; frame_tokens set for video and mixed. The modality input
  // MMInference's heads take, exactly as the generator laid the prompt out.
  ModalityLayout layout;
  int64_t sink_tokens = 0;   // leading tokens every query attends to
  int64_t local_window = 0;  // recent-token window of the locality pattern
  struct Vertical {
    int64_t head, key, q_begin, q_end;
  };  // heavy-hitter column, its span
  struct Slash {
    int64_t head, offset, q_begin, q_end;
  };  // query i -> key i - offset
  struct Needle {
    int64_t head, key, query;
  };  // one planted (key, query) pair
  std::vector<Vertical> verticals;
  std::vector<Slash> slashes;
  std::vector<Needle> needles;
  int64_t grid_stride = 0;  // video: the grid's stride in tokens
  int64_t grid_phase = 0;   // video: the grid's phase
  using Segment = ModalitySegment;
};

Workload make_workload(const WorkloadConfig& cfg);

}  // namespace spattn
