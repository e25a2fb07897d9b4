// Budget fractions: methods/fraction.hpp.
#include "methods/fraction.hpp"

#include <cmath>

#include "spattn/error.hpp"

namespace spattn {

void check_fraction(std::string_view method, std::string_view key, double v, Fraction f) {
  const bool below_one = f == Fraction::below_one;
  SPATTN_CHECK(v > 0 && (below_one ? v < 1 : v <= 1), method, ": ", key, "=", v,
               below_one ? " outside (0, 1)" : " outside (0, 1]");
}

double get_fraction(ParamReader& r, std::string_view method, const std::string& key, double def,
                    Fraction f) {
  const double v = r.get_double(key, def, -HUGE_VAL, HUGE_VAL);
  if (r.has(key)) check_fraction(method, key, v, f);
  return v;
}

bool read_per_row(ParamReader& r, std::string_view method, bool other_budget, bool row_default) {
  const std::string per = r.get_string("per", row_default ? "row" : "block");
  SPATTN_CHECK(per == "block" || per == "row", method, ": per='", per, "' must be block or row");
  SPATTN_CHECK(per == "block" || !other_budget, method,
               ": per=row goes with topp (a mass each row keeps), not with topk or min_share");
  return per == "row";
}

}  // namespace spattn
