// The spattn binary end to end: bad input of every kind must end in a message and exit code
// 2 (never a signal or an uncaught exception), and --json must be one parseable object with
// sane values. Sizes stay tiny so each test takes a second or two even with a slow kernel.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include <unistd.h>

#include "cli_run.hpp"
#include "spattn/cuda.hpp"
#include "spattn/method.hpp"
#include "kernels/flash_common.hpp"
#include "spattn/io.hpp"
#include "spattn/tensor.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

using spattn::test::CliRun;
using spattn::test::slurp;

// The running test's folder: the fixture below makes one per test and removes it after.
const spattn::test::TempDir* g_root = nullptr;

fs::path test_root() { return g_root->path(); }

// A fresh directory for this test's files (`what`: "files" or "run"); cleared when asked
// for, so a test asks for each kind once.
fs::path test_dir(const char* what = "files") {
  fs::path dir = test_root() / what;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { g_root = &root_; }
  void TearDown() override { g_root = nullptr; }
  const spattn::test::TempDir root_{"spattn_cli"};
};

// `exec` replaces the shell with spattn, so a crash shows up as a signal in the wait status
// instead of being turned into exit code 128+N by sh.
CliRun run_cli(const std::string& args) { return spattn::test::run_spattn(args, test_dir("run")); }

// Small bench settings shared by every test.
const std::string kSmall = "bench --seq 128 --heads 2 --dim 64 --repeat 1 --workload random ";

void expect_bad_input(const CliRun& r, const std::string& mention) {
  ASSERT_TRUE(r.exited()) << "killed by a signal; stderr: " << r.err;
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find("spattn: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos)
      << "stderr should mention '" << mention << "': " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// q, k, v [2, 128, 64] f32 in one .safetensors file; `poison` puts a NaN into q.
fs::path write_qkv(const fs::path& dir, bool poison = false) {
  spattn::Tensor q(spattn::DType::f32, 2, 128, 64), k(spattn::DType::f32, 2, 128, 64),
      v(spattn::DType::f32, 2, 128, 64);
  for (spattn::Tensor* t : {&q, &k, &v})
    for (int64_t i = 0; i < t->numel(); ++i) t->data_as<float>()[i] = std::sin(0.37f * i);
  if (poison) q.data_as<float>()[77] = std::numeric_limits<float>::quiet_NaN();
  const fs::path path = dir / (poison ? "nan.safetensors" : "qkv.safetensors");
  spattn::write_safetensors(path.string(), {{"q", q}, {"k", k}, {"v", v}});
  return path;
}

TEST_F(Cli, UnknownMethodExits2AndNamesIt) {
  expect_bad_input(run_cli(kSmall + "--method no_such_method"), "no_such_method");
  expect_bad_input(run_cli(kSmall + "--methods dense,other_missing"), "other_missing");
}

TEST_F(Cli, UnknownParameterExits2AndNamesIt) {
  expect_bad_input(run_cli(kSmall + "--method dense:foo=1"), "'foo'");
}

// A BLASST visiting order that does not exist is named, before any data is made.
TEST_F(Cli, UnknownBlasstOrderExits2AndNamesIt) {
  expect_bad_input(run_cli(kSmall + "--method blasst:lambda=0.01,order=sideways"), "sideways");
}

// --matched adds each block top-k method at the topk nearest the other methods' sparsity, and
// names what it cannot match.
TEST_F(Cli, MatchedDensityRowsAndBadNames) {
  const CliRun r = run_cli(
      "bench --seq 512 --heads 2 --dim 64 --repeat 1 --method blasst:lambda=0.01 "
      "--matched oracle_topk,mean_pool --json");
  ASSERT_EQ(r.code(), 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 4u);
  const double target = j["results"][1]["sparsity"].get<double>();
  for (int i : {2, 3}) {
    const std::string name = j["results"][i]["method"].get<std::string>();
    EXPECT_NE(name.find(":topk="), std::string::npos) << name;
    // 8 key blocks of 64: one block more or less moves sparsity by at most ~1/5 here.
    EXPECT_NEAR(j["results"][i]["sparsity"].get<double>(), target, 0.2) << name;
  }
  expect_bad_input(run_cli(kSmall + "--matched dense"), "--matched: dense has no block count");
  expect_bad_input(run_cli(kSmall + "--matched xattention"),
                   "--matched: xattention has no block count");
  expect_bad_input(run_cli(kSmall + "--matched oracle_topk:topk=3"), "plain names");
}

// A topp run is matched to its own method's count twin with its other parameters kept (momo by
// k_trim, with the topp run's gamma and blend), and to the other named methods by theirs.
TEST_F(Cli, MatchedToppGetsItsCountTwin) {
  const CliRun r = run_cli(
      "bench --seq 1024 --heads 2 --dim 32 --repeat 1 --method "
      "momo:topp=0.5,gamma=32,blend=mean_pool --matched momo,oracle_topk --json");
  ASSERT_EQ(r.code(), 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 4u) << r.out;
  const double target = j["results"][1]["sparsity"].get<double>();
  EXPECT_EQ(j["results"][1]["method"], "momo:topp=0.5,gamma=32,blend=mean_pool");
  const std::string twin = j["results"][2]["method"].get<std::string>();
  EXPECT_EQ(twin.rfind("momo:blend=mean_pool,gamma=32,k_trim=", 0), 0u) << twin;
  EXPECT_EQ(twin.find("topp"), std::string::npos) << twin;
  EXPECT_EQ(j["results"][3]["method"].get<std::string>().rfind("oracle_topk:topk=", 0), 0u);
  for (int i : {2, 3})  // 16 key blocks of 64: a block more or less moves sparsity ~1/10
    EXPECT_NEAR(j["results"][i]["sparsity"].get<double>(), target, 0.12) << r.out;
  // momo's share threshold gets its count twin the same way.
  const CliRun t = run_cli(
      "bench --seq 1024 --heads 2 --dim 32 --repeat 1 --method "
      "momo:min_share=0.02,gamma=32 --matched momo --json");
  ASSERT_EQ(t.code(), 0) << t.err;
  const auto jt = nlohmann::json::parse(t.out);
  ASSERT_EQ(jt["results"].size(), 3u) << t.out;
  EXPECT_EQ(jt["results"][2]["method"].get<std::string>().rfind("momo:gamma=32,k_trim=", 0), 0u);
}

// -ctk / -ctv as llama.cpp spells them: an unknown cache type is named, before the model loads
// (the file need not exist), on run and perplexity, with either spelling.
TEST_F(Cli, UnknownKVCacheTypeExits2AndNamesIt) {
  const std::string msg = "unknown KV cache type 'nonsense' (expected f32, f16, bf16 or q8_0)";
  expect_bad_input(run_cli("run -m none.gguf -p hi -ctk nonsense"), msg);
  expect_bad_input(run_cli("run -m none.gguf -p hi -ctv nonsense"), msg);
  expect_bad_input(run_cli("run -m none.gguf -p hi --cache-type-k nonsense"), msg);
  expect_bad_input(run_cli("perplexity -m none.gguf -f none.txt -ctk nonsense"), msg);
  expect_bad_input(run_cli("perplexity -m none.gguf -f none.txt -ctv q4_0"), "'q4_0'");
}

TEST_F(Cli, BadDtypeExits2) { expect_bad_input(run_cli(kSmall + "--dtype f64"), "f64"); }

TEST_F(Cli, BadWorkloadExits2) {
  expect_bad_input(run_cli("bench --seq 128 --repeat 1 --workload speech"), "speech");
}

TEST_F(Cli, ZeroSeqExits2) { expect_bad_input(run_cli("bench --seq 0 --repeat 1"), "--seq"); }

TEST_F(Cli, BadShapesExit2) {
  expect_bad_input(run_cli("bench --seq 128 --repeat 1 --heads 3 --kv-heads 2"), "--kv-heads");
  expect_bad_input(run_cli("bench --seq 128 --repeat 1 --dim 60"), "60");
}

TEST_F(Cli, BadQLenExits2) {
  expect_bad_input(run_cli(kSmall + "--q-len -1"), "--q-len");
  expect_bad_input(run_cli(kSmall + "--q-len 129"), "--q-len");  // kSmall has --seq 128
  const fs::path path = write_qkv(test_dir());                   // 128 query rows
  expect_bad_input(run_cli("bench --repeat 1 --qkv " + path.string() + " --q-len 200"), "--q-len");
}

TEST_F(Cli, MissingQkvFileExits2) {
  const fs::path missing = test_dir() / "missing.safetensors";
  expect_bad_input(run_cli("bench --repeat 1 --qkv " + missing.string()), "missing");
}

TEST_F(Cli, GarbageQkvFileExits2) {
  const fs::path path = test_dir() / "garbage.safetensors";
  std::ofstream(path, std::ios::binary) << std::string(1000, '\x7f') << "not a tensor file";
  expect_bad_input(run_cli("bench --repeat 1 --qkv " + path.string()), path.string());
}

TEST_F(Cli, TruncatedQkvFileExits2) {
  const fs::path path = write_qkv(test_dir());
  fs::resize_file(path, fs::file_size(path) / 2);
  expect_bad_input(run_cli("bench --repeat 1 --qkv " + path.string()), path.string());
}

TEST_F(Cli, NanInputExits2) {
  const fs::path path = write_qkv(test_dir(), /*poison=*/true);
  expect_bad_input(run_cli("bench --repeat 1 --qkv " + path.string()), "non-finite");
}

TEST_F(Cli, BenchDeviceMustBeCpuOrCuda) {
  expect_bad_input(run_cli(kSmall + "--device gpu"), "--device must be cpu or cuda");
}

// --device cuda: where this build has no backend or this machine no GPU (every CI machine),
// exit 2 naming which; on a GPU machine the bench runs there, says which device, gives a method
// without a GPU path a row saying so, and refuses f32 inputs.
TEST_F(Cli, BenchDeviceCuda) {
  if (spattn::cuda::device_count() == 0) {
    expect_bad_input(run_cli(kSmall + "--device cuda"),
                     spattn::cuda::built() ? "no CUDA device" : "built without CUDA");
    return;
  }
  const CliRun r = run_cli(
      kSmall + "--device cuda --method blasst:lambda=0.01 --methods a_shape,vertical_slash");
  ASSERT_TRUE(r.exited()) << r.err;
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("device: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not run on the GPU: vertical_slash: no GPU path yet"), std::string::npos)
      << r.out;
  expect_bad_input(run_cli(kSmall + "--device cuda --dtype f32"), "bf16 or f16");
  const CliRun j =
      run_cli(kSmall + "--device cuda --dtype f16 --methods momo,vertical_slash --json");
  ASSERT_EQ(j.code(), 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["config"]["dtype"], "f16");
  EXPECT_EQ(doc["results"][0]["method"], "dense");
  EXPECT_GT(doc["results"][0]["dense_equiv_tflops"].get<double>(), 0.0);
  // momo runs on the GPU (its selection too); vertical_slash has no GPU path.
  EXPECT_FALSE(doc["results"][1].contains("unavailable")) << doc["results"][1];
  EXPECT_GT(doc["results"][1]["recall"].get<double>(), 0.5) << doc["results"][1];
  EXPECT_NE(doc["results"][2]["unavailable"].get<std::string>().find("no GPU path"),
            std::string::npos);
}

TEST_F(Cli, ParseErrorsUseCli11ExitCodes) {
  const CliRun r = run_cli("bench --seq 128 --repeat lots");
  ASSERT_TRUE(r.exited());
  EXPECT_NE(r.code(), 0);
  EXPECT_NE(r.code(), 2);  // 2 means a spattn::Error; this never got that far
  EXPECT_NE(r.err.find("--repeat"), std::string::npos) << r.err;
}

// rel_tol: the dense kernel's output error against the exact reference; bf16 kernels may
// round the softmax weights to bf16 (eps 2^-8), f32 ones are near f32 rounding.
void expect_sane_dense(const nlohmann::json& d, double rel_tol) {
  EXPECT_EQ(d.at("method"), "dense");
  EXPECT_GT(d.at("ms").get<double>(), 0);
  EXPECT_GT(d.at("gflops").get<double>(), 0);
  EXPECT_DOUBLE_EQ(d.at("speedup").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(d.at("sparsity").get<double>(), 0.0);
  EXPECT_NEAR(d.at("recall").get<double>(), 1.0, 1e-9);
  EXPECT_NEAR(d.at("recall_min").get<double>(), 1.0, 1e-9);
  EXPECT_LT(d.at("rel_l2").get<double>(), rel_tol);
  EXPECT_GT(d.at("cosine_min").get<double>(), 1.0 - rel_tol);
}

TEST_F(Cli, JsonIsOneObjectWithSaneValues) {
  const CliRun r = run_cli(kSmall + "--json --methods dense --seed 7");
  ASSERT_TRUE(r.exited());
  ASSERT_EQ(r.code(), 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // throws on trailing text too
  ASSERT_TRUE(j.is_object());
  const auto& m = j.at("machine");
  for (const char* key : {"cpu", "simd", "compiler", "blas"})
    EXPECT_FALSE(m.at(key).get<std::string>().empty()) << key;
  EXPECT_GE(m.at("threads").get<int>(), 1);
  // The peaks measured in the process: peak_gflops is the f32 FMA peak, sgemm its own field.
  EXPECT_GT(j.at("peak_gflops").get<double>(), 0.1);
  EXPECT_EQ(j.at("peak_gflops"), j.at("fma_gflops"));
  EXPECT_GT(j.at("sgemm_gflops").get<double>(), 0.1);
  EXPECT_GT(j.at("read_gbps").get<double>(), 0.1);
  // The bf16 dot peak is timed where the CPU has the instruction and 0 exactly where not.
  if (spattn::kernels::cpu_has_bf16_dot())
    EXPECT_GT(j.at("bf16_dot_gflops").get<double>(), 0.1);
  else
    EXPECT_EQ(j.at("bf16_dot_gflops").get<double>(), 0.0);
  EXPECT_FALSE(j.contains("bf16_path"));  // f32 inputs: no bf16 operand path to choose
  const auto& c = j.at("config");
  EXPECT_EQ(c.at("seq"), 128);
  EXPECT_EQ(c.at("heads"), 2);
  EXPECT_EQ(c.at("dim"), 64);
  EXPECT_EQ(c.at("dtype"), "f32");
  EXPECT_EQ(c.at("causal"), true);
  EXPECT_EQ(c.at("seed"), 7);
  EXPECT_EQ(c.at("workload"), "random");
  // dense was asked for explicitly and is the baseline: it runs once.
  ASSERT_EQ(j.at("results").size(), 1u);
  expect_sane_dense(j.at("results")[0], 1e-4);
  const auto& d = j.at("results")[0];
  EXPECT_EQ(d.at("operands"), "f32");
  EXPECT_DOUBLE_EQ(d.at("peak_fraction").get<double>(), d.at("fma_peak_fraction").get<double>());
}

// bf16 inputs: --bf16-path auto times both operand paths where the CPU has both and reports
// the choice; every result names the path it ran and is measured against that path's peak.
TEST_F(Cli, Bf16PathIsChosenAndReported) {
  const CliRun r = run_cli(kSmall + "--dtype bf16 --json --methods dense");
  ASSERT_TRUE(r.exited());
  ASSERT_EQ(r.code(), 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const auto& b = j.at("bf16_path");
  EXPECT_EQ(b.at("mode"), "auto");
  const std::string chosen = b.at("chosen");
  const auto& d = j.at("results")[0];
  const double bf16_peak = j.at("bf16_dot_gflops"), fma_peak = j.at("fma_gflops");
  const double gflops = d.at("gflops");
  if (bf16_peak > 0) {  // the CPU has the dot product: both paths were timed
    EXPECT_TRUE(chosen == "dot" || chosen == "widen") << chosen;
    EXPECT_GT(b.at("dot_ms").get<double>(), 0);
    EXPECT_GT(b.at("widen_ms").get<double>(), 0);
    EXPECT_EQ(chosen == "dot", b.at("dot_ms").get<double>() <= b.at("widen_ms").get<double>());
  } else {
    EXPECT_EQ(chosen, "widen");
    EXPECT_TRUE(b.at("dot_ms").is_null());
  }
  EXPECT_EQ(d.at("operands"), chosen == "dot" ? "bf16-dot" : "f32");
  EXPECT_NEAR(d.at("peak_fraction").get<double>(),
              gflops / (chosen == "dot" ? bf16_peak : fma_peak), 1e-9);
  EXPECT_NEAR(d.at("fma_peak_fraction").get<double>(), gflops / fma_peak, 1e-9);
  expect_sane_dense(d, 1e-2);
}

TEST_F(Cli, Bf16PathWidenCanBeForced) {
  const CliRun r = run_cli(kSmall + "--dtype bf16 --json --bf16-path widen");
  ASSERT_TRUE(r.exited());
  ASSERT_EQ(r.code(), 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("bf16_path").at("chosen"), "widen");
  EXPECT_EQ(j.at("bf16_path").at("mode"), "widen");
  EXPECT_TRUE(j.at("bf16_path").at("widen_ms").is_null());  // forced: nothing timed
  EXPECT_EQ(j.at("results")[0].at("operands"), "f32");
}

// Forcing the dot path works where the CPU has it (the table then gives both peak shares)
// and is bad input where it does not.
TEST_F(Cli, Bf16PathDotCanBeForcedWhereItExists) {
  const CliRun r = run_cli(kSmall + "--dtype bf16 --bf16-path dot");
  ASSERT_TRUE(r.exited());
  if (spattn::kernels::cpu_has_bf16_dot()) {
    ASSERT_EQ(r.code(), 0) << r.err;
    for (const char* s :
         {"operands: bf16-dot (--bf16-path dot)", "%peak is over the bf16 dot peak", "%fma"})
      EXPECT_NE(r.out.find(s), std::string::npos) << s << " missing from:\n" << r.out;
  } else {
    expect_bad_input(r, "--bf16-path");
  }
}

TEST_F(Cli, Bf16PathBadValueExits2) {
  for (const char* v : {"fast", "DOT", "\"\""})
    expect_bad_input(run_cli(kSmall + "--dtype bf16 --bf16-path " + v), "--bf16-path");
}

TEST_F(Cli, QkvFileBenchesInItsOwnShape) {
  const fs::path path = write_qkv(test_dir());
  const CliRun r =
      run_cli("bench --repeat 1 --no-causal --dtype bf16 --json --qkv " + path.string());
  ASSERT_TRUE(r.exited());
  ASSERT_EQ(r.code(), 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const auto& c = j.at("config");
  EXPECT_EQ(c.at("qkv"), path.string());
  EXPECT_EQ(c.at("seq"), 128);
  EXPECT_EQ(c.at("dim"), 64);
  EXPECT_EQ(c.at("dtype"), "bf16");
  EXPECT_EQ(c.at("causal"), false);
  expect_sane_dense(j.at("results")[0], 1e-2);
}

// A decode run (--q-len <= 16) of blasst reports skips per q head, as prefill does, in the
// table and in --json; recall is exact (no "upper bound" caveat), below 1 where tiles were
// skipped.
TEST_F(Cli, DecodeBenchReportsSkipsPerHead) {
  const std::string args =
      "bench --seq 2048 --heads 4 --kv-heads 2 --dim 64 --q-len 1 "
      "--repeat 1 --workload text --method blasst:lambda=0.1 ";
  const CliRun t = run_cli(args);
  ASSERT_TRUE(t.exited());
  ASSERT_EQ(t.code(), 0) << t.err;
  EXPECT_NE(t.out.find("blasst:lambda=0.1: head_skipped per head: h0 "), std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find(" h3 "), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("upper bound"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("no per-head"), std::string::npos) << t.out;

  const CliRun r = run_cli(args + "--json");
  ASSERT_TRUE(r.exited());
  ASSERT_EQ(r.code(), 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("results").size(), 2u);
  const auto& b = j.at("results")[1];
  EXPECT_EQ(b.at("method"), "blasst:lambda=0.1");
  const auto& per_head = b.at("skipped_per_head");
  ASSERT_EQ(per_head.size(), 4u);
  double mean = 0;
  for (const auto& f : per_head) {
    EXPECT_GE(f.get<double>(), 0.0);
    EXPECT_LE(f.get<double>(), 1.0);
    mean += f.get<double>() / 4;
  }
  EXPECT_GT(mean, 0.0) << "nothing skipped: the test shows nothing";
  EXPECT_LT(b.at("recall").get<double>(), 1.0);
  EXPECT_GT(b.at("recall").get<double>(), 0.9);
  EXPECT_FALSE(b.contains("recall_exact"));
  // The same series under the report's name, the threshold, and the kernel that ran.
  EXPECT_EQ(b.at("per_head").at("head_skipped"), per_head);
  EXPECT_DOUBLE_EQ(b.at("extras").at("lambda").get<double>(), 0.1);
  EXPECT_EQ(b.at("path"), "decode");
  EXPECT_EQ(j.at("results")[0].at("path"), "decode");  // dense decode is the baseline
  // Dense decode's KV bytes per second, in the table as a share of the measured bandwidth.
  EXPECT_GT(j.at("decode_read_gbps").get<double>(), 0.0);
  EXPECT_NE(t.out.find("dense decode reads K and V"), std::string::npos) << t.out;
}

// With neither --method nor --methods, bench compares dense with every method at its default
// spec, and each result carries what its report holds.
TEST_F(Cli, DefaultBenchRunsEveryMethod) {
  const CliRun r = run_cli(kSmall + "--json");
  ASSERT_TRUE(r.exited());
  ASSERT_EQ(r.code(), 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const auto& results = j.at("results");
  const std::vector<spattn::MethodInfo> catalog = spattn::method_catalog();
  ASSERT_EQ(results.size(), catalog.size());
  for (size_t i = 0; i < catalog.size(); ++i) {
    const auto& res = results[i];
    EXPECT_EQ(res.at("method"), catalog[i].default_spec);
    EXPECT_EQ(res.at("path"), "prefill");
    EXPECT_TRUE(res.at("extras").is_object());
    EXPECT_TRUE(res.at("per_head").is_object());
    EXPECT_EQ(res.contains("skipped_per_head"), catalog[i].name == "blasst");
  }
  EXPECT_EQ(j.at("config").at("methods").size(), catalog.size());
}

// Non-causal problems leave the causal-only methods out of the default set and say so.
TEST_F(Cli, DefaultBenchLeavesOutCausalOnlyMethodsWhenNotCausal) {
  const CliRun r = run_cli(kSmall + "--no-causal");
  ASSERT_TRUE(r.exited());
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("left out (causal attention only): a_shape"), std::string::npos) << r.out;
  for (const spattn::MethodInfo& m : spattn::method_catalog()) {
    const bool listed = r.out.find("\n" + m.default_spec + " ") != std::string::npos;
    EXPECT_EQ(listed, !m.causal_only) << m.name << "\n" << r.out;
  }
}

TEST_F(Cli, TableShowsMachineAndMethods) {
  const CliRun r = run_cli(kSmall);
  ASSERT_TRUE(r.exited());
  ASSERT_EQ(r.code(), 0) << r.err;
  for (const char* s : {"machine:", "f32 FMA", "sgemm", "GB/s", "operands: f32", "%peak", "GFLOP/s",
                        "speedup", "recall", "dense"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " missing from:\n" << r.out;
}

}  // namespace
