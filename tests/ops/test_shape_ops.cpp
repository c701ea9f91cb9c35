/*
 * Joining, indexing and rearranging ops: cat, stack, index_select, gather, scatter_add,
 * index_add, tril/triu, repeat, flip, pad and pad_backward. Values are checked against
 * hand-computed cases, against PyTorch 1.13 outputs pasted as literals, and against float64
 * reference loops written here; inputs include transposed, sliced and expanded views,
 * several dtypes, sizes large enough to take the parallel paths, and bad inputs that must throw.
 */
#include <doctest/doctest.h>

#include <functional>
#include <vector>

#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

using Index = std::vector<int64_t>;

// Calls f(idx) for every multi-index of `sizes` in row-major order.
void for_each_index(IntArrayRef sizes, const std::function<void(const Index&)>& f) {
  int64_t n = shape_numel(sizes);
  Index idx(sizes.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    f(idx);
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
}

// Row-major position of idx in a tensor of shape `sizes`.
int64_t flat(IntArrayRef sizes, const Index& idx) {
  int64_t pos = 0;
  for (size_t d = 0; d < sizes.size(); ++d) pos = pos * sizes[d] + idx[d];
  return pos;
}

Tensor f32(std::vector<float> v, IntArrayRef sizes = {}) {
  return tensor(v, sizes);
}
Tensor i64(std::vector<int64_t> v, IntArrayRef sizes = {}) {
  return tensor(v, sizes);
}

// Random values in [-4, 4) as float64 then cast: exact in bf16 after the cast back.
Tensor random_tensor(IntArrayRef sizes, DType dtype, uint64_t seed) {
  Generator gen(seed);
  Tensor x = randint(-4, 4, sizes, kInt64, &gen);
  return x.to(dtype);
}

}  // namespace

// ---- cat and stack -------------------------------------------------------------------------------

TEST_CASE("cat joins along any dim, with negative dims") {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f32({7, 8, 9}, {1, 3});
  Tensor c = cat({a, b}, 0);
  CHECK(c.sizes() == IntArrayRef{3, 3});
  CHECK(c.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9});

  Tensor d = f32({10, 20}, {2, 1});
  Tensor e = cat({a, d, a}, -1);
  CHECK(e.sizes() == IntArrayRef{2, 7});
  CHECK(e.to_vector<float>() == std::vector<float>{1, 2, 3, 10, 1, 2, 3, 4, 5, 6, 20, 4, 5, 6});
  CHECK(cat({a}, 1).to_vector<float>() == a.to_vector<float>());
}

TEST_CASE("cat reads transposed, sliced and expanded inputs") {
  Tensor base = arange(24, kFloat32).view({4, 6});
  Tensor t = base.t();                                      // [6, 4], non-contiguous
  Tensor s = base.slice(1, 1, std::nullopt, 2).t();         // [3, 4], strided
  Tensor x = f32({-1, -2, -3, -4}, {1, 4}).expand({2, 4});  // stride 0
  Tensor out = cat({t, s, x}, 0);
  REQUIRE(out.sizes() == IntArrayRef{11, 4});
  std::vector<double> ref;
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 4; ++j) ref.push_back(j * 6 + i);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) ref.push_back(j * 6 + 1 + 2 * i);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j) ref.push_back(-(j + 1));
  check_close(out, ref);
}

TEST_CASE("cat of large inputs matches a reference loop (parallel path)") {
  for (DType dtype : {kFloat32, kBFloat16, kInt64, kBool}) {
    CAPTURE(dtype);
    Tensor a = random_tensor({3, 200, 150}, dtype, 1);
    Tensor b = random_tensor({3, 150, 333}, dtype, 2).transpose(1, 2);  // [3, 333, 150], non-contiguous
    Tensor c = random_tensor({3, 1, 150}, dtype, 3);
    Tensor out = cat({a, b, c}, 1);
    REQUIRE(out.sizes() == IntArrayRef{3, 534, 150});
    std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>(), vc = c.to_vector<double>();
    std::vector<double> ref;
    for (int64_t o = 0; o < 3; ++o) {
      for (int64_t r = 0; r < 200 * 150; ++r) ref.push_back(va[o * 200 * 150 + r]);
      for (int64_t r = 0; r < 333 * 150; ++r) ref.push_back(vb[o * 333 * 150 + r]);
      for (int64_t r = 0; r < 150; ++r) ref.push_back(vc[o * 150 + r]);
    }
    check_close(out, ref);
  }
  // One huge block per input (dim 0): the copy splits inside the blocks.
  Tensor x = random_tensor({300000}, kFloat32, 4), y = random_tensor({5}, kFloat32, 5);
  Tensor out = cat({y, x, y}, 0);
  std::vector<double> ref = y.to_vector<double>(), vx = x.to_vector<double>();
  ref.insert(ref.end(), vx.begin(), vx.end());
  for (double v : y.to_vector<double>()) ref.push_back(v);
  check_close(out, ref);
}

TEST_CASE("cat promotes dtypes and skips legacy empty 1-D tensors") {
  Tensor a = i64({1, 2}, {1, 2});
  Tensor b = f32({0.5f, 1.5f}, {1, 2});
  Tensor c = cat({a, b});
  CHECK(c.dtype() == kFloat32);
  CHECK(c.to_vector<float>() == std::vector<float>{1, 2, 0.5f, 1.5f});
  CHECK(cat({tensor<int32_t>({1}), tensor<int64_t>({2})}).dtype() == kInt64);
  Tensor bools = cat({tensor<bool>({true, false}), tensor<bool>({false})});
  CHECK(bools.dtype() == kBool);
  CHECK(bools.to_vector<bool>() == std::vector<bool>{true, false, false});
  Tensor h = cat({f32({1.5f}).to(kBFloat16), f32({2.25f}).to(kBFloat16)});
  CHECK(h.dtype() == kBFloat16);
  CHECK(h.to_vector<float>() == std::vector<float>{1.5f, 2.25f});

  // A [0] tensor is ignored whatever the other shapes, but still takes part in promotion.
  Tensor legacy = empty({0}, kFloat64);
  Tensor m = cat({legacy, a.to(kFloat32), legacy}, 1);
  CHECK(m.sizes() == IntArrayRef{1, 2});
  CHECK(m.dtype() == kFloat64);
  Tensor all_empty = cat({empty({0}, kInt32), empty({0}, kInt64)});
  CHECK(all_empty.sizes() == IntArrayRef{0});
  CHECK(all_empty.dtype() == kInt64);
  // Empty but not legacy: shapes still have to match.
  CHECK(cat({empty({0, 2}), f32({1, 2}, {1, 2})}).sizes() == IntArrayRef{1, 2});
}

TEST_CASE("cat rejects mismatched shapes, 0-dim tensors and bad dims") {
  Tensor a = zeros({2, 3}), b = zeros({3, 4}), c = zeros({2, 3, 1});
  CHECK_THROWS_WITH_AS(cat({a, b}, 0), doctest::Contains("cat: sizes of tensors must match except in dim 0"),
                       Error);
  CHECK_THROWS_WITH_AS(cat({a, b}, 0),
                       doctest::Contains("[2, 3] and tensor 1 has shape [3, 4] (mismatch in dim 1)"), Error);
  CHECK_THROWS_WITH_AS(cat({a, c}, 0), doctest::Contains("cat: tensors must have the same number of dims"),
                       Error);
  CHECK_THROWS_WITH_AS(cat({a, scalar_tensor(1.0)}),
                       doctest::Contains("zero-dimensional tensor (at position 1)"), Error);
  CHECK_THROWS_WITH_AS(cat({}), doctest::Contains("cat: expected a non-empty list"), Error);
  CHECK_THROWS_WITH_AS(cat({a, a}, 2), doctest::Contains("cat: dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(cat({a, Tensor()}), doctest::Contains("cat: tensor 1 is an undefined tensor"), Error);
}

TEST_CASE("stack inserts a new dim at any position") {
  Tensor a = f32({1, 2, 3}), b = f32({4, 5, 6});
  Tensor s0 = stack({a, b});
  CHECK(s0.sizes() == IntArrayRef{2, 3});
  CHECK(s0.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor s1 = stack({a, b}, -1);
  CHECK(s1.sizes() == IntArrayRef{3, 2});
  CHECK(s1.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  // Non-contiguous 2-D inputs stacked in the middle.
  Tensor m = arange(6, kInt64).view({2, 3}).t();  // [[0, 3], [1, 4], [2, 5]]
  Tensor s = stack({m, m}, 1);
  CHECK(s.sizes() == IntArrayRef{3, 2, 2});
  CHECK(s.to_vector<int64_t>() == std::vector<int64_t>{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5});
  CHECK(stack({scalar_tensor(1, kInt64), scalar_tensor(2, kInt64)}).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 2});
  CHECK_THROWS_WITH_AS(stack({a, f32({1, 2})}), doctest::Contains("stack: expected tensors of one shape"),
                       Error);
  CHECK_THROWS_WITH_AS(stack({a, b}, 3), doctest::Contains("stack: dim 3 out of range"), Error);
}

// ---- index_select -------------------------------------------------------------------------------

TEST_CASE("index_select picks slices along a dim, with duplicates and int32 indices") {
  Tensor x = arange(12, kFloat32).view({3, 4});
  Tensor rows = x.index_select(0, i64({2, 0, 2}));
  CHECK(rows.sizes() == IntArrayRef{3, 4});
  CHECK(rows.to_vector<float>() == std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  Tensor cols = index_select(x, -1, tensor<int32_t>({3, 1}));
  CHECK(cols.sizes() == IntArrayRef{3, 2});
  CHECK(cols.to_vector<float>() == std::vector<float>{3, 1, 7, 5, 11, 9});
  // A 0-dim index keeps the dim (size 1), as PyTorch.
  CHECK(index_select(x, 1, scalar_tensor(2, kInt64)).sizes() == IntArrayRef{3, 1});
  CHECK(index_select(scalar_tensor(5.0), 0, i64({0})).dim() == 0);
  CHECK(index_select(x, 0, empty({0}, kInt64)).sizes() == IntArrayRef{0, 4});
}

TEST_CASE("index_select on non-contiguous inputs and several dtypes") {
  for (DType dtype : {kFloat32, kBFloat16, kInt64, kBool, kFloat16}) {
    CAPTURE(dtype);
    Tensor x = random_tensor({5, 4, 6}, dtype, 7).permute({2, 0, 1});  // [6, 5, 4]
    Tensor index = i64({3, 0, 0, 4, 1});
    for (int64_t dim = 0; dim < 3; ++dim) {
      CAPTURE(dim);
      Tensor idx = index.slice(0, 0, x.size(dim) < 5 ? 3 : 5);
      Tensor out = index_select(x, dim, idx);
      std::vector<double> vx = x.to_vector<double>(), ref;
      std::vector<int64_t> vi = idx.to_vector<int64_t>();
      for_each_index(out.sizes(), [&](const Index& o) {
        Index src = o;
        src[dim] = vi[o[dim]];
        ref.push_back(vx[flat(x.sizes(), src)]);
      });
      check_close(out, ref);
    }
  }
  // A strided index (every other element of a longer one).
  Tensor x = arange(10, kInt64);
  Tensor idx = i64({9, -1, 3, -1, 0}).slice(0, 0, std::nullopt, 2);
  CHECK(index_select(x, 0, idx).to_vector<int64_t>() == std::vector<int64_t>{9, 3, 0});
}

TEST_CASE("index_select of many rows (embedding lookup, parallel path)") {
  Tensor table = random_tensor({1000, 64}, kFloat32, 11);
  Generator gen(12);
  Tensor idx = randint(0, 1000, {3000}, kInt64, &gen);
  Tensor out = index_select(table, 0, idx);
  std::vector<double> vt = table.to_vector<double>(), ref;
  for (int64_t i : idx.to_vector<int64_t>())
    for (int64_t j = 0; j < 64; ++j) ref.push_back(vt[i * 64 + j]);
  check_close(out, ref);
  // Indexing the innermost dim of a large tensor.
  Tensor cols = index_select(table, 1, i64({63, 0, 5}));
  std::vector<double> ref2;
  for (int64_t r = 0; r < 1000; ++r)
    for (int64_t c : {63, 0, 5}) ref2.push_back(vt[r * 64 + c]);
  check_close(cols, ref2);
}

TEST_CASE("index_select rejects out-of-range and negative indices and bad index tensors") {
  Tensor x = zeros({3, 4});
  CHECK_THROWS_WITH_AS(index_select(x, 0, i64({0, 3})),
                       doctest::Contains("index_select: index 3 is out of range for dim 0 with size 3"),
                       Error);
  CHECK_THROWS_WITH_AS(index_select(x, 1, i64({-1})),
                       doctest::Contains("index_select: index -1 is out of range for dim 1 with size 4"),
                       Error);
  CHECK_THROWS_WITH_AS(
      index_select(x, 0, f32({0})),
      doctest::Contains("index_select: expected an int64 or int32 index tensor, got float32"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, i64({0, 1}, {1, 2})),
                       doctest::Contains("index_select: expected a 0-D or 1-D index, got shape [1, 2]"),
                       Error);
  CHECK_THROWS_WITH_AS(index_select(x, 2, i64({0})), doctest::Contains("index_select: dim 2 out of range"),
                       Error);
}

// ---- gather -------------------------------------------------------------------------------------

TEST_CASE("gather matches PyTorch") {
  Tensor x = arange(12, kFloat32).view({3, 4});
  // torch.gather(x, 1, [[3,0],[1,1],[2,0]]) and torch.gather(x, 0, [[2,0,1],[0,2,2]])
  Tensor g1 = gather(x, 1, i64({3, 0, 1, 1, 2, 0}, {3, 2}));
  CHECK(g1.sizes() == IntArrayRef{3, 2});
  CHECK(g1.to_vector<float>() == std::vector<float>{3, 0, 5, 5, 10, 8});
  Tensor g0 = x.gather(-2, tensor<int32_t>({2, 0, 1, 0, 2, 2}, {2, 3}));
  CHECK(g0.to_vector<float>() == std::vector<float>{8, 1, 6, 0, 9, 10});
  CHECK(gather(scalar_tensor(5.0), 0, scalar_tensor(0, kInt64)).dim() == 0);
}

TEST_CASE("gather on non-contiguous inputs and indices, several dtypes") {
  for (DType dtype : {kFloat32, kBFloat16, kInt64, kBool}) {
    CAPTURE(dtype);
    Tensor x = random_tensor({4, 7, 5}, dtype, 21).transpose(0, 2);  // [5, 7, 4]
    for (int64_t dim = 0; dim < 3; ++dim) {
      CAPTURE(dim);
      Generator gen(30 + static_cast<uint64_t>(dim));
      // Index smaller than x in the other dims, generated transposed (non-contiguous).
      Tensor idx = randint(0, x.size(dim), {3, 6, 4}, kInt64, &gen).transpose(0, 2);  // [4, 6, 3]
      Tensor out = gather(x, dim, idx);
      REQUIRE(out.sizes() == idx.sizes());
      std::vector<double> vx = x.to_vector<double>(), ref;
      std::vector<int64_t> vi = idx.to_vector<int64_t>();
      for_each_index(idx.sizes(), [&](const Index& o) {
        Index src = o;
        src[dim] = vi[flat(idx.sizes(), o)];
        ref.push_back(vx[flat(x.sizes(), src)]);
      });
      check_close(out, ref);
    }
  }
}

TEST_CASE("gather rejects bad ranks, sizes and index values") {
  Tensor x = zeros({3, 4});
  CHECK_THROWS_WITH_AS(gather(x, 1, i64({0, 1})),
                       doctest::Contains("gather: expected an index with as many dims as the input"), Error);
  CHECK_THROWS_WITH_AS(
      gather(x, 1, zeros({4, 1}, kInt64)),
      doctest::Contains("gather: index shape [4, 1] is larger than the input shape [3, 4] in dim 0"), Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, full({3, 5}, 4, kInt64)),
                       doctest::Contains("gather: index 4 is out of range for dim 1 with size 4"), Error);
  CHECK_THROWS_WITH_AS(gather(x, 0, full({1, 1}, -1, kInt64)),
                       doctest::Contains("gather: index -1 is out of range for dim 0 with size 3"), Error);
}

// ---- scatter_add and index_add ----------------------------------------------------------------------

TEST_CASE("scatter_add accumulates duplicates (PyTorch values)") {
  // torch.zeros(3,4).scatter_add(1, [[0,0,3],[1,2,1]], arange(1,10).view(3,3))
  Tensor s1 =
      zeros({3, 4}).scatter_add(1, i64({0, 0, 3, 1, 2, 1}, {2, 3}), arange(1, 10, 1, kFloat32).view({3, 3}));
  CHECK(s1.to_vector<float>() == std::vector<float>{3, 0, 0, 3, 0, 10, 5, 0, 0, 0, 0, 0});
  // torch.ones(3,2).scatter_add(0, [[2,2],[0,2]], [[1,2,7],[3,4,8]])
  Tensor s0 =
      scatter_add(ones({3, 2}), 0, tensor<int32_t>({2, 2, 0, 2}, {2, 2}), f32({1, 2, 7, 3, 4, 8}, {2, 3}));
  CHECK(s0.to_vector<float>() == std::vector<float>{4, 1, 1, 1, 2, 7});
  // 1-D with many duplicates: a histogram.
  Tensor h = scatter_add(zeros({3}, kInt64), 0, i64({0, 2, 2, 2, 1, 2}), ones({6}, kInt64));
  CHECK(h.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 4});
  Tensor b = scatter_add(zeros({3}, kBool), 0, i64({0, 0}), tensor<bool>({true, false}));
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, false});
}

TEST_CASE("scatter_add on non-contiguous src and index matches a reference loop") {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16, kInt32}) {
    CAPTURE(dtype);
    Tensor x = random_tensor({4, 5, 6}, dtype, 41);
    std::vector<double> before = x.to_vector<double>();
    Tensor src = random_tensor({7, 6, 5}, dtype, 42).permute({2, 1, 0});  // [5, 6, 7]
    for (int64_t dim = 0; dim < 3; ++dim) {
      CAPTURE(dim);
      Generator gen(50 + static_cast<uint64_t>(dim));
      Tensor idx =
          randint(0, x.size(dim), {4, 5, 3}, kInt64, &gen).permute({1, 0, 2}).slice(0, 0, 3);  // [3, 4, 3]
      Tensor out = scatter_add(x, dim, idx, src);
      std::vector<double> ref = x.to_vector<double>(), vs = src.to_vector<double>();
      std::vector<int64_t> vi = idx.to_vector<int64_t>();
      for_each_index(idx.sizes(), [&](const Index& o) {
        Index dst = o;
        dst[dim] = vi[flat(idx.sizes(), o)];
        ref[flat(x.sizes(), dst)] += vs[flat(src.sizes(), o)];
      });
      check_close(out, ref);
    }
    check_close(x, before);  // out of place
  }
}

TEST_CASE("scatter_add with many collisions in a large tensor (parallel over the other dims)") {
  Tensor src = random_tensor({2000, 40}, kFloat64, 61);
  Generator gen(62);
  Tensor idx = randint(0, 10, {2000, 40}, kInt64, &gen);
  Tensor out = scatter_add(zeros({10, 40}, kFloat64), 0, idx, src);
  std::vector<double> ref(400, 0.0), vs = src.to_vector<double>();
  std::vector<int64_t> vi = idx.to_vector<int64_t>();
  for (int64_t r = 0; r < 2000; ++r)
    for (int64_t c = 0; c < 40; ++c) ref[vi[r * 40 + c] * 40 + c] += vs[r * 40 + c];
  check_close(out, ref);
  // Along the innermost dim: each row's 40 additions land on 10 places.
  Tensor rows = scatter_add(zeros({2000, 10}, kFloat64), 1, idx, src);
  std::vector<double> ref_rows(20000, 0.0);
  for (int64_t r = 0; r < 2000; ++r)
    for (int64_t c = 0; c < 40; ++c) ref_rows[r * 10 + vi[r * 40 + c]] += vs[r * 40 + c];
  check_close(rows, ref_rows);
}

TEST_CASE("scatter_add rejects bad shapes, dtypes and indices") {
  Tensor x = zeros({3, 4});
  CHECK_THROWS_WITH_AS(
      scatter_add(x, 0, i64({0}, {1, 1}), zeros({1, 1}, kFloat64)),
      doctest::Contains("scatter_add: expected src with the input's dtype float32, got float64"), Error);
  CHECK_THROWS_WITH_AS(
      scatter_add(x, 0, zeros({2, 3}, kInt64), zeros({2, 2})),
      doctest::Contains("scatter_add: index shape [2, 3] is larger than the src shape [2, 2] in dim 1"),
      Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, zeros({2, 5}, kInt64), zeros({2, 5})),
                       doctest::Contains("is larger than the input shape [3, 4] in dim 1"), Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 1, i64({0, 4}, {1, 2}), zeros({1, 2})),
                       doctest::Contains("scatter_add: index 4 is out of range for dim 1 with size 4"),
                       Error);
  CHECK_THROWS_WITH_AS(
      scatter_add(x, 1, i64({0}), zeros({1})),
      doctest::Contains("scatter_add: expected input, index and src with the same number of dims"), Error);
}

TEST_CASE("index_add accumulates duplicate indices (PyTorch values)") {
  // torch.zeros(4,3).index_add(0, [3,0,3], arange(1,10).view(3,3))
  Tensor a = index_add(zeros({4, 3}), 0, i64({3, 0, 3}), arange(1, 10, 1, kFloat32).view({3, 3}));
  CHECK(a.to_vector<float>() == std::vector<float>{4, 5, 6, 0, 0, 0, 0, 0, 0, 8, 10, 12});
  // torch.ones(2,3).index_add(1, [2,2,0,2], arange(8).view(2,4))
  Tensor b = index_add(ones({2, 3}), -1, tensor<int32_t>({2, 2, 0, 2}), arange(8, kFloat32).view({2, 4}));
  CHECK(b.to_vector<float>() == std::vector<float>{3, 1, 5, 7, 1, 17});
  Tensor c = index_add(zeros({2}, kInt64), 0, i64({1, 1, 1}), i64({5, 6, 7}));
  CHECK(c.to_vector<int64_t>() == std::vector<int64_t>{0, 18});
}

TEST_CASE("index_add on non-contiguous src, several dtypes, large sizes") {
  for (DType dtype : {kFloat32, kBFloat16, kInt64}) {
    CAPTURE(dtype);
    Tensor x = random_tensor({6, 300, 50}, dtype, 71);
    for (int64_t dim = 0; dim < 3; ++dim) {
      CAPTURE(dim);
      Generator gen(80 + static_cast<uint64_t>(dim));
      Tensor idx = randint(0, x.size(dim), {9}, kInt64, &gen);
      DimVector src_shape(x.sizes());
      src_shape[dim] = 9;
      // src generated with its dims reversed, then transposed back: non-contiguous.
      Tensor src = random_tensor({src_shape[2], src_shape[1], src_shape[0]}, dtype, 90).permute({2, 1, 0});
      Tensor out = index_add(x, dim, idx, src);
      std::vector<double> ref = x.to_vector<double>(), vs = src.to_vector<double>();
      std::vector<int64_t> vi = idx.to_vector<int64_t>();
      for_each_index(src.sizes(), [&](const Index& o) {
        Index dst = o;
        dst[dim] = vi[o[dim]];
        ref[flat(x.sizes(), dst)] += vs[flat(src.sizes(), o)];
      });
      // bf16: the expected sums of small integers are exact in float, rounding once at the end.
      check_close(out, ref);
    }
  }
}

TEST_CASE("index_add rejects mismatched shapes and out-of-range indices") {
  Tensor x = zeros({3, 4});
  CHECK_THROWS_WITH_AS(index_add(x, 0, i64({0, 1}), zeros({3, 4})),
                       doctest::Contains("index_add: index has 2 values but src has size 3 in dim 0"), Error);
  CHECK_THROWS_WITH_AS(index_add(x, 0, i64({0}), zeros({1, 5})),
                       doctest::Contains("index_add: src shape [1, 5] must match the input shape [3, 4]"),
                       Error);
  CHECK_THROWS_WITH_AS(index_add(x, 0, i64({-1}), zeros({1, 4})),
                       doctest::Contains("index_add: index -1 is out of range for dim 0 with size 3"), Error);
  CHECK_THROWS_WITH_AS(index_add(x, 0, i64({0}), zeros({1, 4}, kInt64)),
                       doctest::Contains("index_add: expected src with the input's dtype float32, got int64"),
                       Error);
}

// ---- tril / triu -------------------------------------------------------------------------------

TEST_CASE("tril and triu keep the triangles of batched matrices for any diagonal") {
  Tensor m = arange(1, 10, 1, kFloat32).view({3, 3});
  CHECK(tril(m).to_vector<float>() == std::vector<float>{1, 0, 0, 4, 5, 0, 7, 8, 9});
  CHECK(m.triu(1).to_vector<float>() == std::vector<float>{0, 2, 3, 0, 0, 6, 0, 0, 0});
  CHECK(m.tril(-1).to_vector<float>() == std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0});

  for (DType dtype : {kFloat32, kBFloat16, kInt64, kBool}) {
    CAPTURE(dtype);
    // Batched [2, 3, 4, 5], read through a transpose of the last two dims.
    Tensor x = random_tensor({2, 3, 5, 4}, dtype, 101).transpose(-1, -2);
    std::vector<double> vx = x.to_vector<double>();
    for (int64_t diagonal : {-10, -3, -1, 0, 1, 2, 4, 10}) {
      CAPTURE(diagonal);
      std::vector<double> lower, upper;
      for_each_index(x.sizes(), [&](const Index& i) {
        double v = vx[flat(x.sizes(), i)];
        int64_t col_minus_row = i[3] - i[2];
        lower.push_back(col_minus_row <= diagonal ? v : 0.0);
        upper.push_back(col_minus_row >= diagonal ? v : 0.0);
      });
      check_close(tril(x, diagonal), lower);
      check_close(triu(x, diagonal), upper);
    }
  }
}

TEST_CASE("tril and triu reject tensors with fewer than 2 dims") {
  CHECK_THROWS_WITH_AS(tril(zeros({3})),
                       doctest::Contains("tril: expected a tensor with at least 2 dims, got shape [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(triu(scalar_tensor(1.0)),
                       doctest::Contains("triu: expected a tensor with at least 2 dims"), Error);
}

// ---- repeat -------------------------------------------------------------------------------------

TEST_CASE("repeat tiles like torch.Tensor.repeat, including more repeats than dims") {
  Tensor a = i64({1, 2, 3});
  Tensor r = a.repeat({2, 1, 2});
  CHECK(r.sizes() == IntArrayRef{2, 1, 6});
  CHECK(r.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  Tensor m = i64({1, 2, 3, 4}, {2, 2});
  CHECK(repeat(m, {2, 3}).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4});
  // Transposed input.
  Tensor t = repeat(m.t(), {1, 2});
  CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 1, 3, 2, 4, 2, 4});
  CHECK(repeat(m, {0, 2}).sizes() == IntArrayRef{0, 4});
  CHECK(repeat(scalar_tensor(true, kBool), {3}).to_vector<bool>() == std::vector<bool>{true, true, true});
  // All-ones repeats still give a new tensor.
  Tensor same = repeat(m, {1, 1});
  CHECK(!same.shares_storage(m));
  CHECK(same.to_vector<int64_t>() == m.to_vector<int64_t>());
}

TEST_CASE("repeat rejects too few or negative repeat counts") {
  CHECK_THROWS_WITH_AS(repeat(zeros({2, 3}), {2}),
                       doctest::Contains("repeat: got 1 repeat counts [2] for a tensor of shape [2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(repeat(zeros({2}), {-1}),
                       doctest::Contains("repeat: repeat counts must be non-negative"), Error);
}

// ---- flip ---------------------------------------------------------------------------------------

TEST_CASE("flip reverses any set of dims") {
  Tensor m = arange(6, kInt64).view({2, 3});
  CHECK(flip(m, {0}).to_vector<int64_t>() == std::vector<int64_t>{3, 4, 5, 0, 1, 2});
  CHECK(m.flip({-1}).to_vector<int64_t>() == std::vector<int64_t>{2, 1, 0, 5, 4, 3});
  CHECK(flip(m, {1, 0}).to_vector<int64_t>() == std::vector<int64_t>{5, 4, 3, 2, 1, 0});
  CHECK(flip(m, {}).to_vector<int64_t>() == m.to_vector<int64_t>());
  CHECK(flip(scalar_tensor(3.0), {0}).item<double>() == 3.0);

  for (DType dtype : {kFloat32, kBFloat16, kInt64, kBool}) {
    CAPTURE(dtype);
    Tensor x = random_tensor({60, 70, 9}, dtype, 111).permute({1, 2, 0});  // [70, 9, 60]
    std::vector<double> vx = x.to_vector<double>();
    for (auto dims : {Index{0}, Index{2}, Index{0, 2}, Index{-1, 1, 0}}) {
      std::vector<double> ref;
      for_each_index(x.sizes(), [&](const Index& o) {
        Index src = o;
        for (int64_t d : dims) {
          int64_t w = d < 0 ? d + 3 : d;
          src[w] = x.size(w) - 1 - o[w];
        }
        ref.push_back(vx[flat(x.sizes(), src)]);
      });
      check_close(flip(x, dims), ref);
    }
  }
}

TEST_CASE("flip rejects repeated and out-of-range dims") {
  CHECK_THROWS_WITH_AS(flip(zeros({2, 3}), {0, -2}), doctest::Contains("flip: dim 0 appears more than once"),
                       Error);
  CHECK_THROWS_WITH_AS(flip(zeros({2, 3}), {2}), doctest::Contains("flip: dim 2 out of range"), Error);
}

// ---- pad ----------------------------------------------------------------------------------------

TEST_CASE("constant pad fills with a value and crops with negative pads") {
  Tensor x = arange(6, kFloat32).view({2, 3});
  Tensor p = pad(x, {1, 2}, "constant", -1.5);
  CHECK(p.sizes() == IntArrayRef{2, 6});
  CHECK(p.to_vector<float>() ==
        std::vector<float>{-1.5f, 0, 1, 2, -1.5f, -1.5f, -1.5f, 3, 4, 5, -1.5f, -1.5f});
  // F.pad(arange(6.).view(2,3), (1,-1,-1,2), value=9)
  Tensor q = pad(x, {1, -1, -1, 2}, "constant", 9);
  CHECK(q.sizes() == IntArrayRef{3, 3});
  CHECK(q.to_vector<float>() == std::vector<float>{9, 3, 4, 9, 9, 9, 9, 9, 9});
  // F.pad(arange(3), (1,1), value=1.7) truncates the value for an integer tensor.
  CHECK(pad(arange(3, kInt64), {1, 1}, "constant", 1.7).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 0, 1, 2, 1});
  CHECK(pad(x, {}).to_vector<float>() == x.to_vector<float>());
  Tensor copy = pad(x, {0, 0});
  CHECK(!copy.shares_storage(x));
  CHECK(copy.to_vector<float>() == x.to_vector<float>());
}

TEST_CASE("constant pad over three dims of non-contiguous inputs, several dtypes") {
  for (DType dtype : {kFloat32, kBFloat16, kInt64, kBool}) {
    CAPTURE(dtype);
    Tensor x = random_tensor({5, 4, 3, 2}, dtype, 121).permute({3, 2, 1, 0});  // [2, 3, 4, 5]
    const Index pads = {2, -1, 0, 3, -1, 1};  // last dim (2, -1), dim 2 (0, 3), dim 1 (-1, 1)
    Tensor out = pad(x, pads, "constant", 1.0);
    REQUIRE(out.sizes() == IntArrayRef{2, 3, 7, 6});
    std::vector<double> vx = x.to_vector<double>(), ref;
    int64_t left[4] = {0, -1, 0, 2};
    for_each_index(out.sizes(), [&](const Index& o) {
      Index src = o;
      bool inside = true;
      for (int d = 0; d < 4; ++d) {
        src[d] = o[d] - left[d];
        inside = inside && src[d] >= 0 && src[d] < x.size(d);
      }
      ref.push_back(inside ? vx[flat(x.sizes(), src)] : 1.0);
    });
    check_close(out, ref);
  }
}

TEST_CASE("reflect pad matches PyTorch") {
  // F.pad(arange(1., 13.).view(1,3,4), (3,2,2,1), mode="reflect")
  Tensor x = arange(1, 13, 1, kFloat32).view({1, 3, 4});
  Tensor r = pad(x, {3, 2, 2, 1}, "reflect");
  CHECK(r.sizes() == IntArrayRef{1, 6, 9});
  std::vector<float> expected = {12, 11, 10, 9, 10, 11, 12, 11, 10, 8, 7, 6, 5, 6, 7, 8, 7, 6,
                                 4,  3,  2,  1, 2,  3,  4,  3,  2,  8, 7, 6, 5, 6, 7, 8, 7, 6,
                                 12, 11, 10, 9, 10, 11, 12, 11, 10, 8, 7, 6, 5, 6, 7, 8, 7, 6};
  CHECK(r.to_vector<float>() == expected);
  // F.pad([[1,2,3,4,5]], (4,2), mode="reflect"), read through a strided view.
  Tensor y = arange(1, 11, 1, kFloat32).slice(0, 0, std::nullopt, 2).view({1, 5});  // [1, 3, 5, 7, 9]
  CHECK(pad(y, {4, 2}, "reflect").to_vector<float>() == std::vector<float>{9, 7, 5, 3, 1, 3, 5, 7, 9, 7, 5});
  // Negative reflect pads crop: F.pad(arange(12.).view(1,3,4), (-1,2), mode="reflect")
  Tensor z = arange(12, kFloat64).view({1, 3, 4});
  CHECK(pad(z, {-1, 2}, "reflect").to_vector<double>() ==
        std::vector<double>{1, 2, 3, 2, 1, 5, 6, 7, 6, 5, 9, 10, 11, 10, 9});
  CHECK(pad(tensor<bool>({true, false, false}), {2, 0}, "reflect").to_vector<bool>() ==
        std::vector<bool>{false, false, true, false, false});
}

TEST_CASE("pad rejects bad pads and modes") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_AS(pad(x, {1, 2, 3}), doctest::Contains("pad: expected (left, right) pairs of padding"),
                       Error);
  CHECK_THROWS_WITH_AS(pad(x, {1, 1, 1, 1, 1, 1}),
                       doctest::Contains("pad: 3 padding pairs [1, 1, 1, 1, 1, 1] for a 2-D tensor"), Error);
  CHECK_THROWS_WITH_AS(
      pad(x, {3, 0}, "reflect"),
      doctest::Contains("pad: reflect padding (3, 0) of dim 1 must be smaller than its size 3"), Error);
  CHECK_THROWS_WITH_AS(
      pad(x, {0, 0, -2, -1}),
      doctest::Contains("pad: padding (-2, -1) of dim 0 with size 2 gives the negative size -1"), Error);
  CHECK_THROWS_WITH_AS(pad(x, {1, 1}, "wrap"), doctest::Contains("pad: unknown padding mode 'wrap'"), Error);
  CHECK_THROWS_WITH_AS(
      pad(x, {0, 0, 1, 3}, "circular"),
      doctest::Contains("pad: circular padding (1, 3) of dim 0 must be at most its size 2"), Error);
  CHECK_THROWS_WITH_AS(pad(zeros({2, 0}), {1, 0}, "replicate"),
                       doctest::Contains("pad: replicate padding (1, 0) of dim 1 has no element to repeat"), Error);
  // Nothing to repeat is fine when nothing is added.
  CHECK(pad(zeros({2, 0}), {0, 0, 1, 0}, "replicate").sizes() == IntArrayRef{3, 0});
}

TEST_CASE("replicate and circular pad match PyTorch, forward and backward") {
  // x = arange(12.).view(1,1,3,4); y = F.pad(x, (2,1,1,2), mode=...)
  // y.backward(arange(42.).view(y.shape)); x.grad
  Tensor x = arange(12, kFloat32).view({1, 1, 3, 4});
  Tensor g = arange(42, kFloat32).view({1, 1, 6, 7});
  Tensor r = pad(x, {2, 1, 1, 2}, "replicate");
  CHECK(r.sizes() == IntArrayRef{1, 1, 6, 7});
  CHECK(r.to_vector<float>() == std::vector<float>{0, 0, 0, 1, 2,  3,  3,  0, 0, 0, 1, 2,  3,  3,
                                                   4, 4, 4, 5, 6,  7,  7,  8, 8, 8, 9, 10, 11, 11,
                                                   8, 8, 8, 9, 10, 11, 11, 8, 8, 8, 9, 10, 11, 11});
  CHECK(pad_backward(g, x.sizes(), {2, 1, 1, 2}, "replicate").to_vector<float>() ==
        std::vector<float>{27, 13, 15, 36, 45, 17, 18, 39, 261, 93, 96, 201});
  Tensor c = pad(x, {2, 1, 1, 2}, "circular");
  CHECK(c.to_vector<float>() == std::vector<float>{10, 11, 8, 9, 10, 11, 8, 2, 3, 0, 1, 2, 3, 0,
                                                   6,  7,  4, 5, 6,  7,  4, 10, 11, 8, 9, 10, 11, 8,
                                                   2,  3,  0, 1, 2,  3,  0, 6, 7, 4, 5, 6,  7,  4});
  CHECK(pad_backward(g, x.sizes(), {2, 1, 1, 2}, "circular").to_vector<float>() ==
        std::vector<float>{86, 41, 78, 82, 114, 55, 106, 110, 58, 27, 50, 54});
  // Negative pads crop: F.pad(x, (-1,2,1,-1), mode="replicate")
  CHECK(pad(x, {-1, 2, 1, -1}, "replicate").to_vector<float>() ==
        std::vector<float>{1, 2, 3, 3, 3, 1, 2, 3, 3, 3, 5, 6, 7, 7, 7});
  // A circular pad as large as the dim wraps it once: [a b] padded (2, 2) is [a b | a b | a b].
  CHECK(pad(tensor<int64_t>({4, 5}), {2, 2}, "circular").to_vector<int64_t>() ==
        std::vector<int64_t>{4, 5, 4, 5, 4, 5});
}

// ---- pad_backward -------------------------------------------------------------------------------

TEST_CASE("pad_backward of reflect padding matches PyTorch autograd") {
  // x = arange(1., 13.).view(1,3,4); F.pad(x, (3,2,2,1),
  // mode="reflect").backward(arange(1., 55.).view(1,6,9))
  Tensor g = arange(1, 55, 1, kFloat32).view({1, 6, 9});
  Tensor gi = pad_backward(g, {1, 3, 4}, {3, 2, 2, 1}, "reflect");
  CHECK(gi.sizes() == IntArrayRef{1, 3, 4});
  CHECK(gi.to_vector<float>() == std::vector<float>{22, 71, 70, 44, 93, 294, 291, 186, 44, 142, 140, 88});
  // 1-D hand case: [a b c] padded (2, 1) reads [c b a b c b]; grad [1..6] gives a=3, b=2+4+6, c=1+5.
  Tensor h = pad_backward(arange(1, 7, 1, kFloat64).view({1, 6}), {1, 3}, {2, 1}, "reflect");
  CHECK(h.to_vector<double>() == std::vector<double>{3, 12, 6});
}

TEST_CASE("pad_backward of constant padding is the crop of grad_out") {
  Tensor g = arange(12, kFloat32).view({3, 4});
  // The forward padded the last dim by (1, 2) and cropped the first row of dim 0 (-1, 1).
  Tensor gi = pad_backward(g, {3, 1}, {1, 2, -1, 1}, "constant");
  CHECK(gi.sizes() == IntArrayRef{3, 1});
  CHECK(gi.to_vector<float>() == std::vector<float>{0, 1, 5});
}

TEST_CASE("pad_backward is the adjoint of pad: <pad(x), g> == <x, pad_backward(g)>") {
  for (std::string_view mode : {"constant", "reflect", "replicate", "circular"}) {
    CAPTURE(mode);
    for (DType dtype : {kFloat64, kFloat32, kBFloat16}) {
      CAPTURE(dtype);
      Tensor x = random_tensor({3, 4, 5, 6}, dtype, 131);
      const Index pads = mode != "constant" ? Index{5, 2, 0, 4, 3, 1} : Index{2, -3, 1, 0, -1, 2};
      Tensor y = pad(x, pads, mode, 0.0);
      // grad_out read through a transposed view.
      Tensor g = random_tensor({y.size(0), y.size(1), y.size(3), y.size(2)}, dtype, 132).transpose(2, 3);
      Tensor gi = pad_backward(g, x.sizes(), pads, mode);
      REQUIRE(gi.sizes() == x.sizes());
      std::vector<double> vy = y.to_vector<double>(), vg = g.to_vector<double>();
      std::vector<double> vx = x.to_vector<double>(), vgi = gi.to_vector<double>();
      double lhs = 0, rhs = 0;
      for (size_t i = 0; i < vy.size(); ++i) lhs += vy[i] * vg[i];
      for (size_t i = 0; i < vx.size(); ++i) rhs += vx[i] * vgi[i];
      CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
      // The modes that read the input again keep every output element's gradient (mass
      // preserved); constant drops the padding.
      double mass_out = 0, mass_in = 0;
      for (double v : vg) mass_out += v;
      for (double v : vgi) mass_in += v;
      if (mode != "constant") CHECK(mass_in == doctest::Approx(mass_out).epsilon(1e-12));
    }
  }
}

TEST_CASE("pad_backward rejects a grad_out of the wrong shape") {
  CHECK_THROWS_WITH_AS(
      pad_backward(zeros({2, 4}), {2, 3}, {1, 1}),
      doctest::Contains("pad_backward: expected grad_out of shape [2, 5] for input shape [2, 3]"), Error);
  CHECK_THROWS_WITH_AS(
      pad_backward(zeros({2, 4}), {2, 1}, {2, 1}, "reflect"),
      doctest::Contains("pad_backward: reflect padding (2, 1) of dim 1 must be smaller than its size 1"),
      Error);
}

TEST_CASE("roll shifts along dims with wrap-around, as torch.roll") {
  const Tensor x = arange(0, 12, 1, TensorOptions(kFloat32)).reshape({3, 4});
  // torch.roll(x, 1, 1), torch.roll(x, -1, 0), torch.roll(x, (1, 5), (0, 1)), torch.roll(x, 2).
  check_close(roll(x, {1}, {1}), {3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10});
  check_close(x.roll({-1}, {0}), {4, 5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 3});
  check_close(roll(x, {1, 5}, {0, 1}), {11, 8, 9, 10, 3, 0, 1, 2, 7, 4, 5, 6});
  check_close(roll(x, {2}), {10, 11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  check_close(roll(x.t(), {1}, {-1}), {8, 0, 4, 9, 1, 5, 10, 2, 6, 11, 3, 7});  // a transposed input
  // A shift of a whole turn is a copy, not the same tensor.
  const Tensor same = roll(x, {4}, {1});
  check_close(same, values(x));
  CHECK(!same.is_same(x));
  CHECK(roll(zeros({0, 3}), {2}, {0}).sizes() == IntArrayRef{0, 3});
  CHECK(error_of([&] { roll(x, {1, 2}, {0}); }).find("roll: expected one shift per dim, got 2 shifts and 1 dims") !=
        std::string::npos);
  CHECK(error_of([&] { roll(x, {1, 2}); }).find("roll: without dims, expected one shift") != std::string::npos);
  CHECK(error_of([&] { roll(x, {1}, {2}); }).find("roll: dim 2 out of range") != std::string::npos);
}
