/*
 * loom::Error and the checks that throw it.
 *
 * Every user mistake and environment failure becomes a loom::Error whose message says
 * where (file:line), what was expected and what was found. Nothing that input can reach
 * aborts the process: tools catch loom::Error at main, print it and exit non-zero.
 */
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

}  // namespace detail
}  // namespace loom

// LOOM_CHECK(cond, parts...): throws loom::Error("file:line: parts...") when cond is false.
// The parts are streamed with operator<<, so shapes, dtypes and devices print as themselves.
#define LOOM_CHECK(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::loom::detail::throw_error(__FILE__, __LINE__, ::loom::detail::concat(__VA_ARGS__)); \
  } while (0)

#define LOOM_FAIL(...) ::loom::detail::throw_error(__FILE__, __LINE__, ::loom::detail::concat(__VA_ARGS__))
