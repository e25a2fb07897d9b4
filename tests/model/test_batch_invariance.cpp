// Whether a token's results depend on how many tokens its forward call holds (issue 26: the
// context-parallel perplexity against one process). The same prompt in chunks (-ub) of
// different sizes: layer 0's post-RoPE q rows come from the embeddings, the RMS norm and the
// f16 weight products alone, so a bit that differs there is the linear layers'; later layers
// add attention over the chunks. Measured: every chunk of 2 or more tokens gives every layer
// the same bits (ggml's f16 products of two or more rows run llamafile's tinyBLAS, one
// accumulator per output over K in a fixed order whatever the tile; the attention kernel's rows
// are independent of the query tile they sit in). A one-token call differs from layer 0 on
// (about 60% of layer 0's q values): ggml runs it through vec_dot_f16 instead, whose four
// interleaved accumulators sum K in another order. Decode is such a call in one process and
// under --cp alike.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "assets.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"

namespace spattn::test {
namespace {

struct Taps {
  std::vector<std::vector<float>> q;  // [layer][n * Hq * d]
};

Taps prefill_in_chunks(const model::Model& m, const std::vector<int32_t>& tokens, int64_t ub) {
  const model::Config& c = m.config();
  const int64_t n = int64_t(tokens.size()), dq = c.n_head * c.head_dim;
  model::SessionOptions so;
  so.n_ctx = n + 8;
  so.n_ubatch = ub;
  so.n_batch = ub;
  so.threads = 1;
  model::Session s(m, so);
  Taps t;
  t.q.assign(size_t(c.n_layer), std::vector<float>(size_t(n * dq)));
  s.set_qkv_tap(model::Session::kTapAllLayers, [&](int64_t l, int64_t pos0, int64_t rows,
                                                   const float* q, const float*, const float*) {
    std::copy_n(q, rows * dq, t.q[size_t(l)].data() + pos0 * dq);
  });
  s.prefill(tokens, nullptr, int64_t(tokens.size()) - 1);
  return t;
}

TEST(BatchInvarianceReal, ChunksOfTwoOrMoreTokensGiveEveryLayerTheSameBits) {
  const std::string path = model_file("code-tiny-8k.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("code-tiny-8k.gguf in " << models_dir());
  auto file = std::make_shared<const gguf::File>(gguf::File::open(path));
  const model::Model m = model::load_model(file);
  std::vector<int32_t> tokens(192);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % 4000 + 10);
  const Taps ref = prefill_in_chunks(m, tokens, 192);
  for (int64_t ub : {1, 2, 3, 17, 64}) {
    const Taps t = prefill_in_chunks(m, tokens, ub);
    for (size_t l = 0; l < ref.q.size(); ++l) {
      size_t differ = 0;
      for (size_t i = 0; i < ref.q[l].size(); ++i)
        differ += std::memcmp(&ref.q[l][i], &t.q[l][i], sizeof(float)) != 0;
      if (l == 0 || differ > 0)
        std::printf("ub %lld layer %zu: %zu of %zu q values differ in bits\n", (long long)ub, l,
                    differ, ref.q[l].size());
      if (ub >= 2) EXPECT_EQ(differ, 0u) << "ub " << ub << " layer " << l;
    }
  }
}

}  // namespace
}  // namespace spattn::test
