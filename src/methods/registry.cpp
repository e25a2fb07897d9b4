#include "methods/registry.hpp"

#include <string_view>

#include "spattn/error.hpp"

namespace spattn {

namespace {
struct Entry {
  const char* name = "";
  std::unique_ptr<Method> (*make)(const MethodSpec&) = nullptr;  // null: a decode form only
  // Parameters of the default comparison; empty where the method's own defaults are the paper's.
  const char* default_params = "";
  bool evaluation_only = false;
  bool causal_only = false;
  const char* count_param = "";  // MethodInfo::count_param
  // In `spattn bench`'s default comparison (method_names()). The others are asked for by name:
  // mminference needs a plan file (from `spattn search`), grid is its building block, meant for
  // video inputs (frame=N), quest is a decode, sliding_window a baseline of the runner's.
  bool compared = true;
  // In a model runner: the prefill's backend (null: the Method over the cache's rows), the
  // decode's (null: none, --attn-decode refuses it), and which of them run across ranks.
  BackendFactory prefill = nullptr;
  BackendFactory decode = nullptr;
  bool context_parallel = false;
  bool decode_context_parallel = false;
};
// blasst has no default threshold: 1e-3 skips about 70% of the entries on the text workload
// (BENCHMARKS.md), the sparsity the paper reports its speedups at.
// A table: rows grouped by hand, not one field a line.
// clang-format off
const Entry kMethods[] = {
    {.name = "dense", .make = make_dense, .prefill = make_dense_prefill,
     .decode = make_dense_prefill, .context_parallel = true, .decode_context_parallel = true},
    {.name = "a_shape", .make = make_a_shape, .causal_only = true,
     .prefill = make_a_shape_prefill, .context_parallel = true},
    {.name = "tri_shape", .make = make_tri_shape, .causal_only = true},
    {.name = "sf_fixed", .make = make_sf_fixed, .causal_only = true},
    {.name = "sf_strided", .make = make_sf_strided, .causal_only = true},
    {.name = "vertical_slash", .make = make_vertical_slash, .causal_only = true},
    {.name = "mean_pool", .make = make_mean_pool, .count_param = "topk"},
    {.name = "xattention", .make = make_xattention},
    {.name = "flexprefill", .make = make_flexprefill, .causal_only = true},
    {.name = "oracle_topk", .make = make_oracle_topk, .evaluation_only = true,
     .count_param = "topk"},
    {.name = "blasst", .make = make_blasst, .default_params = "lambda=0.001",
     .prefill = make_blasst_prefill, .decode = make_blasst_decode, .context_parallel = true},
    {.name = "momo", .make = make_momo, .causal_only = true, .count_param = "k_trim"},
    {.name = "chunked_h2o", .make = make_chunked_h2o, .causal_only = true,
     .prefill = make_chunked_h2o_prefill, .context_parallel = true},
    {.name = "grid", .make = make_grid, .compared = false},
    {.name = "mminference", .make = make_mminference, .compared = false},
    {.name = "quest", .causal_only = true, .compared = false, .decode = make_quest_decode},
    // A model's own selection (deepseek32's lightning indexer): a runner's prefill and decode.
    {.name = "dsa", .causal_only = true, .compared = false, .prefill = make_dsa_backend,
     .decode = make_dsa_backend, .context_parallel = true, .decode_context_parallel = true},
    {.name = "sliding_window", .make = make_sliding_window, .causal_only = true,
     .compared = false, .prefill = make_sliding_window_prefill, .context_parallel = true},
};
// clang-format on

MethodInfo info_of(const Entry& e) {
  MethodInfo i;
  i.name = e.name;
  i.default_spec = *e.default_params ? i.name + ":" + e.default_params : i.name;
  i.evaluation_only = e.evaluation_only;
  i.causal_only = e.causal_only;
  i.count_param = e.count_param;
  i.prefills = e.make != nullptr || e.prefill != nullptr;
  i.decodes = e.decode != nullptr;
  i.context_parallel = e.context_parallel;
  i.decode_context_parallel = e.decode_context_parallel;
  return i;
}

// "a, b and c" of the names a predicate picks, in the registry's order.
template <class Pick>
std::string names_where(Pick pick, const char* last_sep) {
  std::vector<std::string> names;
  for (const auto& e : kMethods)
    if (pick(e)) names.emplace_back(e.name);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? last_sep : ", ") + names[i];
  return s;
}

const Entry& find(std::string_view name) {
  for (const auto& e : kMethods)
    if (name == e.name) return e;
  detail::fail("unknown method '", name,
               "' (known: ", names_where([](const Entry&) { return true; }, ", "), ")");
}
}  // namespace

std::vector<std::string> method_names() {
  std::vector<std::string> names;
  for (const auto& e : kMethods)
    if (e.compared) names.emplace_back(e.name);
  return names;
}

std::vector<MethodInfo> method_catalog() {
  std::vector<MethodInfo> infos;
  for (const auto& e : kMethods)
    if (e.compared) infos.push_back(info_of(e));
  return infos;
}

MethodInfo method_info(std::string_view name) { return info_of(find(name)); }

std::unique_ptr<Method> make_method(const MethodSpec& spec) {
  const Entry& e = find(spec.name);
  SPATTN_CHECK(e.make, spec.name,
               " is a decode method: give it to --attn-decode, not as "
               "attention over a whole input (methods with a prefill: ",
               names_where([](const Entry& x) { return x.make != nullptr; }, ", "), ")");
  return e.make(spec);
}

std::unique_ptr<Method> make_method(std::string_view text) {
  return make_method(parse_method_spec(text));
}

std::unique_ptr<LayerBackend> make_prefill_backend(const MethodSpec& spec,
                                                   const BackendContext& ctx) {
  const Entry& e = find(spec.name);
  SPATTN_CHECK(!ctx.cp || e.context_parallel, "--cp: --attn ", spec.text,
               " is not context-parallel (", context_parallel_names(), " are)");
  if (e.prefill) return e.prefill(spec, ctx);
  return make_method_prefill(make_method(spec), spec.text);
}

std::unique_ptr<LayerBackend> make_decode_backend(const MethodSpec& spec,
                                                  const BackendContext& ctx) {
  const Entry& e = find(spec.name);
  SPATTN_CHECK(e.decode, "--attn-decode: ", spec.name, " has no decode form (decode methods: ",
               names_where([](const Entry& x) { return x.decode != nullptr; }, " and "), ")");
  SPATTN_CHECK(!ctx.cp || e.decode_context_parallel, "--cp: --attn-decode ", spec.text,
               " is not context-parallel (",
               names_where([](const Entry& x) { return x.decode_context_parallel; }, " and "),
               " are)");
  return e.decode(spec, ctx);
}

std::string context_parallel_names() {
  return names_where([](const Entry& e) { return e.context_parallel; }, " and ");
}

}  // namespace spattn
