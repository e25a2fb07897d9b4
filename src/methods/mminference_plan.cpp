// MMInference plan files (spattn/mminference.hpp). A plan decides every head's pattern, so
// loading treats the file as untrusted: every field is checked and named when wrong.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/json_fields.hpp"
#include "spattn/error.hpp"
#include "spattn/mminference.hpp"

namespace spattn {

namespace {

using nlohmann::json;
constexpr const char* kFormat = "spattn.mminference_plan";
constexpr int kVersion = 1;
constexpr int64_t kBig = int64_t(1) << 40;

// A plan entry is an object; its fields are read by the shared checked readers.
class Fields : public detail::JsonFields {
 public:
  Fields(const json& j, std::string origin) : JsonFields(j, std::move(origin)) {
    if (!j.is_object()) detail::fail(this->origin(), ": must be a JSON object");
  }
};

MMPattern parse_pattern(const std::string& s, const std::string& origin) {
  if (s == "grid") return MMPattern::grid;
  if (s == "a_shape") return MMPattern::a_shape;
  if (s == "vertical_slash") return MMPattern::vertical_slash;
  detail::fail(origin, ": unknown pattern '", s, "' (expected grid, a_shape or vertical_slash)");
}

MMBoundary parse_boundary(const std::string& s, const std::string& origin) {
  if (s == "none") return MMBoundary::none;
  if (s == "k") return MMBoundary::k;
  if (s == "q") return MMBoundary::q;
  if (s == "2d") return MMBoundary::two_d;
  detail::fail(origin, ": unknown boundary '", s, "' (expected none, k, q or 2d)");
}

MMHeadPlan head_from_json(const json& j, const std::string& origin) {
  const Fields f(j, origin);
  MMHeadPlan h;
  h.pattern = parse_pattern(f.string("pattern"), origin);
  h.boundary = parse_boundary(f.string("boundary"), origin);
  if (h.pattern == MMPattern::grid &&
      (h.boundary == MMBoundary::q || h.boundary == MMBoundary::two_d))
    detail::fail(origin, ": boundary '", mm_boundary_name(h.boundary),
                 "' is not implemented for grid heads (only none and k)");
  switch (h.pattern) {
    case MMPattern::grid:
      h.hline = f.boolean("hline");
      h.vline = f.boolean("vline");
      h.slash = f.boolean("slash");
      h.max_stride = f.integer("max_stride", 1, kBig);
      if (!h.hline && !h.vline && !h.slash)
        detail::fail(origin, ": a grid needs at least one of hline, vline, slash");
      break;
    case MMPattern::a_shape:
      h.sink = f.integer("sink", 0, kBig);
      h.local = f.integer("local", 1, kBig);
      break;
    case MMPattern::vertical_slash:
      h.vertical = f.integer("vertical", 0, kBig);
      h.slash_size = f.integer("slash", 1, kBig);
      break;
  }
  h.recall = f.number_or("recall", 0);
  h.cost = f.number_or("cost", 0);
  h.reason = f.string_or("reason", "");
  h.flagged = f.boolean_or("flagged", false);
  return h;
}

json head_to_json(const MMHeadPlan& h) {
  json j;
  j["pattern"] = mm_pattern_name(h.pattern);
  switch (h.pattern) {
    case MMPattern::grid:
      j["hline"] = h.hline, j["vline"] = h.vline, j["slash"] = h.slash;
      j["max_stride"] = h.max_stride;
      break;
    case MMPattern::a_shape: j["sink"] = h.sink, j["local"] = h.local; break;
    case MMPattern::vertical_slash: j["vertical"] = h.vertical, j["slash"] = h.slash_size; break;
  }
  j["boundary"] = mm_boundary_name(h.boundary);
  j["recall"] = h.recall;
  j["cost"] = h.cost;
  if (!h.reason.empty()) j["reason"] = h.reason;  // written by the search: why this pattern
  if (h.flagged) j["flagged"] = true;             // missed the search's recall target
  return j;
}

}  // namespace

const char* mm_pattern_name(MMPattern p) {
  switch (p) {
    case MMPattern::grid: return "grid";
    case MMPattern::a_shape: return "a_shape";
    case MMPattern::vertical_slash: return "vertical_slash";
  }
  return "?";
}

const char* mm_boundary_name(MMBoundary b) {
  switch (b) {
    case MMBoundary::none: return "none";
    case MMBoundary::k: return "k";
    case MMBoundary::q: return "q";
    case MMBoundary::two_d: return "2d";
  }
  return "?";
}

std::string mm_plan_to_json(const MMPlan& plan) {
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["heads"] = plan.heads;
  j["frame_stride"] = plan.frame_stride;
  json layers = json::array();
  for (const auto& layer : plan.layers) {
    json heads = json::array();
    for (const MMHeadPlan& h : layer) heads.push_back(head_to_json(h));
    layers.push_back(heads);
  }
  j["layers"] = layers;
  return j.dump(2) + "\n";
}

MMPlan mm_plan_from_json(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    detail::fail(origin, ": not valid JSON (", e.what(), ")");
  }
  const Fields f(j, origin);
  if (f.string("format") != kFormat)
    detail::fail(origin, ": field 'format' must be \"", kFormat, "\"");
  const int64_t version = f.integer("version", 1, kBig);
  if (version != kVersion)
    detail::fail(origin, ": field 'version' ", version, " is not ", kVersion);
  MMPlan p;
  p.heads = f.integer("heads", 1, 1 << 20);
  p.frame_stride = f.integer("frame_stride", 0, kBig);
  const json& layers = f.get("layers");
  if (!layers.is_array() || layers.empty())
    detail::fail(origin, ": field 'layers' must be a non-empty array of per-head arrays");
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string lo = origin + ": layer " + std::to_string(l);
    if (!layers[l].is_array()) detail::fail(lo, " must be an array of heads");
    if (int64_t(layers[l].size()) != p.heads)
      detail::fail(lo, " has ", layers[l].size(), " heads, field 'heads' says ", p.heads);
    std::vector<MMHeadPlan> heads;
    for (size_t h = 0; h < layers[l].size(); ++h)
      heads.push_back(head_from_json(layers[l][h], lo + " head " + std::to_string(h)));
    p.layers.push_back(std::move(heads));
  }
  return p;
}

MMPlan load_mm_plan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPATTN_CHECK(in.good(), "mminference: cannot open plan file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return mm_plan_from_json(ss.str(), path);
}

void save_mm_plan(const MMPlan& plan, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  SPATTN_CHECK(out.good(), "mminference: cannot write plan file '", path, "'");
  out << mm_plan_to_json(plan);
  SPATTN_CHECK(out.good(), "mminference: writing plan file '", path, "' failed");
}

}  // namespace spattn
