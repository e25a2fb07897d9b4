// The storage table (spattn/storage_type.hpp): its rows agree with ggml's own type table, each
// vocabulary maps onto rows that take it, and what is derived from the table (names, sizes, the
// type lists in error messages) says what the table says.
#include <gtest/gtest.h>

#include <string>

#include "kernels/gemm_widen.hpp"
#include "kernels/packed_kv.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/storage_type.hpp"

namespace spattn {
namespace {

TEST(StorageTypes, RowsAreGgmlsBlocksAndNames) {
  for (const StorageTraits& r : kStorageTypes) {
    SCOPED_TRACE(std::string(r.name));
    ASSERT_TRUE(gguf::is_known_type(r.ggml_id));
    const auto g = gguf::GgmlType(r.ggml_id);
    EXPECT_EQ(r.name, gguf::type_name(g));
    EXPECT_EQ(r.block, gguf::block_size(g));
    EXPECT_EQ(r.block_bytes, gguf::block_bytes(g));
    EXPECT_EQ(&storage_traits(r.type), &r);
  }
}

TEST(StorageTypes, EachVocabularyMapsOntoRowsThatTakeIt) {
  for (DType t : kDTypes) {
    EXPECT_TRUE(traits(t).takes(kTensor));
    EXPECT_EQ(dtype_size(t), size_t(traits(t).block_bytes));
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  for (KVType t : kKVTypes) {
    EXPECT_TRUE(traits(t).takes(kKVCache));
    EXPECT_TRUE(is_kv_type(t));
    EXPECT_EQ(parse_kv_type(kv_type_name(t)), t);
    EXPECT_DOUBLE_EQ(kv_type_bytes_per_element(t) * double(traits(t).block),
                     double(traits(t).block_bytes));
  }
  EXPECT_FALSE(is_kv_type(KVType(kKVTypes.size())));
  for (kernels::Operands o : kernels::kOperands) EXPECT_TRUE(traits(o).takes(kDotOperand));
  for (kernels::WeightFormat f : kernels::kWeightFormats) {
    EXPECT_TRUE(traits(f).takes(kWeightWiden));
    EXPECT_EQ(kernels::widen_format(gguf::GgmlType(traits(f).ggml_id)), f);
  }
  // Decode reads in place exactly the 16-bit cache types.
  for (KVType t : kKVTypes)
    EXPECT_EQ(traits(t).takes(kKVInPlace), traits(t).value_bytes() == 2) << kv_type_name(t);
}

TEST(StorageTypes, ExactDtypeOfACacheType) {
  EXPECT_EQ(dtype_holding(KVType::f32), DType::f32);
  EXPECT_EQ(dtype_holding(KVType::f16), DType::f16);
  EXPECT_EQ(dtype_holding(KVType::bf16), DType::bf16);
  EXPECT_EQ(dtype_holding(KVType::q8_0), DType::f32);  // int8 times an f16 scale: exact in f32
}

TEST(StorageTypes, ErrorListsComeFromTheTable) {
  EXPECT_EQ(storage_names(kKVTypes), "f32, f16, bf16 or q8_0");
  EXPECT_EQ(storage_names(kDTypes), "f32, bf16 or f16");
  EXPECT_EQ(storage_names(kernels::kWeightFormats), "f16, q8_0, q6_K, q5_K or q3_K");
  try {
    parse_dtype("f8");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown dtype 'f8' (expected f32, bf16 or f16)");
  }
}

}  // namespace
}  // namespace spattn
