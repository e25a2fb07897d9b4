// ModalityLayout: its segments and its validation.
#include "spattn/modality.hpp"

#include "spattn/error.hpp"

namespace spattn {

std::vector<ModalitySegment> ModalityLayout::segments() const {
  std::vector<ModalitySegment> out;
  const int64_t n = int64_t(ids.size());
  for (int64_t b = 0; b < n;) {
    int64_t e = b + 1;
    while (e < n && ids[size_t(e)] == ids[size_t(b)]) ++e;
    out.push_back({b, e, ids[size_t(b)]});
    b = e;
  }
  return out;
}

int ModalityLayout::num_modalities() const {
  int n = 0;
  for (uint8_t m : ids) n = m + 1 > n ? m + 1 : n;
  return n;
}

void ModalityLayout::validate(int64_t seq) const {
  SPATTN_CHECK(int64_t(ids.size()) == seq, "modality: ", ids.size(),
               " ids given for a sequence of ", seq, " tokens (one id per key token)");
  for (size_t j = 0; j < ids.size(); ++j)
    SPATTN_CHECK(ids[j] <= kMaxModality, "modality: unknown id ", int(ids[j]), " at token ", j,
                 " (ids are 0..", int(kMaxModality), ": 0 text, 1 vision, 2 audio, ...)");
  SPATTN_CHECK(frame_tokens >= 0, "modality: frame_tokens must be >= 0 (0: none), got ",
               frame_tokens);
  if (frame_tokens == 0) return;
  for (const ModalitySegment& s : segments()) {
    if (s.modality != kVisionModality || s.end == seq)
      continue;  // a cut last run may end mid-frame
    SPATTN_CHECK((s.end - s.begin) % frame_tokens == 0, "modality: frame_tokens ", frame_tokens,
                 " does not divide the vision run [", s.begin, ", ", s.end, ") of ",
                 s.end - s.begin, " tokens");
  }
}

ModalityLayout uniform_modality(int64_t seq, uint8_t modality, int64_t frame_tokens) {
  SPATTN_CHECK(seq >= 0, "uniform_modality: seq must be >= 0, got ", seq);
  ModalityLayout m;
  m.ids.assign(size_t(seq), modality);
  m.frame_tokens = frame_tokens;
  m.validate(seq);
  return m;
}

}  // namespace spattn
