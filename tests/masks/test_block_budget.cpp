// The mass budgets' shared rules (masks/block_budget.hpp): topp per row against its plain twin,
// and the case it is for, a query block's row outvoted by the rest of its block.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "masks/block_budget.hpp"
#include "row_mass_twin.hpp"

namespace spattn {
namespace {

std::set<int64_t> kept_of(const std::vector<uint8_t>& keep) {
  std::set<int64_t> s;
  for (size_t i = 0; i < keep.size(); ++i)
    if (keep[i]) s.insert(int64_t(i));
  return s;
}

// Runs keep_row_mass on rows (each row's masses by block) with `forced` kept first.
std::set<int64_t> row_mass(const std::vector<std::vector<double>>& rows, int64_t limit,
                           const std::set<int64_t>& forced, double p) {
  std::vector<double> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  std::vector<uint8_t> keep(size_t(limit), 0);
  for (int64_t kb : forced) keep[size_t(kb)] = 1;
  masks::RowMassScratch share;
  masks::keep_row_mass({flat.data(), int64_t(rows.size()), limit}, limit, p, keep, share);
  return kept_of(keep);
}

TEST(KeepRowMass, EqualsThePlainTwinAndEveryRowReachesP) {
  std::mt19937_64 rng(61);
  int64_t cases = 0;
  for (int64_t n_rows : {1, 2, 7, 32})
    for (int64_t limit : {1, 3, 16, 70})
      for (double p : {0.3, 0.5, 0.8, 0.9, 0.99, 1.0})
        for (int rep = 0; rep < 3; ++rep) {
          std::exponential_distribution<double> mass(1.0);
          std::uniform_real_distribution<double> u(0, 1);
          std::vector<std::vector<double>> rows(static_cast<size_t>(n_rows),
                                                std::vector<double>(static_cast<size_t>(limit)));
          for (auto& r : rows)
            for (auto& x : r) {
              x = u(rng) < 0.3 ? 0.0 : std::pow(mass(rng), 4);  // zeros, and peaked rows
            }
          if (n_rows > 2) std::fill(rows[1].begin(), rows[1].end(), 0.0);  // a row of no mass
          std::set<int64_t> forced;
          for (int64_t kb = 0; kb < limit; ++kb)
            if (u(rng) < 0.1) forced.insert(kb);
          const std::string what = std::to_string(n_rows) + " rows, " + std::to_string(limit) +
                                   " blocks, p " + std::to_string(p) + " rep " +
                                   std::to_string(rep);
          const std::set<int64_t> got = row_mass(rows, limit, forced, p);
          EXPECT_EQ(got, test::row_mass_twin(rows, limit, forced, p)) << what;
          EXPECT_TRUE(test::every_row_reaches(rows, limit, got, p, 1e-12)) << what;
          for (int64_t kb : forced) EXPECT_TRUE(got.count(kb)) << what << ": forced " << kb;
          ++cases;
        }
  EXPECT_EQ(cases, 4 * 4 * 6 * 3);
}

// A query block's first row reads the block before its diagonal; the other rows read the
// diagonal. The summed topp keeps the diagonal alone and leaves that row 5% of its mass; per
// row, the row gets its block too, and nothing else is kept.
TEST(KeepRowMass, ARowOutvotedByItsBlockKeepsItsOwnMass) {
  const int64_t limit = 3;  // block 0 the sink, 1 the block before, 2 the diagonal
  std::vector<std::vector<double>> rows(64, std::vector<double>{0.05, 0.0, 0.95});
  rows[0] = {0.0, 0.95, 0.05};
  std::vector<double> sum(limit, 0.0);
  for (const auto& r : rows)
    for (int64_t kb = 0; kb < limit; ++kb) sum[size_t(kb)] += r[size_t(kb)];
  std::vector<uint8_t> keep(limit, 0);
  std::vector<int64_t> order;
  masks::keep_top_mass(sum.data(), limit, 0.9, keep, order);
  EXPECT_EQ(kept_of(keep), (std::set<int64_t>{2}));
  EXPECT_EQ(row_mass(rows, limit, {}, 0.9), (std::set<int64_t>{1, 2}));
  // p = 1 keeps every block some row has mass in, and no block of no mass
  EXPECT_EQ(row_mass(rows, limit, {}, 1.0), (std::set<int64_t>{0, 1, 2}));
  rows[0] = {0.0, 0.0, 1.0};
  EXPECT_EQ(row_mass(rows, limit, {}, 1.0), (std::set<int64_t>{0, 2}));
}

}  // namespace
}  // namespace spattn
