#include <gtest/gtest.h>
#include "spattn/spattn.hpp"
TEST(Smoke, Builds) { EXPECT_EQ(spattn::dtype_size(spattn::DType::bf16), 2u); }
