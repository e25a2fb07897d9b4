// gemma3 (issue 21), qwen3moe, gpt-oss, qwen3 with YaRN, seed_oss, deepseek2, deepseek32 and
// glm-dsa against llama.cpp on made-up models, f16 and Q4_K_M (gpt-oss: MXFP4_MOE): greedy
// text for 64 tokens and perplexity at -c 1024 over
// 3 windows of code-heldout.txt, through scripts/gemma3_vs_llama.sh, scripts/moe_vs_llama.sh,
// scripts/gpt_oss_vs_llama.sh and scripts/yarn_vs_llama.sh (the whole file and longer contexts
// by hand: README). Needs llama.cpp's built tools (tests/assets.hpp says where they are found);
// skipped where they or the held-out text are absent, failed under SPATTN_REQUIRE_ASSETS=1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "assets.hpp"
#include "cli_run.hpp"
#include "gguf_edit.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

// scripts/SCRIPT LLAMA_BIN SPATTN -c 1024 --chunks 3 --text code-heldout.txt: passes on exit 0,
// skips on 77 (a comparison not made). long: -c 8192 over one window instead and no greedy
// text (its 64 tokens after a short prompt never reach the top-k), with SPATTN_VS_LLAMA_LONG=1
// (the scripts' long checks: their headers).
void expect_script_passes(const std::string& script, bool long_context = false) {
  using spattn::test::llama_bin;
  const std::string text = spattn::test::model_file("code-heldout.txt");
  if (text.empty()) SPATTN_MISSING_ASSET("code-heldout.txt in " << spattn::test::models_dir());
  const std::string tool =
      spattn::test::missing_llama_tool({"llama-completion", "llama-perplexity", "llama-quantize"});
  if (!tool.empty()) SPATTN_MISSING_ASSET(tool << " in " << llama_bin() << " (SPATTN_LLAMA_BIN)");
  const spattn::test::TempDir dir("spattn_" + script);
  const std::string cmd =
      std::string(long_context ? "exec env SPATTN_VS_LLAMA_LONG=1 sh " : "exec sh ") +
      SPATTN_SOURCE_DIR + "/scripts/" + script + " " + llama_bin().string() + " " +
      SPATTN_CLI_PATH + (long_context ? " -c 8192 --chunks 1 -n 0" : " -c 1024 --chunks 3") +
      " --text " + text + " >" + (dir / "out").string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string out = spattn::test::slurp(dir / "out");
  ASSERT_TRUE(WIFEXITED(status)) << out;
  if (WEXITSTATUS(status) == 77)
    SPATTN_MISSING_ASSET("a comparison " << script << " could not make: " << out);
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
}

TEST(ArchVsLlamaCpp, Gemma3GreedyTextAndPerplexity) { expect_script_passes("gemma3_vs_llama.sh"); }

// qwen3moe (mixtures of experts): greedy text with every expert used, perplexity within 0.5%
// with 8 of 8 and 2 of 8 used, f16 and Q4_K_M (scripts/moe_vs_llama.sh says why the routed
// model's text is not judged).
TEST(ArchVsLlamaCpp, Qwen3MoeGreedyTextAndPerplexity) { expect_script_passes("moe_vs_llama.sh"); }

// gpt-oss (sinks, biases, sliding-window layers, experts with biases, OpenAI's SwiGLU, YaRN):
// greedy text with every expert used and perplexity within 0.5% with 4 of 4 and 2 of 8, f16
// and MXFP4_MOE.
TEST(ArchVsLlamaCpp, GptOssGreedyTextAndPerplexity) { expect_script_passes("gpt_oss_vs_llama.sh"); }

// qwen3 with YaRN rope scaling: greedy text and perplexity within 0.5%, f16 and Q4_K_M.
TEST(ArchVsLlamaCpp, Qwen3YarnGreedyTextAndPerplexity) { expect_script_passes("yarn_vs_llama.sh"); }

// seed_oss, an architecture added as one row of the traits table: greedy text and perplexity
// within 0.5%, f16 and Q4_K_M.
TEST(ArchVsLlamaCpp, SeedOssGreedyTextAndPerplexity) {
  expect_script_passes("seed_oss_vs_llama.sh");
}

// deepseek2 (latent attention: attn_kv_b's layout run expanded, as llama.cpp runs it, and the
// absorbed layout (attn_k_b / attn_v_b) run absorbed over the latent cache, as llama.cpp's
// is_mla; DeepSeekMoE: a dense first layer, shared experts, sigmoid gating with the selection
// bias, group-limited routing, scaled weights): greedy text with every expert used, perplexity
// within 0.01% or 0.5% (the script's header says which), f16 and Q8_0.
TEST(ArchVsLlamaCpp, DeepSeek2GreedyTextAndPerplexity) {
  expect_script_passes("deepseek2_vs_llama.sh");
}

// deepseek32 (the absorbed layout and form over the latent cache, as llama.cpp's, DSA's lightning indexer): with
// the preset's top-k past the context, spattn dense and dsa against llama.cpp: greedy text and
// perplexity within 0.01%, f16; perplexity within 0.5%, Q8_0. (A top-k of 32 is reported by
// the script, not judged: issue 63.)
TEST(ArchVsLlamaCpp, DeepSeek32GreedyTextAndPerplexity) {
  expect_script_passes("deepseek32_vs_llama.sh");
}

// scripts/arch_vs_llama.py on `preset` shrunk to deepseek32_vs_llama.sh's shape with the
// indexer's top-k `top_k` (0: the preset's), its keys made zero where asked (the key
// LayerNorm's weight and bias), attention.indexer.types `types` (empty: none) and `heads` q
// heads (the absorbed form's rows over its one latent head), dsa,
// perplexity within ppl_rel at -c ctx over `chunks` windows and greedy text for `n` tokens;
// dsa's perplexity must differ from spattn's dense one by more than `apart` of it (the
// selection matters).
struct MadeDsa {
  int64_t top_k = 0, ctx = 512, heads = 4;
  int chunks = 2, n = 0;
  bool zero_keys = true;
  std::vector<uint32_t> types;
  uint64_t seed = 7;
  const char* ppl_rel = "0.0001";
  double apart = 1e-3;
};
void expect_made_dsa_matches(const char* preset, const MadeDsa& o) {
  using spattn::test::llama_bin;
  SCOPED_TRACE(preset);
  const std::string text = spattn::test::model_file("code-heldout.txt");
  if (text.empty()) SPATTN_MISSING_ASSET("code-heldout.txt in " << spattn::test::models_dir());
  const std::string tool =
      spattn::test::missing_llama_tool({"llama-completion", "llama-perplexity", "llama-quantize"});
  if (!tool.empty()) SPATTN_MISSING_ASSET(tool << " in " << llama_bin() << " (SPATTN_LLAMA_BIN)");
  const spattn::test::TempDir dir("spattn_dsa_topk");
  spattn::ModelShape s = spattn::preset_shape(preset);
  s.layers = 4, s.dense_layers = 1, s.dim = 256, s.heads = o.heads, s.kv_heads = o.heads;
  s.head_dim = 48;
  s.rope_dim = 16, s.v_head_dim = 32, s.q_lora = 96, s.kv_lora = 64, s.ffn = 512;
  s.expert_ffn = 64, s.shared_experts = 1, s.experts = 8, s.experts_used = 8;
  s.expert_groups = 0, s.groups_used = 0, s.indexer_heads = 4, s.indexer_dim = 64;
  if (o.top_k > 0) s.indexer_top_k = o.top_k;
  s.indexer_types = o.types;
  s.vocab = 2048, s.context = 8192;
  s.type = spattn::gguf::GgmlType::f16, s.tied = false, s.seed = o.seed;
  const std::string made = (dir / "made.gguf").string(), zero = (dir / "zero-keys.gguf").string();
  spattn::make_model(made, s);
  if (o.zero_keys) {
    spattn::test::GgufEdit e;
    for (int64_t l = 0; l < s.layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".indexer.k_norm.";
      e.f32_tensors[b + "weight"] = std::vector<float>(size_t(s.indexer_dim), 0.0f);
      e.f32_tensors[b + "bias"] = std::vector<float>(size_t(s.indexer_dim), 0.0f);
    }
    spattn::test::write_edited(spattn::gguf::File::open(made), zero, e);
  }
  const std::string model = o.zero_keys ? zero : made;
  const spattn::test::CliRun run = spattn::test::run_script(
      "arch_vs_llama.py",
      "--json --llama-bin " + llama_bin().string() + " --spattn " + SPATTN_CLI_PATH + " -m " +
          model + " --spattn-attn dsa --ppl-rel " + o.ppl_rel + " -n " + std::to_string(o.n) +
          " -c " + std::to_string(o.ctx) + " --chunks " + std::to_string(o.chunks) + " --text " +
          text,
      dir);
  const std::string& out = run.out;
  ASSERT_TRUE(run.exited()) << out;
  if (run.code() == 77)
    SPATTN_MISSING_ASSET("a comparison arch_vs_llama.py could not make: " << out);
  EXPECT_EQ(run.code(), 0) << out;
  const nlohmann::json rows = nlohmann::json::parse(out);
  for (const nlohmann::json& r : rows) {
    if (r["check"] == "perplexity" && r.contains("spattn")) {
      EXPECT_GT(std::abs(r["spattn"].get<double>() - r["spattn_dense"].get<double>()),
                o.apart * r["spattn"].get<double>())
          << "dsa's perplexity is dense's: the top-k did not select\n"
          << out;
    }
  }
}

// deepseek32 and glm-dsa with each query's top-k (32) below its context (512): the indexer's
// keys made zero, so that every token scores exactly 0 on both sides and llama.cpp's top_k
// (ggml's partial_sort over equal scores) keeps each row's first 32 tokens, a selection
// rounding cannot move (on a file with random keys, the tokens near each cut swap with the two
// sides' rounding: docs/methods/dsa.md). spattn's dsa attends over those tokens alone in
// prefill and decode: greedy text and perplexity within 0.01% of llama.cpp's.
TEST(ArchVsLlamaCpp, DsaTopKBelowTheContext) {
  MadeDsa o;
  o.top_k = 32, o.n = 64;
  for (const char* preset : {"deepseek-v3.2", "glm-5"}) expect_made_dsa_matches(preset, o);
}

// The same with V3.2's 128 q heads: a decode row's heads span two tiles of rows over the latent,
// so its 32 tokens are staged once for the call (token_sparse.cpp's stage_listed) where each
// tile gathered them. Perplexity within 0.02%: this file's stands 0.0105% from llama.cpp's
// (3214.887 against 3214.550) with the staging and without it alike (its 128 heads' sums round
// apart), and its greedy text parts at a near tie after 12 tokens.
TEST(ArchVsLlamaCpp, DsaTopKBelowTheContext128Heads) {
  MadeDsa o;
  o.top_k = 32, o.n = 64, o.heads = 128, o.ppl_rel = "0.0002";
  expect_made_dsa_matches("deepseek-v3.2", o);
}

// The same at the long context: the preset's top-k 2048 at -c 8192, one window
// (minutes: llama.cpp computes every score of its 8192 x 8192 masked attention).
TEST(ArchVsLlamaCpp, DsaTopKBelowTheContextAt8192Slow) {
  MadeDsa o;
  o.ctx = 8192, o.chunks = 1;
  expect_made_dsa_matches("deepseek-v3.2", o);
}

// GLM-5.2's layers that share another layer's selection (attention.indexer.types 1, 0, 1, 0:
// layers 1 and 3 have no indexer and attend over the tokens layers 0 and 2 chose) on
// glm_dsa_vs_llama.sh's shape with top-k 32 at -c 512, its random keys (zero keys would make
// every layer choose the same tied tokens, hiding which layer's choice a shared one reads):
// greedy text equal and perplexity within 0.1% of llama.cpp's (the random keys' near ties at
// the cuts; 0.04% when written), and dsa's apart from spattn's dense.
TEST(ArchVsLlamaCpp, Glm52SharedIndexerLayers) {
  MadeDsa o;
  o.top_k = 32, o.n = 32, o.zero_keys = false, o.types = {1, 0, 1, 0}, o.seed = 11;
  o.ppl_rel = "0.001", o.apart = 1e-2;
  expect_made_dsa_matches("glm-5", o);
}

// glm-dsa (GLM-5: deepseek32's layers with the indexer's RoPE in adjacent pairs, its key's
// LayerNorm without epsilon): with the preset's top-k past the context, spattn dense and dsa
// against llama.cpp, f16 and Q8_0: greedy text and perplexity within 0.01%.
TEST(ArchVsLlamaCpp, GlmDsaGreedyTextAndPerplexity) { expect_script_passes("glm_dsa_vs_llama.sh"); }

// The latent attention's scripts at the long context (label long: `make test-long`, not
// `make test`; tens of minutes on 2 cores): -c 8192 over one window of code-heldout.txt, where
// deepseek32's and glm-dsa's top-k 2048 selects (each late token reads 2048 of up to 8191
// predecessors), f16 and Q8_0, spattn dense and dsa; the scripts' headers give the bars.
TEST(ArchVsLlamaCppLong, DeepSeek2At8192) { expect_script_passes("deepseek2_vs_llama.sh", true); }
TEST(ArchVsLlamaCppLong, DeepSeek32At8192) { expect_script_passes("deepseek32_vs_llama.sh", true); }
TEST(ArchVsLlamaCppLong, GlmDsaAt8192) { expect_script_passes("glm_dsa_vs_llama.sh", true); }

}  // namespace
