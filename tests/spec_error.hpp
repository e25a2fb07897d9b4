// Checks that a method spec (or a decode spec) is refused with an Error that names what is wrong.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "methods/registry.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"

namespace spattn::test {

inline void expect_spec_error(const std::string& spec, const std::string& mention) {
  try {
    make_method(spec);
    ADD_FAILURE() << "accepted '" << spec << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << spec << ": " << e.what();
  }
}

// The same for a runner's decode spec (`--attn-decode`: the registry's decode backend).
inline void expect_decode_spec_error(const std::string& spec, const std::string& mention) {
  try {
    make_decode_backend(parse_method_spec(spec), BackendContext{});
    ADD_FAILURE() << "accepted '" << spec << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << spec << ": " << e.what();
  }
}

}  // namespace spattn::test
