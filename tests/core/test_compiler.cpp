/* Guards against the GCC 12.2 AVX-512 miscompile of vector constants with zero upper lanes
 * (see the top-level CMakeLists.txt): these values came out broadcast, e.g. {1, 1, 1, 1}.
 * Expected values are compared one scalar at a time, so they cannot be miscompiled alike. */
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

template <class T>
__attribute__((noinline)) std::vector<double> widen(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

static void check_prefix(const std::vector<double>& v, size_t ones, double value) {
  for (size_t i = 0; i < v.size(); ++i) {
    CAPTURE(i);
    CHECK(v[i] == (i < ones ? value : 0.0));
  }
}

TEST_CASE("vector constants with trailing zeros are compiled correctly") {
  check_prefix(widen(std::vector<double>{1, 1, 0, 0}), 2, 1.0);
  check_prefix(widen(std::vector<double>{3, 3, 3, 0}), 3, 3.0);
  check_prefix(widen(std::vector<int64_t>{1, 1, 0, 0}), 2, 1.0);
  check_prefix(widen(std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0}), 4, 1.0);
  double a[4] = {5, 5, 0, 0};
  check_prefix(widen(std::vector<double>(a, a + 4)), 2, 5.0);
}
