/*
 * Helpers shared by the op tests: PyTorch's assert_close tolerances per dtype, a check of a
 * tensor's values against float64 expectations, tensors from float64 values, deterministic
 * random values, and central finite differences for checking backward functions.
 */
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace loom::test {

// A fresh directory under the system's temp dir, removed (with its contents) on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("loom_test_" + name + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};


inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// actual is close to expected when |actual - expected| <= atol + rtol * |expected|.
struct Tol {
  double rtol, atol;
};

// PyTorch's assert_close defaults; integers and bool are exact.
inline Tol tol_for(DType t) {
  switch (t) {
    case kFloat32:
      return {1.3e-6, 1e-5};
    case kFloat64:
      return {1e-7, 1e-7};
    case kFloat16:
      return {1e-3, 1e-5};
    case kBFloat16:
      return {1.6e-2, 1e-5};
    default:
      return {0, 0};
  }
}

// Empty when every value is close to its expectation (a NaN matches only a NaN, an infinity
// only itself), else how many differ and the first that does.
inline std::string mismatch(const std::vector<double>& actual, const std::vector<double>& expected, Tol tol) {
  if (actual.size() != expected.size())
    return "size " + std::to_string(actual.size()) + " != " + std::to_string(expected.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    bool ok;
    if (std::isnan(e))
      ok = std::isnan(a);
    else if (std::isinf(e))
      ok = a == e;
    else
      ok = std::abs(a - e) <= tol.atol + tol.rtol * std::abs(e);
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os.precision(10);
  os << bad << " of " << actual.size() << " elements differ; first at " << first << ": got " << actual[first]
     << ", expected " << expected[first];
  if (actual.size() <= 16) {
    os << " (got";
    for (double v : actual) os << ' ' << v;
    os << ')';
  }
  return os.str();
}

// Checks actual's values (row-major, as double) against `expected`.
inline void check_close(const Tensor& actual, const std::vector<double>& expected, Tol tol) {
  REQUIRE(actual.numel() == static_cast<int64_t>(expected.size()));
  const std::string bad = mismatch(actual.to_vector<double>(), expected, tol);
  CHECK_MESSAGE(bad.empty(), bad);
}

inline void check_close(const Tensor& actual, const std::vector<double>& expected) {
  check_close(actual, expected, tol_for(actual.dtype()));
}

inline std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

// A tensor of `dtype` holding `v` (rounded to the dtype), shaped `shape`.
inline Tensor make(const std::vector<double>& v, IntArrayRef shape, DType dtype = kFloat64) {
  return tensor<double>(v, shape).to(dtype);
}

// The same, 1-D.
inline Tensor make(const std::vector<double>& v, DType dtype) {
  return make(v, {}, dtype);
}

// The message of the loom::Error that f throws (fails the test when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected a loom::Error");
  return "";
}

// The message of the loom::Error that f throws, or "" when it throws none (for code that may
// or may not fail, e.g. loading after a random kill).
template <class F>
std::string error_if_any(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A deterministic float32 pattern that a few lines of Python reproduce exactly, for comparing
// with values computed by PyTorch: sin(seed + 0.61 i) * scale, rounded to float32.
inline Tensor pat(IntArrayRef shape, double seed, double scale = 0.5) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(seed + 0.61 * static_cast<double>(i)) * scale;
  return make(v, shape, kFloat32);
}

// n deterministic values drawn from N(shift, scale^2).
inline std::vector<double> random_values(int64_t n, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator gen(seed);
  std::vector<double> v = randn({n}, kFloat64, &gen).to_vector<double>();
  for (double& x : v) x = x * scale + shift;
  return v;
}

// Central differences of f at x, one coordinate at a time.
inline std::vector<double> numeric_grad(const std::function<double(const std::vector<double>&)>& f,
                                        std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// For comparing a backward computed in float64 with numeric_grad.
inline constexpr Tol kFdTol{1e-5, 1e-7};

// <t, w>: a scalar function of a tensor, whose gradient with respect to t is w.
inline double dot(const Tensor& t, const std::vector<double>& w) {
  std::vector<double> v = values(t);
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

}  // namespace loom::test
