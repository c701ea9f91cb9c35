/*
 * CUDA reductions against the CPU: sum, prod, amax, amin, var and max/min along a dim, for
 * every dtype the CPU kernels take, over one dim, several (non-adjacent too) and all dims,
 * keepdim on and off, on contiguous, transposed, step-sliced and expanded inputs. The shapes
 * reach both kernel shapes of ops/cuda/reduction.cu: a thread per output (short reductions,
 * many columns) and a block per output, with a second pass for long rows.
 */
#include <array>
#include <limits>
#include <string>
#include <vector>

#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::CudaCase;
using test::pat;

LOOM_CUDA_COVERS(Op::sum, Op::prod, Op::amax, Op::amin, Op::var, Op::max_dim, Op::min_dim);

const std::vector<DType> kAllDtypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8,
                                       kUInt8,   kInt32,   kInt64,   kBool};

// Values of dtype dt with many ties for the integer types (pat truncated: -2..2).
Tensor values(IntArrayRef shape, DType dt, double seed, double scale = 1.0) {
  if (dt == kBool) return gt(pat(shape, seed), 0.1);
  if (is_floating(dt)) return pat(shape, seed, scale).to(dt);
  return pat(shape, seed, 2.9).to(dt);
}

// A view of a base tensor, applied inside the compared function so that the CUDA run sees the
// same strides as the CPU run. Each layout turns its base into an [a, b, c] tensor.
struct Layout {
  std::string name;
  std::vector<int64_t> base;  // for [a, b, c]
  std::function<Tensor(const Tensor&)> view;
};

std::vector<Layout> layouts(int64_t a, int64_t b, int64_t c) {
  return {
      {"contiguous", {a, b, c}, [](const Tensor& x) { return x; }},
      {"transposed", {c, b, a}, [](const Tensor& x) { return x.permute({2, 1, 0}); }},
      {"step-sliced", {2 * a, b, 2 * c},
       [a, c](const Tensor& x) { return x.slice(0, 0, 2 * a, 2).slice(2, 1, 2 * c, 2); }},
      {"expanded", {a, 1, c}, [a, b, c](const Tensor& x) { return x.expand({a, b, c}); }},
  };
}

// The larger shape (block-per-output kernels: reductions over more than 32 elements) runs for
// a few dtypes and layouts only: the emulator runs each CUDA thread as an OS thread.
bool large_case(DType dt, const Layout& l, bool keepdim) {
  return !keepdim && (l.name == "contiguous" || l.name == "transposed") &&
         (dt == kFloat32 || dt == kFloat16 || dt == kInt32 || dt == kBool);
}

const std::vector<std::vector<int64_t>> kDimSets = {{0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {2, 0, 1}};

// Runs op(view(x), dims, keepdim) on CPU and CUDA for every dtype, shape, layout, dim set and
// keepdim.
void sweep(const std::vector<DType>& dtypes,
           const std::function<std::vector<Tensor>(const Tensor&, IntArrayRef, bool)>& op, CudaCase c = {},
           double scale = 1.0) {
  for (DType dt : dtypes)
    for (auto [a, b, cc] : {std::array<int64_t, 3>{4, 5, 6}, std::array<int64_t, 3>{3, 40, 35}})
      for (const Layout& l : layouts(a, b, cc))
        for (const auto& dims : kDimSets)
          for (bool keepdim : {false, true}) {
            if (a == 3 && !large_case(dt, l, keepdim)) continue;
            CAPTURE(dt);
            CAPTURE(l.name);
            CAPTURE(IntArrayRef(dims));
            CAPTURE(keepdim);
            check_cuda_matches_cpu(
                [&](const std::vector<Tensor>& in) { return op(l.view(in[0]), dims, keepdim); },
                {values(l.base, dt, 0.3 + a, scale)}, c);
          }
}

// The sweeps compare forward results only, to keep the emulated run short; the gradients have
// their own case ("reduction: gradients ...").
CudaCase forward_only() {
  CudaCase c;
  c.backward = false;
  return c;
}

TEST_CASE("reduction: sum over dims, layouts and every dtype") {
  LOOM_REQUIRE_GPU();
  sweep(kAllDtypes, [](const Tensor& x, IntArrayRef d, bool k) { return std::vector<Tensor>{sum(x, d, k)}; },
        forward_only());
}

TEST_CASE("reduction: sum into a wider dtype, and over everything") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    CAPTURE(dt);
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return sum(in[0], {1}, false, kFloat64); },
                           {values({6, 50}, dt, 1.0)}, forward_only());
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return sum(in[0], {0, 1}, true, kFloat32); },
                           {values({6, 50}, dt, 2.0)}, forward_only());
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return sum(in[0]); }, {values({7, 9}, dt, 3.0)},
                           forward_only());
  }
  // A 0-dim input and an empty reduction (the sum of nothing is 0, the product 1).
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return sum(in[0]); }, {scalar_tensor(2.5)},
                         forward_only());
  check_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0], {1}), prod(in[0], {1})}; },
      {zeros({3, 0})}, forward_only());
}

TEST_CASE("reduction: prod over dims, layouts and every dtype") {
  LOOM_REQUIRE_GPU();
  sweep(kAllDtypes, [](const Tensor& x, IntArrayRef d, bool k) { return std::vector<Tensor>{prod(x, d, k)}; },
        forward_only(), 1.6);
}

TEST_CASE("reduction: amax and amin over dims, layouts and every dtype") {
  LOOM_REQUIRE_GPU();
  sweep(kAllDtypes,
        [](const Tensor& x, IntArrayRef d, bool k) { return std::vector<Tensor>{amax(x, d, k), amin(x, d, k)}; },
        forward_only());
}

TEST_CASE("reduction: var with corrections over dims and layouts") {
  LOOM_REQUIRE_GPU();
  sweep(test::cuda_float_dtypes(),
        [](const Tensor& x, IntArrayRef d, bool k) { return std::vector<Tensor>{var(x, d, 1, k)}; },
        forward_only());
  for (DType dt : test::cuda_float_dtypes())
    for (int64_t correction : {0, 2, -1}) {
      CAPTURE(dt);
      CAPTURE(correction);
      check_cuda_matches_cpu(
          [correction](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{var(in[0], {1}, correction), var(in[0].t(), {1}, correction, true)};
          },
          {values({6, 50}, dt, 4.0)}, forward_only());
    }
  // Fewer elements than the correction (inf), one element (NaN), an empty reduction (NaN).
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return var(in[0], {1}, 3); }, {values({4, 2}, kFloat32, 1)},
                         forward_only());
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return var(in[0], {1}); }, {values({4, 1}, kFloat32, 1)},
                         forward_only());
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return var(in[0], {1}); }, {zeros({4, 0})},
                         forward_only());
}

TEST_CASE("reduction: max and min along a dim with indices, every dtype") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes)
    for (auto [a, b, c] : {std::array<int64_t, 3>{4, 5, 6}, std::array<int64_t, 3>{3, 40, 35}})
      for (const Layout& l : layouts(a, b, c))
        for (int64_t dim : {0, 1, -1})
          for (bool keepdim : {false, true}) {
            if ((a == 3 && !large_case(dt, l, keepdim)) || (keepdim && dim != 1)) continue;
            CAPTURE(dt);
            CAPTURE(l.name);
            CAPTURE(dim);
            CAPTURE(keepdim);
            check_cuda_matches_cpu(
                [&](const std::vector<Tensor>& in) {
                  auto [vmax, imax] = max(l.view(in[0]), dim, keepdim);
                  auto [vmin, imin] = min(l.view(in[0]), dim, keepdim);
                  return std::vector<Tensor>{vmax, imax, vmin, imin};
                },
                {values(l.base, dt, 0.7 + a)}, forward_only());
          }
  // A 0-dim input: the value itself, index 0.
  check_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) {
        auto [v, i] = max(in[0], 0);
        return std::vector<Tensor>{v, i};
      },
      {scalar_tensor(1.5)}, forward_only());
}

TEST_CASE("reduction: gradients of every reduction match the CPU's") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{1}, {0, 2}, {0, 1, 2}}) {
      CAPTURE(dt);
      CAPTURE(IntArrayRef(dims));
      // A permuted input: the gradient is written back through its strides.
      check_cuda_matches_cpu(
          [&](const std::vector<Tensor>& in) {
            Tensor x = in[0].permute({2, 0, 1});
            return std::vector<Tensor>{sum(x, dims, false), prod(x, dims, true), amax(x, dims, false),
                                       amin(x, dims, true), var(x, dims)};
          },
          {values({4, 6, 5}, dt, 0.45)});
    }
    for (int64_t dim : {0, 2}) {
      CAPTURE(dt);
      CAPTURE(dim);
      check_cuda_matches_cpu(
          [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{std::get<0>(max(in[0], dim, false)), std::get<0>(min(in[0], dim, true))};
          },
          {values({6, 5, 4}, dt, 0.55)});
    }
  }
}

TEST_CASE("reduction: NaN wins in amax, amin, max and min; ties take the first index") {
  LOOM_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Rows: a NaN in the middle, two NaNs, ties of the extreme, and a short row of ties; long
  // enough (40) for the block-per-output kernel along dim 1 and many columns along dim 0.
  std::vector<double> v(4 * 40);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7) % 5);
  v[17] = nan;
  v[40 + 3] = nan;
  v[40 + 30] = nan;
  for (DType dt : test::cuda_float_dtypes()) {
    CAPTURE(dt);
    Tensor x = test::make(v, {4, 40}, dt);
    for (int64_t dim : {0, 1}) {
      CAPTURE(dim);
      check_cuda_matches_cpu(
          [dim](const std::vector<Tensor>& in) {
            auto [vmax, imax] = max(in[0], dim);
            auto [vmin, imin] = min(in[0], dim);
            return std::vector<Tensor>{vmax, imax, vmin, imin, amax(in[0], {dim}), amin(in[0], {dim})};
          },
          {x}, forward_only());
      check_cuda_matches_cpu(
          [dim](const std::vector<Tensor>& in) {
            auto [vmax, imax] = max(in[0].t(), dim);
            return std::vector<Tensor>{vmax, imax, amax(in[0].t(), {dim})};
          },
          {x}, forward_only());
    }
  }
}

TEST_CASE("reduction: long rows and long columns take the split second pass, short columns a thread each") {
  LOOM_REQUIRE_GPU();
  // 1 x 20000 over dim 1: five blocks of partials, then the second kernel. float32 sums in
  // float on the GPU and in double on the CPU.
  CudaCase long_row = forward_only();
  long_row.tol = test::Tol{1e-4, 1e-4};
  for (DType dt : test::cuda_float_dtypes()) {
    CAPTURE(dt);
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          auto [vmax, imax] = max(in[0], 1);
          auto [vmin, imin] = min(in[0], 1);
          return std::vector<Tensor>{sum(in[0], {1}), amax(in[0], {1}), var(in[0], {1}), vmax, imax, vmin, imin};
        },
        {values({1, 20000}, dt, 0.5)}, dt == kFloat32 ? long_row : forward_only());
  }
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0]), prod(in[0])}; },
                         {values({2, 10000}, kInt64, 0.5)}, forward_only());
  // 600 x 130 over dim 0: long columns, cut into three pieces per output.
  for (DType dt : {kFloat32, kBFloat16, kInt8}) {
    CAPTURE(dt);
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          auto [vmin, imin] = min(in[0], 0);
          return std::vector<Tensor>{sum(in[0], {0}), amax(in[0], {0}), vmin, imin};
        },
        {values({600, 130}, dt, 0.75)}, dt == kFloat32 ? long_row : forward_only());
  }
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return var(in[0], {0}); },
                         {values({600, 130}, kFloat64, 0.8)}, forward_only());
  // Column sums of [64, 128] (the bias gradient) and of a transposed input.
  for (DType dt : {kFloat32, kFloat16, kInt32}) {
    CAPTURE(dt);
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{sum(in[0], {0}), var(in[0].to(kFloat64), {0}), sum(in[0].t(), {1})};
        },
        {values({64, 128}, dt, 0.25)}, forward_only());
  }
}

TEST_CASE("reduction: bad inputs throw on CUDA") {
  LOOM_REQUIRE_GPU();
  Tensor empty_rows = zeros({3, 0}).to(Device::cuda());
  CHECK_THROWS_WITH_AS(amax(empty_rows, {1}), doctest::Contains("expected a non-empty reduction"), Error);
  CHECK_THROWS_WITH_AS(max(empty_rows, 1), doctest::Contains("expected a non-empty reduction"), Error);
  CHECK_THROWS_WITH_AS(var(zeros({3, 4}, kInt32).to(Device::cuda()), {1}), doctest::Contains("var: expected a floating-point tensor"), Error);
}

}  // namespace
}  // namespace loom
