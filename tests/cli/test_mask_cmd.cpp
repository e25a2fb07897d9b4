// `spattn mask` end to end: a mask-building method yields a readable PNG of the expected size,
// and every kind of bad input ends in a message and exit code 2 with no file written.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_run.hpp"
#include "png_read.hpp"
#include "spattn/mask_figure.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/workload.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

using spattn::test::CliRun;
using spattn::test::slurp;

class MaskCmd : public ::testing::Test {
 protected:
  // `exec` so a crash shows as a signal, not as sh's exit code 128+N.
  CliRun run(const std::string& args) const {
    return spattn::test::run_spattn("mask " + args, dir_);
  }
  void expect_bad_input(const std::string& args, const std::string& mention) const {
    const CliRun r = run(args);
    ASSERT_TRUE(WIFEXITED(r.status)) << "killed by a signal; stderr: " << r.err;
    EXPECT_EQ(r.code(), 2) << r.err;
    EXPECT_NE(r.err.find("spattn: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(mention), std::string::npos)
        << "should mention '" << mention << "': " << r.err;
    EXPECT_FALSE(fs::exists(png())) << "a failed run left " << png();
  }
  fs::path png() const { return dir_ / "mask.png"; }
  const spattn::test::TempDir dir_{"spattn_maskcmd"};
};

// 512 tokens: 8 x 8 blocks of 64, drawn 64 px per block.
const std::string kSmall = "--workload text --seq 512 --heads 2 --dim 64 ";

TEST_F(MaskCmd, WritesAPngOfTheExpectedSize) {
  const CliRun r =
      run(kSmall + "--head 1 --method a_shape:sink=64,local=128 --out " + png().string());
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + png().string()), std::string::npos) << r.out;
  const spattn::test::PngPixels img = spattn::test::read_png_rgb(png().string());
  ASSERT_TRUE(img.ok) << img.error;
  // Whatever the method keeps, the figure of an 8 x 8 grid has one size.
  spattn::BlockMassGrid g;
  g.q_len = g.kv_len = 512;
  g.n_qb = g.n_kb = 8;
  g.mass.assign(64, 0.0f);
  const spattn::Image want =
      spattn::render_mask_figure(g, spattn::BlockRows(8), spattn::BlockRows(8), {});
  EXPECT_EQ(img.width, want.width);
  EXPECT_EQ(img.height, want.height);
  EXPECT_EQ(want.width, 3 * 512 + 2 * 2 + 2 * 16);
}

TEST_F(MaskCmd, TopkGivesTheOracleAFixedBudget) {
  const CliRun r =
      run(kSmall + "--method a_shape:sink=64,local=128 --topk 2 --out " + png().string());
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("oracle top-k (k=2)"), std::string::npos) << r.out;
  EXPECT_TRUE(spattn::test::read_png_rgb(png().string()).ok);
}

// The method panel `spattn mask` draws is the mask the method's report holds. The figure is
// drawn here twice, with the report's rows and with none; wherever the two differ (the panel
// and its density figures, nowhere else) the PNG must show the report's version.
TEST_F(MaskCmd, DrawsTheMaskTheReportHolds) {
  const std::string spec = "mean_pool:topk=2,sink=0,local=1";  // a mask that depends on q, k
  const CliRun r = run(kSmall + "--head 1 --topk 3 --method " + spec + " --out " + png().string());
  ASSERT_EQ(r.code(), 0) << r.err;
  const spattn::test::PngPixels img = spattn::test::read_png_rgb(png().string());
  ASSERT_TRUE(img.ok) << img.error;

  spattn::WorkloadConfig c;  // kSmall's problem
  c.seq = 512, c.heads = 2, c.dim = 64;
  const spattn::Workload w = spattn::make_workload(c);
  spattn::Tensor out(spattn::DType::f32, 2, 512, 64);
  const spattn::MethodReport rep = spattn::make_method(spec)->run(w.q, w.k, w.v, out, {});
  ASSERT_NE(rep.mask, nullptr);
  const spattn::BlockMassGrid g = spattn::block_mass(w.q, w.k, w.v, 1, 64, 64, {});
  spattn::BlockRows rows(size_t(g.n_qb));
  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    const auto kept = rep.mask->row(1, qb);
    rows[size_t(qb)].assign(kept.begin(), kept.end());
  }
  const spattn::BlockRows oracle =
      spattn::oracle_topk_rows(g, std::vector<int64_t>(size_t(g.n_qb), 3));
  const spattn::MaskFigureText text{"title", "method", "oracle"};
  const spattn::Image with = spattn::render_mask_figure(g, rows, oracle, text);
  const spattn::Image without =
      spattn::render_mask_figure(g, spattn::BlockRows(size_t(g.n_qb)), oracle, text);
  ASSERT_EQ(img.width, with.width);
  ASSERT_EQ(img.height, with.height);
  int64_t differing = 0, wrong = 0;
  for (size_t i = 0; i < with.pixels.size(); ++i) {
    if (with.pixels[i] == without.pixels[i]) continue;
    ++differing;
    wrong += img.rgb[i] != with.pixels[i];
  }
  EXPECT_GT(differing, 1000) << "the report's mask should change the method panel";
  EXPECT_EQ(wrong, 0) << "of " << differing << " bytes the mask decides";
}

TEST_F(MaskCmd, DenseHasNoMaskExits2) {
  expect_bad_input(kSmall + "--method dense --out " + png().string(), "'dense'");
}

TEST_F(MaskCmd, UnknownMethodExits2) {
  expect_bad_input(kSmall + "--method no_such_method --out " + png().string(), "no_such_method");
}

TEST_F(MaskCmd, BadHeadExits2) {
  expect_bad_input(kSmall + "--head 2 --method dense --out " + png().string(), "--head");
}

TEST_F(MaskCmd, MissingOutputDirectoryExits2) {
  const fs::path out = dir_ / "missing" / "mask.png";
  expect_bad_input(kSmall + "--method dense --out " + out.string(), (dir_ / "missing").string());
}

TEST_F(MaskCmd, TopkAndBudgetFromMethodExcludeEachOther) {
  const CliRun r =
      run(kSmall + "--method dense --topk 2 --budget-from-method --out " + png().string());
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_NE(r.code(), 0);
  EXPECT_NE(r.code(), 2);  // a CLI11 parse error, before any spattn work
  EXPECT_FALSE(fs::exists(png()));
}

}  // namespace
