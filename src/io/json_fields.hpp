// Field readers for the JSON files spattn loads (calibrations, MMInference plans). Those files
// decide thresholds and patterns, so they are untrusted input: each reader throws Error
// "<origin>: field 'name' ..." naming the field on a missing or bad value.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "spattn/error.hpp"

namespace spattn::detail {

class JsonFields {
 public:
  using json = nlohmann::json;
  // origin is kept by value: callers pass temporaries such as origin + " curve[]".
  JsonFields(const json& j, std::string origin) : j_(j), origin_(std::move(origin)) {}

  const json& get(const char* name) const {
    auto it = j_.find(name);
    if (it == j_.end()) fail(origin_, ": missing field '", name, "'");
    return *it;
  }
  double number(const char* name, double lo, double hi, bool lo_open = false) const {
    const json& v = get(name);
    if (!v.is_number()) fail(origin_, ": field '", name, "' must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
      fail(origin_, ": field '", name, "' must be a finite number in ", lo_open ? "(" : "[", lo,
           ", ", hi, "], got ", x);
    return x;
  }
  // Absent: def; present: any finite number.
  double number_or(const char* name, double def) const {
    auto it = j_.find(name);
    if (it == j_.end()) return def;
    if (!it->is_number() || !std::isfinite(it->get<double>()))
      fail(origin_, ": field '", name, "' must be a finite number");
    return it->get<double>();
  }
  int64_t integer(const char* name, int64_t lo,
                  int64_t hi = std::numeric_limits<int64_t>::max()) const {
    const json& v = get(name);
    if (!v.is_number_integer()) fail(origin_, ": field '", name, "' must be an integer");
    const int64_t x = v.get<int64_t>();
    if (hi == std::numeric_limits<int64_t>::max()) {
      if (x < lo) fail(origin_, ": field '", name, "' must be >= ", lo, ", got ", x);
    } else if (x < lo || x > hi) {
      fail(origin_, ": field '", name, "' must be in [", lo, ", ", hi, "], got ", x);
    }
    return x;
  }
  std::string string(const char* name) const {
    const json& v = get(name);
    if (!v.is_string()) fail(origin_, ": field '", name, "' must be a string");
    return v.get<std::string>();
  }
  bool boolean(const char* name) const {
    const json& v = get(name);
    if (!v.is_boolean()) fail(origin_, ": field '", name, "' must be true or false");
    return v.get<bool>();
  }
  // Absent: def; present: must be a string / true or false.
  std::string string_or(const char* name, const std::string& def) const {
    auto it = j_.find(name);
    if (it == j_.end()) return def;
    if (!it->is_string()) fail(origin_, ": field '", name, "' must be a string");
    return it->get<std::string>();
  }
  bool boolean_or(const char* name, bool def) const {
    auto it = j_.find(name);
    if (it == j_.end()) return def;
    if (!it->is_boolean()) fail(origin_, ": field '", name, "' must be true or false");
    return it->get<bool>();
  }
  const std::string& origin() const { return origin_; }

 private:
  const json& j_;
  std::string origin_;
};

}  // namespace spattn::detail
