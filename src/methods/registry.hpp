// The list of methods `make_method` knows. Each method file defines one factory; adding a
// method is one new file and one line in registry.cpp.
#pragma once
#include <memory>

#include "spattn/method.hpp"

namespace spattn {

std::unique_ptr<Method> make_dense(const MethodSpec& spec);
std::unique_ptr<Method> make_a_shape(const MethodSpec& spec);
std::unique_ptr<Method> make_tri_shape(const MethodSpec& spec);
std::unique_ptr<Method> make_sf_fixed(const MethodSpec& spec);
std::unique_ptr<Method> make_sf_strided(const MethodSpec& spec);
std::unique_ptr<Method> make_vertical_slash(const MethodSpec& spec);
std::unique_ptr<Method> make_mean_pool(const MethodSpec& spec);
std::unique_ptr<Method> make_xattention(const MethodSpec& spec);
std::unique_ptr<Method> make_flexprefill(const MethodSpec& spec);
std::unique_ptr<Method> make_oracle_topk(const MethodSpec& spec);
std::unique_ptr<Method> make_blasst(const MethodSpec& spec);
std::unique_ptr<Method> make_momo(const MethodSpec& spec);
std::unique_ptr<Method> make_grid(const MethodSpec& spec);
std::unique_ptr<Method> make_mminference(const MethodSpec& spec);
std::unique_ptr<Method> make_chunked_h2o(const MethodSpec& spec);

}  // namespace spattn
