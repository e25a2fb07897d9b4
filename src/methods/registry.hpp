// The list of methods `make_method` knows. Each method file defines one factory; adding a
// method is one new file and one line in registry.cpp.
#pragma once
#include <memory>

#include "spattn/method.hpp"

namespace spattn {

std::unique_ptr<Method> make_dense(const MethodSpec& spec);
std::unique_ptr<Method> make_blasst(const MethodSpec& spec);

}  // namespace spattn
