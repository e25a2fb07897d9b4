#include "methods/registry.hpp"

#include "spattn/error.hpp"

namespace spattn {

namespace {
struct Entry {
  const char* name;
  std::unique_ptr<Method> (*make)(const MethodSpec&);
};
const Entry kMethods[] = {
    {"dense", make_dense},
    {"a_shape", make_a_shape},
    {"tri_shape", make_tri_shape},
    {"sf_fixed", make_sf_fixed},
    {"sf_strided", make_sf_strided},
    {"vertical_slash", make_vertical_slash},
    {"mean_pool", make_mean_pool},
    {"oracle_topk", make_oracle_topk},
    {"blasst", make_blasst},
};
}  // namespace

std::vector<std::string> method_names() {
  std::vector<std::string> names;
  for (const auto& e : kMethods) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Method> make_method(const MethodSpec& spec) {
  for (const auto& e : kMethods)
    if (spec.name == e.name) return e.make(spec);
  std::string known;
  for (const auto& e : kMethods) known += (known.empty() ? "" : ", ") + std::string(e.name);
  detail::fail("unknown method '", spec.name, "' (known: ", known, ")");
}

std::unique_ptr<Method> make_method(std::string_view text) {
  return make_method(parse_method_spec(text));
}

}  // namespace spattn
