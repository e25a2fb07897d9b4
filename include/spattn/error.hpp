// spattn::Error: the one exception type for bad user input and failed operations.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace spattn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace spattn

// SPATTN_CHECK(cond, "q.dim", " must equal k.dim (", a, " vs ", b, ")")
#define SPATTN_CHECK(cond, ...)                       \
  do {                                                \
    if (!(cond)) ::spattn::detail::fail(__VA_ARGS__); \
  } while (0)
