/*
 * std::source_location for clang 14 with libstdc++ 12 (Debian 12's clang and its default
 * standard library): libstdc++ declares the class only when the compiler has
 * __builtin_source_location, which clang gained in version 15, so <source_location> is empty
 * under clang 14. The fuzz build (the only clang build) force-includes this header
 * (-include, docs/fuzzing.md); it supplies the same interface from the builtins clang 14 does
 * have, and does nothing for any other compiler or library.
 */
#pragma once

#include <cstdint>  // first: it defines __GLIBCXX__ when the library is libstdc++

#if defined(__clang__) && __clang_major__ < 15 && defined(__GLIBCXX__) && \
    !__has_builtin(__builtin_source_location)

namespace std {

struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           uint_least32_t line = __builtin_LINE()) noexcept {
    source_location where;
    where.file_ = file;
    where.function_ = function;
    where.line_ = line;
    return where;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr uint_least32_t line() const noexcept { return line_; }
  constexpr uint_least32_t column() const noexcept { return 0; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  uint_least32_t line_ = 0;
};

}  // namespace std
#endif
