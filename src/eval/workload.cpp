// Structured long-context workloads: seeded Q/K/V with real RoPE and planted ground truth.
//
// How the patterns are built. A key at position j is k_j = R(j) (c_j + noise), R the RoPE
// rotation and c_j its structured content. RoPE pairs are split into bands (see Bands) so
// patterns built in different bands never interfere: q.k is a sum over pairs, and a pair only
// ever meets the same pair. A query that should attend to key t carries that key's content
// rotated to t's position, coef * R(t) c_t: then q.k_t = coef |c_t|^2 exactly, while a key at
// t + delta sees c_t . R(delta) c_{t+delta}, which RoPE decorrelates as delta grows. This is
// the brief's "apply RoPE to that query component at position i - offset so the relative
// phase peaks at the offset", applied uniformly:
//   locality      target t = i            (positional band; RoPE decay gives the window)
//   slash line    target t = i - offset   (positional band; the key content there repeats
//                                          the content at t + offset: a repeated segment)
//   sink          target t = 0            (lowest-frequency pairs: the few sink tokens all
//                                          sit within a fraction of a radian of each other)
//   vertical      target t = the column   (its own band, one direction per column)
//   needle        target t = needle key   (its own band, one direction per needle)
//   grid columns  target t = i            (lowest-frequency band shared by every column, so
//                                          nearby columns score high and far ones fade:
//                                          the temporal decay of MMInference's grid heads)
// Strengths are given as the scaled score (q.k / sqrt(d)) a pattern's target key gets, so
// they mean the same at every head dim; they are set so planted patterns beat the background
// mass of a 32K context (log 32768 ~ 10.4) by a wide margin.
#include "spattn/attention.hpp"
#include "spattn/workload.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "eval/prng.hpp"
#include "core/rope.hpp"
#include "spattn/error.hpp"

namespace spattn {

WorkloadKind parse_workload_kind(std::string_view s) {
  if (s == "random") return WorkloadKind::random;
  if (s == "text") return WorkloadKind::text;
  if (s == "video") return WorkloadKind::video;
  if (s == "mixed") return WorkloadKind::mixed;
  detail::fail("unknown workload kind '", std::string(s),
               "' (expected random, text, video or mixed)");
}

const char* workload_kind_name(WorkloadKind k) {
  switch (k) {
    case WorkloadKind::random: return "random";
    case WorkloadKind::text: return "text";
    case WorkloadKind::video: return "video";
    case WorkloadKind::mixed: return "mixed";
  }
  return "?";
}

namespace {

using eval::Rng;

constexpr int64_t kDefaultFrameTokens = 256;  // a 16 x 16 patch frame
constexpr int64_t kSinkTokens = 4;            // StreamingLLM's four initial tokens
constexpr double kKeyNorm = 8.0;              // norm of each structured key component
constexpr double kKeyNoise = 0.25;            // per-dim key noise
constexpr double kQueryNoise = 0.5;           // per-dim query noise
constexpr double kHlineDamping = 0.2;         // grid-row queries attend diffusely
constexpr int64_t kTemporalFrames = 4;        // video: slash lines at F, 2F, .., 4F

// Stream tags: every part of a workload draws from its own stream.
enum : uint64_t { kTagLayout = 1, kTagKv = 100, kTagQuery = 10000, kTagValue = 20000 };

// A range [begin, end) of RoPE pairs; pair p covers dims p and p + d/2.
struct Band {
  int64_t begin = 0, end = 0;
};

// Pair 0 turns fastest. Positional patterns need many fast pairs (sharp peak, small far
// field), the sink and the grid the slowest (position-insensitive). At tiny head dims the
// bands overlap, which only costs crosstalk.
struct Bands {
  Band positional, vertical, needle, grid, sink;
  Band line;   // the pairs slash lines match on
  Band local;  // the slower 4/5 of `line`: a window of several tokens, not two
};
Bands allocate_bands(int64_t pairs) {
  Bands b;
  const int64_t n_sink = std::max<int64_t>(1, pairs / 32),
                n_grid = std::max<int64_t>(1, pairs / 32);
  const int64_t n_needle = std::max<int64_t>(1, pairs / 8),
                n_vert = std::max<int64_t>(1, pairs * 3 / 16);
  auto take = [&](int64_t end, int64_t n) { return Band{std::max<int64_t>(0, end - n), end}; };
  b.sink = take(pairs, n_sink);
  b.grid = take(b.sink.begin > 0 ? b.sink.begin : pairs, n_grid);
  b.needle = take(b.grid.begin > 0 ? b.grid.begin : pairs, n_needle);
  b.vertical = take(b.needle.begin > 0 ? b.needle.begin : pairs, n_vert);
  b.positional = Band{0, std::max<int64_t>(1, b.vertical.begin)};
  // Queries match positional content only on the faster pairs: pairs turning slower than
  // ~1/50 rad per token stay in phase for hundreds of tokens, and would give the local window
  // and every slash line a long tail that swamps the other patterns of the row.
  b.line = Band{0, std::max<int64_t>(1, b.positional.end * 7 / 10)};
  b.local = Band{b.line.end / 5, b.line.end};
  return b;
}

// Scaled-score strengths of one head's patterns (0: absent).
struct TextStyle {
  double sink, local, vertical, slash, needle;
  int n_vertical, n_slash, n_needle;
};
struct VideoStyle {
  double sink, local, temporal, spatial, grid;
};
struct HeadStyle {
  TextStyle text;
  VideoStyle video;
};

// Text heads differ the way MInference's do: A-shape (sink + local), vertical-slash, mostly
// local, mostly slash. Every style keeps a sink and a local window, as real heads do, and the
// sink is the strongest non-needle score wherever verticals or slashes are strong (attention
// sinks dominate real heads): the running max BLASST compares against is then the sink's in
// most rows, not a planted pattern's that only some rows have. A needle outscores everything
// else in its row. Slash lines (repeats) are many and short (kSlashSpan): a row's far field
// gets a second ripple from a repeat it sits in, so the share of rows inside repeats must not
// swing from workload to workload the way a few long repeats would make it.
constexpr TextStyle kTextStyles[] = {
    {17, 16, 15, 15, 28, 2, 4, 2},         // A-shape
    {17.5, 14, 16.5, 16.5, 28, 8, 12, 2},  // vertical-slash
    {15, 17, 15, 15, 28, 2, 4, 2},         // local
    {17.5, 14, 15, 17, 28, 2, 20, 2},      // slash
};
// Video heads: grid (MMInference), temporal (same patch in earlier frames), spatial-local.
constexpr VideoStyle kVideoStyles[] = {
    {12, 13, 14, 12, 14},  // grid
    {13, 14, 16, 13, 11},  // temporal
    {12, 16, 13, 14, 11},  // local
};
constexpr double kCrossModality = 0.5;  // text queries see video grid columns at half strength
// Seeds the per-head properties of the generated "model" (style emphasis), fixed across seeds.
constexpr uint64_t kModelSeed = 0x5eed0f3a11ce5ULL;

struct Layout {
  int64_t seq = 0, q_len = 0, q0 = 0, dim = 0, frame_tokens = 0, grid_stride = 0, grid_phase = 0,
          frame_width = 0;
  std::vector<uint8_t> modality;
  std::vector<Workload::Segment> segments;
  std::vector<int64_t> segment_of;  // per token: index into segments
  bool has_video = false;
};

void validate(const WorkloadConfig& c) {
  SPATTN_CHECK(c.seq >= 1, "workload: seq must be >= 1, got ", c.seq);
  SPATTN_CHECK(c.q_len >= 0 && c.q_len <= c.seq, "workload: q_len must be in [0, seq=", c.seq,
               "] (0 means seq), got ", c.q_len);
  SPATTN_CHECK(c.heads >= 1, "workload: heads must be >= 1, got ", c.heads);
  SPATTN_CHECK(c.kv_heads >= 0, "workload: kv_heads must be >= 0 (0 means heads), got ",
               c.kv_heads);
  const int64_t kvh = c.kv_heads ? c.kv_heads : c.heads;
  SPATTN_CHECK(c.heads % kvh == 0, "workload: heads (", c.heads,
               ") must be a multiple of kv_heads (", kvh, ")");
  SPATTN_CHECK(c.dim >= 8 && c.dim <= kMaxHeadDim && c.dim % 8 == 0,
               "workload: dim must be a multiple of 8 in [8, ", kMaxHeadDim, "], got ", c.dim);
  SPATTN_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 1.0,
               "workload: rope_theta must be finite and > 1, got ", c.rope_theta);
  SPATTN_CHECK(c.frame_tokens >= 0, "workload: frame_tokens must be >= 0 (0: default), got ",
               c.frame_tokens);
  SPATTN_CHECK(c.seq <= (int64_t(1) << 24), "workload: seq must be <= 16M, got ", c.seq);
}

// Mixed inputs alternate text and video, starting with text (a system prompt). Video
// segments are whole frames unless cut by the end of the sequence.
void layout_segments(const WorkloadConfig& cfg, Layout& L, Rng& rng) {
  const int64_t F = L.frame_tokens;
  if (cfg.kind != WorkloadKind::mixed) {
    const uint8_t m = cfg.kind == WorkloadKind::video ? 1 : 0;
    L.segments.push_back({0, L.seq, m});
  } else {
    int64_t pos = 0;
    uint8_t m = 0;
    while (pos < L.seq) {
      int64_t len;
      if (m == 0)
        len = rng.range(std::max<int64_t>(1, L.seq / 32), std::max<int64_t>(1, L.seq / 10));
      else
        len = F * rng.range(2, std::max<int64_t>(2, L.seq / (5 * F)));
      len = std::min(len, L.seq - pos);
      L.segments.push_back({pos, pos + len, m});
      pos += len;
      m ^= 1;
    }
  }
  L.modality.assign(size_t(L.seq), 0);
  L.segment_of.assign(size_t(L.seq), 0);
  for (size_t s = 0; s < L.segments.size(); ++s)
    for (int64_t j = L.segments[s].begin; j < L.segments[s].end; ++j) {
      L.modality[size_t(j)] = L.segments[s].modality;
      L.segment_of[size_t(j)] = int64_t(s);
      L.has_video |= L.segments[s].modality == 1;
    }
}

// A grid line sits at every position begin + phase + n * stride of a video segment: a key
// column every query attends to and a query row that attends broadly (MMInference's vertical
// and horizontal grid lines, same stride and phase).
bool on_grid(const Layout& L, int64_t j) {
  if (L.modality[size_t(j)] != 1) return false;
  const int64_t rel = j - L.segments[size_t(L.segment_of[size_t(j)])].begin;
  return rel >= L.grid_phase && (rel - L.grid_phase) % L.grid_stride == 0;
}

// A unit-norm random direction in a band, times `norm`, written into v (other dims untouched).
void random_in_band(Rng& rng, float* v, int64_t pairs, Band b, double norm) {
  double n2 = 0;
  std::vector<double> x(size_t(2 * (b.end - b.begin)));
  for (double& e : x) {
    e = rng.normal();
    n2 += e * e;
  }
  const double s = norm / std::sqrt(std::max(n2, 1e-30));
  for (int64_t p = b.begin; p < b.end; ++p) {
    v[p] = float(x[size_t(2 * (p - b.begin))] * s);
    v[p + pairs] = float(x[size_t(2 * (p - b.begin) + 1)] * s);
  }
}

// Everything planted in one kv head.
enum class SlashKind { repeat, temporal, spatial };
struct PlannedSlash {
  Workload::Slash s;
  SlashKind kind;
  int64_t frames_back;  // temporal: how many frames back (strength fades by 1 per frame)
};
struct KvPlan {
  HeadStyle style;
  std::vector<Workload::Vertical> verticals;
  std::vector<PlannedSlash> slashes;
  std::vector<Workload::Needle> needles;
  std::vector<int64_t> needle_of_query;  // per query row: needle index or -1
};

// Parts of [lo, hi) with modality m.
std::vector<Workload::Segment> segments_in(const Layout& L, uint8_t m, int64_t lo, int64_t hi) {
  std::vector<Workload::Segment> out;
  for (const auto& s : L.segments) {
    const int64_t b = std::max(lo, s.begin), e = std::min(hi, s.end);
    if (s.modality == m && b < e) out.push_back({b, e, m});
  }
  return out;
}
// A uniformly drawn position of `segs`; false when they are empty.
bool pick_position(Rng& rng, const std::vector<Workload::Segment>& segs, int64_t& pos) {
  int64_t total = 0;
  for (const auto& s : segs) total += s.end - s.begin;
  if (total == 0) return false;
  int64_t r = rng.range(0, total - 1);
  for (const auto& s : segs) {
    if (r < s.end - s.begin) {
      pos = s.begin + r;
      return true;
    }
    r -= s.end - s.begin;
  }
  return false;
}
// Shares of a text segment's queries a pattern's span covers: heavy hitters and repeats
// matter to a stretch of the text, not to all of it.
struct SpanShare {
  double lo, hi;
};
constexpr SpanShare kVerticalSpan{0.2, 0.7}, kSlashSpan{0.05, 0.175};

// A query span covering a share (drawn from `share`) of one text segment's queries at or
// after `after`.
bool pick_span(Rng& rng, const Layout& L, int64_t after, SpanShare share, int64_t& qb,
               int64_t& qe) {
  auto segs = segments_in(L, 0, std::max(after, L.q0), L.seq);
  if (segs.empty()) return false;
  const auto& s = segs[size_t(rng.range(0, int64_t(segs.size()) - 1))];
  const int64_t avail = s.end - s.begin;
  const int64_t len =
      std::max<int64_t>(1, int64_t(std::llround(double(avail) * rng.uniform(share.lo, share.hi))));
  qb = s.begin + rng.range(0, avail - len);
  qe = qb + len;
  return true;
}

bool key_taken(const KvPlan& P, int64_t key) {
  for (const auto& v : P.verticals)
    if (v.key == key) return true;
  for (const auto& n : P.needles)
    if (n.key == key) return true;
  return false;
}

void plan_text(const Layout& L, int64_t kvh, Rng& rng, KvPlan& P) {
  const TextStyle& st = P.style.text;
  const int64_t sink = std::min(kSinkTokens, L.seq);
  for (int n = 0; n < st.n_vertical; ++n) {
    int64_t c, qb, qe;
    if (!pick_position(rng, segments_in(L, 0, sink, L.seq - 1), c)) break;
    if (key_taken(P, c) || !pick_span(rng, L, c + 1, kVerticalSpan, qb, qe)) continue;
    P.verticals.push_back({kvh, c, qb, qe});
  }
  for (int n = 0; n < st.n_slash; ++n) {
    for (int attempt = 0; attempt < 8; ++attempt) {
      int64_t qb, qe;
      if (!pick_span(rng, L, sink + 1, kSlashSpan, qb, qe)) break;
      // The earlier occurrence [qb - off, qe - off) must be text after the sink; offsets of
      // at least a block keep the line apart from the local window where there is room.
      const int64_t off = rng.range(std::min<int64_t>(qb - sink, 64), qb - sink);
      if (off < 1) continue;
      bool text = true;
      for (int64_t j = qb - off; j < qe - off && text; ++j) text = L.modality[size_t(j)] == 0;
      if (!text) continue;
      // One repeat at a time: overlapping repeats would stack their query components and
      // the row's scores with them.
      bool overlaps = false;
      for (const auto& o : P.slashes) overlaps |= qb < o.s.q_end && o.s.q_begin < qe;
      if (overlaps) continue;
      P.slashes.push_back({{kvh, off, qb, qe}, SlashKind::repeat, 0});
      break;
    }
  }
  for (int n = 0; n < st.n_needle; ++n) {
    int64_t key, query;
    const int64_t key_end = std::max(sink, L.seq - L.seq / 10 - 1);
    if (!pick_position(rng, segments_in(L, 0, sink, key_end), key)) break;
    if (!pick_position(rng, segments_in(L, 0, std::max(key + 1, L.q0), L.seq), query)) continue;
    if (P.needle_of_query[size_t(query - L.q0)] >= 0 || key_taken(P, key)) continue;
    P.needle_of_query[size_t(query - L.q0)] = int64_t(P.needles.size());
    P.needles.push_back({kvh, key, query});
  }
}

// Video: a patch attends to the same patch in the previous frames (slash lines at multiples
// of F, fading with distance) and to the patch above it (slash at the frame width).
void plan_video(const Layout& L, int64_t kvh, KvPlan& P) {
  for (const auto& s : L.segments) {
    if (s.modality != 1) continue;
    auto add = [&](int64_t off, SlashKind kind, int64_t frames) {
      const int64_t qb = std::max(s.begin + off, L.q0), qe = s.end;
      if (qb < qe) P.slashes.push_back({{kvh, off, qb, qe}, kind, frames});
    };
    for (int64_t m = 1; m <= kTemporalFrames; ++m) add(m * L.frame_tokens, SlashKind::temporal, m);
    if (L.frame_width < L.frame_tokens) add(L.frame_width, SlashKind::spatial, 0);
  }
}

// Content of every key before RoPE and noise, [seq, dim], plus the shared directions.
struct KeyContent {
  int64_t dim = 0;
  std::vector<float> c, sink_dir, grid_dir;
  float* at(int64_t j) { return &c[size_t(j * dim)]; }
  const float* at(int64_t j) const { return &c[size_t(j * dim)]; }
};

void add_in_band(float* dst, const float* src, int64_t pairs, Band b) {
  for (int64_t p = b.begin; p < b.end; ++p) {
    dst[p] += src[p];
    dst[p + pairs] += src[p + pairs];
  }
}

// Positional band: a per-modality topic direction plus a slowly drifting part (AR(1) with
// about 128 tokens of memory), so neighbours share content and far tokens do not. Video
// tokens add one identity per patch position, shared by that patch in every frame. The topic
// directions come from `model_rng` (fixed per kv head across seeds): how their weight spreads
// over RoPE frequencies sets the far-field ripple of every query, and so how many far tiles a
// head keeps; that is a property of the model's projections, not of the prompt.
void positional_content(const Layout& L, const Bands& B, Rng& model_rng, Rng& rng, KeyContent& K) {
  const int64_t d = L.dim, pairs = d / 2;
  const Band pb = B.positional;
  std::vector<float> w_text(static_cast<size_t>(d)), w_video(static_cast<size_t>(d)),
      drift(size_t(d), 0.0f), patch;
  random_in_band(model_rng, w_text.data(), pairs, pb, kKeyNorm * 0.94);
  random_in_band(model_rng, w_video.data(), pairs, pb, kKeyNorm * 0.75);
  if (L.has_video) {
    patch.assign(size_t(L.frame_tokens * d), 0.0f);
    for (int64_t f = 0; f < L.frame_tokens; ++f)
      random_in_band(rng, &patch[size_t(f * d)], pairs, pb, kKeyNorm * 0.6);
  }
  const double rho = std::exp(-1.0 / 128.0);
  const double drift_sd = kKeyNorm * 0.35 / std::sqrt(2.0 * double(pb.end - pb.begin));
  const double innovation = std::sqrt(1 - rho * rho) * drift_sd;
  for (int64_t p = pb.begin; p < pb.end; ++p) {
    drift[size_t(p)] = float(rng.normal() * drift_sd);
    drift[size_t(p + pairs)] = float(rng.normal() * drift_sd);
  }
  for (int64_t j = 0; j < L.seq; ++j) {
    float* k = K.at(j);
    for (int64_t p = pb.begin; p < pb.end; ++p)
      for (int64_t x : {p, p + pairs}) {
        drift[size_t(x)] = float(rho * drift[size_t(x)] + innovation * rng.normal());
        k[x] = drift[size_t(x)];
      }
    if (L.modality[size_t(j)] == 1) {
      const int64_t rel = (j - L.segments[size_t(L.segment_of[size_t(j)])].begin) % L.frame_tokens;
      add_in_band(k, w_video.data(), pairs, pb);
      add_in_band(k, &patch[size_t(rel * d)], pairs, pb);
    } else {
      add_in_band(k, w_text.data(), pairs, pb);
    }
  }
}

// Columns and needles get pair-disjoint slots of their band while there are enough pairs:
// across different pairs q.k has no cross terms, so one column's query component does not
// leak onto another column's key (random directions sharing pairs would, by |u|^2/sqrt(dims)).
Band slot(Band b, size_t index, size_t count) {
  const int64_t pairs = b.end - b.begin;
  const int64_t width = std::max<int64_t>(1, pairs / int64_t(std::max<size_t>(count, 1)));
  const int64_t slots = pairs / width;
  const int64_t begin = b.begin + (int64_t(index) % slots) * width;
  return Band{begin, begin + width};
}

KeyContent build_key_content(const Layout& L, const Bands& B, const KvPlan& P, Rng& model_rng,
                             Rng& rng) {
  const int64_t d = L.dim, pairs = d / 2;
  KeyContent K;
  K.dim = d;
  K.c.assign(size_t(L.seq * d), 0.0f);
  positional_content(L, B, model_rng, rng, K);
  // Repeated segments: the span a text slash line covers repeats its earlier occurrence.
  for (const auto& ps : P.slashes) {
    if (ps.kind != SlashKind::repeat) continue;
    for (int64_t j = ps.s.q_begin; j < ps.s.q_end; ++j)
      for (int64_t p = B.positional.begin; p < B.positional.end; ++p)
        for (int64_t x : {p, p + pairs}) K.at(j)[x] = K.at(j - ps.s.offset)[x];
  }
  // Heavy-hitter keys (sink, columns, needles) carry their own direction instead of topic
  // content, as special tokens do: their score is then their pattern's, not the pattern's
  // plus the far-field ripple of the positional band.
  auto clear_positional = [&](int64_t j) {
    for (int64_t p = B.positional.begin; p < B.positional.end; ++p)
      K.at(j)[p] = K.at(j)[p + pairs] = 0.0f;
  };
  for (int64_t j = 0; j < std::min(kSinkTokens, L.seq); ++j) clear_positional(j);
  for (const auto& v : P.verticals) clear_positional(v.key);
  for (const auto& n : P.needles) clear_positional(n.key);
  K.sink_dir.assign(size_t(d), 0.0f);
  random_in_band(rng, K.sink_dir.data(), pairs, B.sink, kKeyNorm);
  for (int64_t j = 0; j < std::min(kSinkTokens, L.seq); ++j)
    add_in_band(K.at(j), K.sink_dir.data(), pairs, B.sink);
  for (size_t n = 0; n < P.verticals.size(); ++n)
    random_in_band(rng, K.at(P.verticals[n].key), pairs, slot(B.vertical, n, P.verticals.size()),
                   kKeyNorm);
  for (size_t n = 0; n < P.needles.size(); ++n)
    random_in_band(rng, K.at(P.needles[n].key), pairs, slot(B.needle, n, P.needles.size()),
                   kKeyNorm);
  if (L.has_video) {
    K.grid_dir.assign(size_t(d), 0.0f);
    random_in_band(rng, K.grid_dir.data(), pairs, B.grid, kKeyNorm);
    for (int64_t j = 0; j < L.seq; ++j)
      if (on_grid(L, j)) add_in_band(K.at(j), K.grid_dir.data(), pairs, B.grid);
  }
  return K;
}

// Emphasis of one q head: the kv head's style with each strength scaled by 0.9-1.1, so the
// q heads of a GQA group see the same keys but weigh the patterns differently.
HeadStyle emphasis(const HeadStyle& s, Rng& rng) {
  HeadStyle e = s;
  for (double* x : {&e.text.sink, &e.text.local, &e.text.vertical, &e.text.slash, &e.video.sink,
                    &e.video.local, &e.video.temporal, &e.video.spatial, &e.video.grid})
    *x *= rng.uniform(0.9, 1.1);
  return e;
}

double slash_strength(const PlannedSlash& ps, const HeadStyle& st) {
  switch (ps.kind) {
    case SlashKind::repeat: return st.text.slash;
    case SlashKind::temporal: return st.video.temporal - double(ps.frames_back - 1);
    case SlashKind::spatial: return st.video.spatial;
  }
  return 0;
}

// Query rows of one q head, [q_len, dim], pre-noise content rotated as described at the top.
void build_queries(const Layout& L, const Bands& B, const RopeTable& rope, const KeyContent& K,
                   const KvPlan& P, const HeadStyle& st, Rng& rng, float* out) {
  const int64_t d = L.dim;
  // coef * |c_t|^2 / sqrt(d) = strength for a target whose band content has norm kKeyNorm.
  const double unit = std::sqrt(double(d)) / (kKeyNorm * kKeyNorm);
  for (int64_t r = 0; r < L.q_len; ++r) {
    const int64_t i = L.q0 + r;
    float* q = out + r * d;
    const bool video = L.modality[size_t(i)] == 1;
    // Grid rows (MMInference's horizontal lines) spread their attention over the context.
    const double damp = video && on_grid(L, i) ? kHlineDamping : 1.0;
    auto target = [&](const float* content, int64_t t, Band b, double strength) {
      if (strength > 0)
        rope.rotate_add(q, content, t, float(strength * unit * damp), b.begin, b.end);
    };
    // The local band holds only part of the positional content's norm: scale up to match.
    const double pos_pairs = double(B.positional.end - B.positional.begin);
    const double local_share = double(B.local.end - B.local.begin) / pos_pairs;
    const double line_share = double(B.line.end - B.line.begin) / pos_pairs;
    target(K.at(i), i, B.local, (video ? st.video.local : st.text.local) / local_share);
    target(K.sink_dir.data(), 0, B.sink, video ? st.video.sink : st.text.sink);
    for (const auto& ps : P.slashes)
      if (i >= ps.s.q_begin && i < ps.s.q_end)
        target(K.at(i - ps.s.offset), i - ps.s.offset, B.line, slash_strength(ps, st) / line_share);
    for (const auto& v : P.verticals)
      if (i >= v.q_begin && i < v.q_end) target(K.at(v.key), v.key, B.vertical, st.text.vertical);
    if (P.needle_of_query[size_t(r)] >= 0) {
      const int64_t key = P.needles[size_t(P.needle_of_query[size_t(r)])].key;
      target(K.at(key), key, B.needle, st.text.needle);
    }
    // Grid columns: the query carries the grid direction at its own position, so columns
    // near it score highest and RoPE's slowest pairs fade the far ones (temporal decay).
    if (L.has_video)
      target(K.grid_dir.data(), i, B.grid, video ? st.video.grid : st.video.grid * kCrossModality);
    for (int64_t c = 0; c < d; ++c) q[c] += float(kQueryNoise * rng.normal());
  }
}

// Keys that hold 90% of the locality pattern's own mass, for the mean text (or video) local
// strength and the expected RoPE kernel of an isotropic positional content,
// f(delta) = mean over the local pairs of cos(delta * w_p).
int64_t locality_window(const Layout& L, const Bands& B, const RopeTable& rope, bool video) {
  double strength = 0;
  if (video) {
    for (const auto& s : kVideoStyles) strength += s.local / std::size(kVideoStyles);
  } else {
    for (const auto& s : kTextStyles) strength += s.local / std::size(kTextStyles);
  }
  const int64_t n = std::min<int64_t>(L.seq, 4096);
  std::vector<double> mass(static_cast<size_t>(n));
  double total = 0;
  for (int64_t delta = 0; delta < n; ++delta) {
    double f = 0;
    for (int64_t p = B.local.begin; p < B.local.end; ++p)
      f += std::cos(double(delta) * rope.frequency(p));
    f /= double(B.local.end - B.local.begin);
    mass[size_t(delta)] = std::exp(strength * (f - 1));
    total += mass[size_t(delta)];
  }
  double acc = 0;
  for (int64_t delta = 0; delta < n; ++delta) {
    acc += mass[size_t(delta)];
    if (acc >= 0.9 * total) return delta + 1;
  }
  return n;
}

Tensor to_dtype(Tensor&& t, DType dt) {
  return t.dtype() == dt ? std::move(t) : Tensor::copy_of(t.view(), dt);
}

void fill_normal(Rng& rng, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = float(rng.normal());
}

// iid N(0, 1) content with RoPE applied: rotation keeps the distribution, so attention stays
// near-uniform; the baseline sparse methods should look bad on.
void make_random(const Layout& L, const RopeTable& rope, uint64_t seed, Tensor& q, Tensor& k) {
  const int64_t d = L.dim;
  for (int64_t h = 0; h < q.heads(); ++h) {
    Rng rng(eval::stream_seed(seed, kTagQuery + uint64_t(h)));
    float* base = q.data_as<float>() + h * L.q_len * d;
    fill_normal(rng, base, L.q_len * d);
    for (int64_t r = 0; r < L.q_len; ++r) rope.rotate_inplace(base + r * d, L.q0 + r);
  }
  for (int64_t h = 0; h < k.heads(); ++h) {
    Rng rng(eval::stream_seed(seed, kTagKv + uint64_t(h)));
    float* base = k.data_as<float>() + h * L.seq * d;
    fill_normal(rng, base, L.seq * d);
    for (int64_t j = 0; j < L.seq; ++j) rope.rotate_inplace(base + j * d, j);
  }
}

Layout make_layout(const WorkloadConfig& cfg) {
  Layout L;
  L.seq = cfg.seq;
  L.q_len = cfg.q_len ? cfg.q_len : cfg.seq;
  L.q0 = L.seq - L.q_len;
  L.dim = cfg.dim;
  Rng rng(eval::stream_seed(cfg.seed, kTagLayout));
  if (cfg.kind == WorkloadKind::video || cfg.kind == WorkloadKind::mixed) {
    L.frame_tokens = cfg.frame_tokens ? cfg.frame_tokens : kDefaultFrameTokens;
    L.frame_width = std::max<int64_t>(1, int64_t(std::sqrt(double(L.frame_tokens))));
    // The grid's stride is the frame or a whole fraction of it (MMInference searches both
    // frame strides and finer ones); the phase is where its first line falls.
    const int64_t div = int64_t(1) << rng.range(0, 2);
    L.grid_stride = std::max<int64_t>(1, L.frame_tokens / div);
    L.grid_phase = rng.range(0, L.grid_stride - 1);
  }
  layout_segments(cfg, L, rng);
  return L;
}

}  // namespace

Workload make_workload(const WorkloadConfig& cfg) {
  validate(cfg);
  const Layout L = make_layout(cfg);
  const int64_t kv_heads = cfg.kv_heads ? cfg.kv_heads : cfg.heads, group = cfg.heads / kv_heads;
  const int64_t d = cfg.dim;
  const RopeTable rope(L.seq, d, cfg.rope_theta);
  Tensor q(DType::f32, cfg.heads, L.q_len, d), k(DType::f32, kv_heads, L.seq, d),
      v(DType::f32, kv_heads, L.seq, d);
  Workload W;
  W.config = cfg;
  W.layout.ids = L.modality;
  W.layout.frame_tokens = L.frame_tokens;
  W.layout.validate(L.seq);  // the generator keeps the rules it hands to users
  W.grid_stride = L.grid_stride;
  W.grid_phase = L.grid_phase;

  if (cfg.kind == WorkloadKind::random) {
    make_random(L, rope, cfg.seed, q, k);
  } else {
    const Bands B = allocate_bands(d / 2);
    const bool has_text = cfg.kind != WorkloadKind::video;
    W.sink_tokens = std::min(kSinkTokens, L.seq);
    W.local_window = locality_window(L, B, rope, !has_text);
    // A head's style is the model's, not the prompt's: it depends on the head index only, and
    // the seed varies content (positions, directions, values), as prompts do for one model.
    // That is what makes per-model calibration (BLASST) meaningful across seeds.
    for (int64_t g = 0; g < kv_heads; ++g) {
      Rng rng(eval::stream_seed(cfg.seed, kTagKv + uint64_t(g)));
      KvPlan P;
      P.style.text = kTextStyles[size_t(g % int64_t(std::size(kTextStyles)))];
      P.style.video = kVideoStyles[size_t(g % int64_t(std::size(kVideoStyles)))];
      P.needle_of_query.assign(size_t(L.q_len), -1);
      if (has_text) plan_text(L, g, rng, P);
      if (L.has_video) plan_video(L, g, P);
      Rng model_kv(eval::stream_seed(kModelSeed, kTagKv + uint64_t(g)));
      const KeyContent K = build_key_content(L, B, P, model_kv, rng);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        Rng model_rng(eval::stream_seed(kModelSeed, kTagQuery + uint64_t(h)));
        const HeadStyle st = emphasis(P.style, model_rng);
        Rng qrng(eval::stream_seed(cfg.seed, kTagQuery + uint64_t(h)));
        build_queries(L, B, rope, K, P, st, qrng, q.data_as<float>() + h * L.q_len * d);
      }
      float* kh = k.data_as<float>() + g * L.seq * d;
      for (int64_t j = 0; j < L.seq; ++j) {
        float* row = kh + j * d;
        for (int64_t c = 0; c < d; ++c) row[c] = K.at(j)[c] + float(kKeyNoise * rng.normal());
        rope.rotate_inplace(row, j);
      }
      W.verticals.insert(W.verticals.end(), P.verticals.begin(), P.verticals.end());
      for (const auto& ps : P.slashes) W.slashes.push_back(ps.s);
      W.needles.insert(W.needles.end(), P.needles.begin(), P.needles.end());
    }
  }
  for (int64_t g = 0; g < kv_heads; ++g) {
    Rng rng(eval::stream_seed(cfg.seed, kTagValue + uint64_t(g)));
    fill_normal(rng, v.data_as<float>() + g * L.seq * d, L.seq * d);
  }
  W.q = to_dtype(std::move(q), cfg.dtype);
  W.k = to_dtype(std::move(k), cfg.dtype);
  W.v = to_dtype(std::move(v), cfg.dtype);
  return W;
}

}  // namespace spattn
