// load_modality: per-token modality ids from a .npy int array or the `modality` tensor of a
// .safetensors file, with the frame size from the caller or the file's metadata.
#include <cerrno>
#include <cstdlib>

#include "io/io_common.hpp"
#include "spattn/error.hpp"
#include "spattn/modality.hpp"

namespace spattn {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "frame_tokens" from safetensors metadata: a non-negative decimal integer.
int64_t parse_frame_tokens(const std::string& text, const std::string& path) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  SPATTN_CHECK(!text.empty() && end && *end == '\0' && errno == 0 && v >= 0, path,
               ": __metadata__ frame_tokens must be a non-negative integer, got '", text, "'");
  return int64_t(v);
}

}  // namespace

ModalityLayout load_modality(const std::string& path, int64_t frame_tokens) {
  SPATTN_CHECK(frame_tokens >= -1,
               "load_modality: frame_tokens must be >= 0 (or -1: from the "
               "file), got ",
               frame_tokens);
  const bool npy = ends_with(path, ".npy");
  const io::IntArray a =
      npy ? io::read_npy_ints(path) : io::read_safetensors_ints(path, "modality");
  const std::string what = npy ? path : path + ": tensor 'modality'";
  // (seq,) or (1, seq): a batch of one, as model inputs come.
  const bool shape_ok = a.shape.size() == 1 || (a.shape.size() == 2 && a.shape[0] == 1);
  SPATTN_CHECK(shape_ok, what, ": shape ", io::shape_str(a.shape),
               " is not a list of per-token ids; expected (seq,) or (1, seq)");
  ModalityLayout m;
  m.ids.resize(a.values.size());
  for (size_t j = 0; j < a.values.size(); ++j) {
    const int64_t id = a.values[j];
    SPATTN_CHECK(id >= 0 && id <= kMaxModality, what, ": unknown modality id ", id, " at token ", j,
                 " (ids are 0..", int(kMaxModality), ": 0 text, 1 vision, 2 audio, ...)");
    m.ids[j] = uint8_t(id);
  }
  int64_t from_file = -1;
  if (const auto it = a.metadata.find("frame_tokens"); it != a.metadata.end())
    from_file = parse_frame_tokens(it->second, path);
  SPATTN_CHECK(frame_tokens < 0 || from_file < 0 || frame_tokens == from_file, path,
               ": frame_tokens ", frame_tokens, " given, but the file's metadata says ", from_file);
  m.frame_tokens = frame_tokens >= 0 ? frame_tokens : (from_file >= 0 ? from_file : 0);
  return m;
}

void write_modality_npy(const std::string& path, const std::vector<uint8_t>& ids) {
  io::write_npy_u8(path, ids);
}

}  // namespace spattn
