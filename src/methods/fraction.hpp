// A budget's parameters read one way: the range check of its fraction, one place for every
// method that takes one (momo, mean_pool, xattention, flexprefill, quest, oracle_topk) and for
// the mask builders that take them as numbers (masks/mean_pool.cpp, masks/oracle_topk.cpp), and
// topp's `per` (block or row), so that the same value is refused in the same words everywhere.
#pragma once
#include <string>
#include <string_view>

#include "spattn/method.hpp"

namespace spattn {

// A share of a mass to keep (topp, and the same budget under its papers' names, tau and
// gamma) lies in (0, 1], where 1 keeps everything; a threshold share (min_share) in (0, 1),
// where 1 would keep only a block holding all of its query block's mass.
enum class Fraction { up_to_one, below_one };

// Throws Error "<method>: <key>=<v> outside (0, 1]" (or "(0, 1)") unless v is in f's range.
void check_fraction(std::string_view method, std::string_view key, double v, Fraction f);

// The spec's value of key (a finite number, as ParamReader::get_double reads it), checked by
// check_fraction; def, unchecked, when the spec does not give the key.
double get_fraction(ParamReader& r, std::string_view method, const std::string& key, double def,
                    Fraction f);

// `per=block` (the query block's summed mass reaches topp) or `per=row` (every row of the
// estimate does: masks::keep_row_mass); `row` the default where `row_default` (quest's topp).
// Throws Error for another value, or for per=row beside a budget other than topp
// (`other_budget`: topk or min_share given).
bool read_per_row(ParamReader& r, std::string_view method, bool other_budget,
                  bool row_default = false);

}  // namespace spattn
