#include "methods/registry.hpp"

#include "spattn/error.hpp"

namespace spattn {

namespace {
struct Entry {
  const char* name;
  std::unique_ptr<Method> (*make)(const MethodSpec&);
  // Parameters of the default comparison; empty where the method's own defaults are the paper's.
  // blasst has no default threshold: 1e-3 skips about 70% of the entries on the text workload
  // (BENCHMARKS.md), the sparsity the paper reports its speedups at.
  const char* default_params;
  bool evaluation_only;
  bool causal_only;
  const char* count_param;  // MethodInfo::count_param
};
const Entry kMethods[] = {
    {"dense", make_dense, "", false, false, ""},
    {"a_shape", make_a_shape, "", false, true, ""},
    {"tri_shape", make_tri_shape, "", false, true, ""},
    {"sf_fixed", make_sf_fixed, "", false, true, ""},
    {"sf_strided", make_sf_strided, "", false, true, ""},
    {"vertical_slash", make_vertical_slash, "", false, true, ""},
    {"mean_pool", make_mean_pool, "", false, false, "topk"},
    {"xattention", make_xattention, "", false, false, ""},
    {"flexprefill", make_flexprefill, "", false, true, ""},
    {"oracle_topk", make_oracle_topk, "", true, false, "topk"},
    {"blasst", make_blasst, "lambda=0.001", false, false, ""},
    {"momo", make_momo, "", false, true, "k_trim"},
    {"chunked_h2o", make_chunked_h2o, "", false, true, ""},
};
// Methods outside the default comparison: mminference needs a plan file (from `spattn
// search`), and grid is its building block, meant for video inputs (frame=N).
struct NamedFactory {
  const char* name;
  std::unique_ptr<Method> (*make)(const MethodSpec&);
};
const NamedFactory kOnRequest[] = {{"grid", make_grid}, {"mminference", make_mminference}};
}  // namespace

std::vector<std::string> method_names() {
  std::vector<std::string> names;
  for (const auto& e : kMethods) names.emplace_back(e.name);
  return names;
}

std::vector<MethodInfo> method_catalog() {
  std::vector<MethodInfo> infos;
  for (const auto& e : kMethods) {
    MethodInfo i;
    i.name = e.name;
    i.default_spec = *e.default_params ? i.name + ":" + e.default_params : i.name;
    i.evaluation_only = e.evaluation_only;
    i.causal_only = e.causal_only;
    i.count_param = e.count_param;
    infos.push_back(std::move(i));
  }
  return infos;
}

std::unique_ptr<Method> make_method(const MethodSpec& spec) {
  for (const auto& e : kMethods)
    if (spec.name == e.name) return e.make(spec);
  for (const auto& e : kOnRequest)
    if (spec.name == e.name) return e.make(spec);
  std::string known;
  for (const auto& e : kMethods) known += (known.empty() ? "" : ", ") + std::string(e.name);
  for (const auto& e : kOnRequest) known += ", " + std::string(e.name);
  detail::fail("unknown method '", spec.name, "' (known: ", known, ")");
}

std::unique_ptr<Method> make_method(std::string_view text) {
  return make_method(parse_method_spec(text));
}

}  // namespace spattn
