// Checks that a method spec is refused with an Error that names what is wrong.
#pragma once
#include <gtest/gtest.h>

#include <string>

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

}  // namespace spattn::test
