// `spattn search` and `mminference:plan=` end to end: a searched plan runs in bench and mask;
// bad plans (unknown boundaries included), a plan for another head count, a bad boundary=
// switch and a bad grid stride exit with status 2 and name the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cli_run.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

spattn::test::TempDir dir_for(const std::string& name) {
  return spattn::test::TempDir("spattn_search_" + name);
}

void expect_exit2(const spattn::test::CliRun& r, const std::string& mention) {
  ASSERT_TRUE(r.exited()) << r.err;
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos) << r.err;
}

const std::string kVideo = "--workload video --seq 1024 --heads 2 --dim 32 --frame-tokens 64 ";

TEST(SearchCmd, PlanRunsInBenchAndMask) {
  const spattn::test::TempDir d = dir_for("runs");
  const std::string plan = (d / "plan.json").string();
  auto r = spattn::test::run_spattn("search " + kVideo + "--quiet --out " + plan, d);
  ASSERT_EQ(r.code(), 0) << r.err;
  ASSERT_TRUE(fs::exists(plan));
  r = spattn::test::run_spattn(
      "bench " + kVideo + "--repeat 1 --method mminference:plan=" + plan + " --method grid", d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("mminference"), std::string::npos) << r.out;
  r = spattn::test::run_spattn(
      "mask " + kVideo + "--method mminference:plan=" + plan + " --out " + (d / "m.png").string(),
      d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_TRUE(fs::exists(d / "m.png"));
  // Another head count than the plan's.
  expect_exit2(spattn::test::run_spattn("bench --workload video --seq 1024 --heads 4 --dim 32 "
                                        "--repeat 1 --method mminference:plan=" +
                                            plan,
                                        d),
               "the plan has 2 heads");
}

TEST(SearchCmd, BadInputExits2) {
  const spattn::test::TempDir d = dir_for("bad");
  const std::string bad = (d / "bad.json").string();
  std::ofstream(bad) << "{\"format\": \"spattn.mminference_plan\", \"version\": 1, \"heads\": 2}";
  const std::string b = "bench " + kVideo + "--repeat 1 --method ";
  expect_exit2(spattn::test::run_spattn(b + "mminference:plan=" + bad, d),
               "missing field 'frame_stride'");
  expect_exit2(spattn::test::run_spattn(b + "mminference:plan=" + (d / "none.json").string(), d),
               "cannot open plan file");
  expect_exit2(spattn::test::run_spattn(b + "mminference", d), "plan=FILE");
  expect_exit2(spattn::test::run_spattn(b + "grid:stride=0", d), "stride");
  expect_exit2(spattn::test::run_spattn(b + "grid:stride=4096", d), "above the length");
  expect_exit2(spattn::test::run_spattn(b + "grid:stride=64,phase=64", d), "phase");
  expect_exit2(spattn::test::run_spattn("search " + kVideo, d), "--out");
  // An unknown boundary in a plan, and a bad boundary= switch.
  const std::string plan = (d / "plan.json").string();
  ASSERT_EQ(spattn::test::run_spattn("search " + kVideo + "--quiet --out " + plan, d).code(), 0);
  std::ifstream in(plan);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"boundary\": \"none\"");
  ASSERT_NE(at, std::string::npos);
  const std::string odd = (d / "odd.json").string();
  std::ofstream(odd) << text.replace(at, 18, "\"boundary\": \"diagonal\"");
  expect_exit2(spattn::test::run_spattn(b + "mminference:plan=" + odd, d),
               "unknown boundary 'diagonal'");
  expect_exit2(spattn::test::run_spattn(b + "mminference:plan=" + plan + ",boundary=maybe", d),
               "boundary must be plan or off");
}

}  // namespace
