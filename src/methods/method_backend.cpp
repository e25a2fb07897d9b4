// Any library method's prefill in a model runner: the method runs over every key before and in
// the call's rows, as the cache holds them (its raw f32 rows, which the same appends write), so
// a method in the registry reaches `run`, `perplexity`, `serve` and `eval` with no code here.
// A Method's run is const and keeps nothing, so a session's forks share it.
#include <memory>
#include <string>

#include "methods/layer_backend.hpp"
#include "methods/registry.hpp"
#include "spattn/method.hpp"

namespace spattn {

MethodPrefill::MethodPrefill(std::shared_ptr<const Method> method, std::string spec)
    : method_(std::move(method)), spec_(std::move(spec)) {}

BackendCaps MethodPrefill::capabilities() const {
  BackendCaps c;
  c.raw_keys = true;
  return c;
}

TensorView MethodPrefill::prefill(const LayerCall& c) {
  AttnOptions a = c.opt;
  a.q_start = -1;  // bottom-right: the call's rows are the last the cache holds
  const MethodReport r = method_->run(c.q, c.raw_k, c.raw_v, c.out, a, c.lse);
  if (c.stats) c.stats->add(r.stats);
  return c.out;
}

std::unique_ptr<LayerBackend> make_method_prefill(std::shared_ptr<const Method> method,
                                                  const std::string& spec) {
  return std::make_unique<MethodPrefill>(std::move(method), spec);
}

}  // namespace spattn
