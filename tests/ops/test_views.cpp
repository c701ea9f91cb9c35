/*
 * View ops (ops/view_ops.h): geometry (sizes, strides, offsets) checked by hand and against
 * PyTorch 1.13 (which views of permuted tensors are possible, and with which strides), values
 * read through the views, storage sharing (a view aliases its base; reshape copies only when
 * it must), and the errors for impossible requests.
 */
#include <doctest/doctest.h>

#include <vector>

#include "ops/ops.h"

using namespace loom;

namespace {

std::vector<int64_t> values(const Tensor& t) {
  return t.to_vector<int64_t>();
}

}  // namespace

TEST_CASE("view infers -1, shares storage and sees writes to its base") {
  Tensor x = arange(12);
  Tensor v = x.view({3, -1});
  CHECK(v.sizes() == IntArrayRef{3, 4});
  CHECK(v.strides() == IntArrayRef{4, 1});
  CHECK(v.shares_storage(x));
  x.narrow(0, 4, 1).fill_(-1);
  CHECK(v.select(0, 1).to_vector<int64_t>() == std::vector<int64_t>{-1, 5, 6, 7});
  CHECK(v.view({-1}).sizes() == IntArrayRef{12});
  CHECK(scalar_tensor(3.0).view({1, 1}).sizes() == IntArrayRef{1, 1});
  CHECK(arange(6).view({2, 3}).view_as(zeros({3, 2})).sizes() == IntArrayRef{3, 2});
  CHECK(empty({0, 3}).view({3, 0, 5}).sizes() == IntArrayRef{3, 0, 5});
}

TEST_CASE("view of permuted tensors succeeds exactly where PyTorch's does, with its strides") {
  struct Case {
    std::vector<int64_t> sizes, perm, shape, strides;  // strides empty: the view must fail
  };
  // x = torch.arange(120.).view(sizes).permute(perm); x.view(shape).stride()
  const std::vector<Case> cases = {
      {{2, 3, 4, 5}, {1, 0, 2, 3}, {3, 2, 20}, {20, 60, 1}},
      {{2, 3, 4, 5}, {1, 0, 2, 3}, {6, 20}, {}},
      {{2, 3, 4, 5}, {0, 1, 3, 2}, {6, 5, 4}, {20, 1, 5}},
      {{2, 3, 4, 5}, {0, 1, 3, 2}, {2, 3, 20}, {}},
      {{2, 3, 4, 5}, {0, 1, 3, 2}, {2, 3, 5, 2, 2}, {60, 20, 1, 10, 5}},
      {{2, 3, 4, 5}, {2, 3, 0, 1}, {20, 6}, {1, 20}},
      {{2, 3, 4, 5}, {2, 3, 0, 1}, {4, 5, 3, 2}, {5, 1, 40, 20}},
      {{2, 3, 4, 5}, {2, 3, 0, 1}, {10, 2, 6}, {2, 1, 20}},
      {{2, 1, 4, 15}, {1, 0, 2, 3}, {8, 15}, {15, 1}},
      {{2, 1, 4, 15}, {0, 2, 1, 3}, {2, 60}, {60, 1}},
      {{2, 1, 4, 15}, {0, 2, 1, 3}, {-1}, {1}},
  };
  for (const Case& c : cases) {
    CAPTURE(IntArrayRef(c.sizes));
    CAPTURE(IntArrayRef(c.perm));
    CAPTURE(IntArrayRef(c.shape));
    Tensor x = arange(120, kFloat32).view(c.sizes).permute(c.perm);
    if (c.strides.empty()) {
      CHECK_THROWS_WITH_AS(x.view(c.shape), doctest::Contains("use reshape"), Error);
      continue;
    }
    Tensor v = x.view(c.shape);
    CHECK(v.strides() == IntArrayRef(c.strides));
    CHECK(v.to_vector<float>() == x.contiguous().to_vector<float>());  // same row-major order
  }
}

TEST_CASE("view errors name the shapes") {
  Tensor x = arange(12).view({3, 4});
  CHECK_THROWS_WITH_AS(x.view({5, -1}),
                       doctest::Contains("view: shape [5, -1] is invalid for input of shape [3, 4]"), Error);
  CHECK_THROWS_WITH_AS(x.view({-1, -1}), doctest::Contains("view: only one dimension can be -1"), Error);
  CHECK_THROWS_WITH_AS(x.view({7}), doctest::Contains("(12 elements)"), Error);
  CHECK_THROWS_WITH_AS(
      x.t().view({12}),
      doctest::Contains("view: shape [12] is not compatible with the strides [1, 4] of a tensor of "
                        "shape [4, 3]"),
      Error);
}

TEST_CASE("reshape shares storage when it can and copies a transposed tensor") {
  Tensor x = arange(6).view({2, 3});
  Tensor r = x.reshape({3, 2});
  CHECK(r.shares_storage(x));
  Tensor xt = x.t();
  Tensor c = xt.reshape({6});
  CHECK(!c.shares_storage(x));
  CHECK(values(c) == std::vector<int64_t>{0, 3, 1, 4, 2, 5});
  // A transposed tensor reshaped by splitting one dim is still a view.
  Tensor s = xt.reshape({3, 2, 1});
  CHECK(s.shares_storage(x));
  CHECK(values(s) == std::vector<int64_t>{0, 3, 1, 4, 2, 5});
  CHECK(x.reshape_as(zeros({6})).shares_storage(x));
  CHECK_THROWS_WITH_AS(x.reshape({4, -1}), doctest::Contains("reshape: shape [4, -1] is invalid"), Error);
}

TEST_CASE("permute and transpose reorder dims") {
  Tensor x = arange(24).view({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  CHECK(p.sizes() == IntArrayRef{4, 2, 3});
  CHECK(p.strides() == IntArrayRef{1, 12, 4});
  CHECK(p.shares_storage(x));
  CHECK(values(p.select(0, 1).select(0, 1)) == std::vector<int64_t>{13, 17, 21});
  CHECK(x.permute({-1, -3, -2}).sizes() == IntArrayRef{4, 2, 3});
  Tensor t = x.transpose(0, -1);
  CHECK(t.sizes() == IntArrayRef{4, 3, 2});
  CHECK(t.strides() == IntArrayRef{1, 4, 12});
  CHECK(values(arange(6).view({2, 3}).t()) == std::vector<int64_t>{0, 3, 1, 4, 2, 5});
  CHECK(arange(3).t().sizes() == IntArrayRef{3});
  CHECK_THROWS_WITH_AS(x.permute({0, 1}),
                       doctest::Contains("permute: got 2 dims [0, 1] for a 3-D tensor of shape [2, 3, 4]"),
                       Error);
  CHECK_THROWS_WITH_AS(x.permute({0, 1, -3}), doctest::Contains("permute: dim 0 repeated"), Error);
  CHECK_THROWS_WITH_AS(x.transpose(0, 3), doctest::Contains("transpose: dim 3 out of range"), Error);
  CHECK_THROWS_WITH_AS(
      x.t(), doctest::Contains("t: expected a tensor with at most 2 dims, got shape [2, 3, 4]"), Error);
}

TEST_CASE("slice with steps and negative or out-of-range bounds, like Python") {
  Tensor x = arange(10);
  // torch.arange(10)[-7:-2:2] and [-100:100:3]
  CHECK(values(x.slice(0, -7, -2, 2)) == std::vector<int64_t>{3, 5, 7});
  CHECK(values(x.slice(0, -100, 100, 3)) == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(x.slice(0, 7, 3).numel() == 0);
  CHECK(values(x.slice(0, std::nullopt, 4)) == std::vector<int64_t>{0, 1, 2, 3});
  Tensor m = arange(12).view({3, 4});
  Tensor s = m.slice(-1, 1, std::nullopt, 2);
  CHECK(s.sizes() == IntArrayRef{3, 2});
  CHECK(s.strides() == IntArrayRef{4, 2});
  CHECK(s.storage_offset() == 1);
  CHECK(values(s) == std::vector<int64_t>{1, 3, 5, 7, 9, 11});
  // A slice of a slice keeps composing offsets and strides.
  CHECK(values(s.slice(0, 1).slice(1, 1)) == std::vector<int64_t>{7, 11});
  CHECK_THROWS_WITH_AS(x.slice(0, 0, 5, 0), doctest::Contains("slice: step must be positive, got 0"), Error);
  CHECK_THROWS_WITH_AS(scalar_tensor(1).slice(0), doctest::Contains("slice: cannot slice a 0-dim tensor"),
                       Error);
}

TEST_CASE("narrow and select") {
  Tensor m = arange(12).view({3, 4});
  CHECK(values(m.narrow(1, 1, 2)) == std::vector<int64_t>{1, 2, 5, 6, 9, 10});
  CHECK(values(m.narrow(0, -1, 1)) == std::vector<int64_t>{8, 9, 10, 11});
  CHECK(values(m.select(1, -1)) == std::vector<int64_t>{3, 7, 11});
  CHECK(values(m[2]) == std::vector<int64_t>{8, 9, 10, 11});
  CHECK(m.select(0, 1).select(0, 2).dim() == 0);
  CHECK(m.select(0, 1).select(0, 2).item<int64_t>() == 6);
  CHECK_THROWS_WITH_AS(m.narrow(1, 3, 2),
                       doctest::Contains("narrow: start 3 and length 2 exceed size 4 of dim 1"), Error);
  CHECK_THROWS_WITH_AS(m.select(0, 3),
                       doctest::Contains("select: index 3 is out of bounds for dim 0 with size 3"), Error);
  CHECK_THROWS_WITH_AS(m.select(1, -5),
                       doctest::Contains("select: index -5 is out of bounds for dim 1 with size 4"), Error);
}

TEST_CASE("expand broadcasts size-1 dims with stride 0 and adds leading dims") {
  Tensor col = arange(3).view({3, 1});
  Tensor e = col.expand({2, 3, 4});
  CHECK(e.sizes() == IntArrayRef{2, 3, 4});
  CHECK(e.strides() == IntArrayRef{0, 1, 0});
  CHECK(e.shares_storage(col));
  CHECK(values(e.select(0, 1).select(0, 2)) == std::vector<int64_t>{2, 2, 2, 2});
  CHECK(col.expand({-1, 2}).sizes() == IntArrayRef{3, 2});
  CHECK(scalar_tensor(5).expand({2, 2}).strides() == IntArrayRef{0, 0});
  CHECK(col.expand_as(zeros({3, 5})).sizes() == IntArrayRef{3, 5});
  CHECK_THROWS_WITH_AS(col.expand({4, 4}),
                       doctest::Contains("expand: the size 3 of dim 0 of shape [3, 1] cannot become 4"),
                       Error);
  CHECK_THROWS_WITH_AS(col.expand({4}), doctest::Contains("expand: the target shape [4] has fewer dims"),
                       Error);
  CHECK_THROWS_WITH_AS(col.expand({-1, 3, 1}),
                       doctest::Contains("expand: -1 is not allowed for the new leading dim 0"), Error);
  CHECK_THROWS_WITH_AS(col.expand({3, -2}), doctest::Contains("expand: invalid size -2"), Error);
}

TEST_CASE("squeeze and unsqueeze") {
  Tensor x = arange(6).view({1, 2, 1, 3});
  CHECK(x.squeeze().sizes() == IntArrayRef{2, 3});
  CHECK(x.squeeze(2).sizes() == IntArrayRef{1, 2, 3});
  CHECK(x.squeeze(-1).sizes() == IntArrayRef{1, 2, 1, 3});  // size 3: unchanged
  CHECK(x.squeeze(0).shares_storage(x));
  CHECK(scalar_tensor(1).view({1, 1}).squeeze().dim() == 0);
  // torch.arange(6).view(1,2,1,3).unsqueeze(-1).stride() == (6, 3, 3, 1, 1); unsqueeze(2) -> (6, 3, 3, 3, 1)
  CHECK(x.unsqueeze(-1).strides() == IntArrayRef{6, 3, 3, 1, 1});
  CHECK(x.unsqueeze(2).strides() == IntArrayRef{6, 3, 3, 3, 1});
  CHECK(x.unsqueeze(0).sizes() == IntArrayRef{1, 1, 2, 1, 3});
  CHECK(scalar_tensor(1).unsqueeze(0).sizes() == IntArrayRef{1});
  CHECK(values(arange(6).view({2, 3}).t().unsqueeze(1).squeeze(1)) == std::vector<int64_t>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_WITH_AS(x.unsqueeze(5), doctest::Contains("unsqueeze: dim 5 out of range"), Error);
  CHECK_THROWS_WITH_AS(x.squeeze(4), doctest::Contains("squeeze: dim 4 out of range"), Error);
}

TEST_CASE("flatten and unflatten") {
  Tensor x = arange(24).view({2, 3, 4});
  CHECK(x.flatten().sizes() == IntArrayRef{24});
  CHECK(x.flatten(1).sizes() == IntArrayRef{2, 12});
  CHECK(x.flatten(0, -2).sizes() == IntArrayRef{6, 4});
  CHECK(x.flatten(1).shares_storage(x));
  CHECK(scalar_tensor(2).flatten().sizes() == IntArrayRef{1});
  Tensor xt = x.transpose(0, 2);  // [4, 3, 2]
  CHECK(values(xt.flatten(1)).size() == 24);
  CHECK(values(xt.flatten(1).select(0, 1)) == std::vector<int64_t>{1, 13, 5, 17, 9, 21});
  Tensor u = x.unflatten(-1, {2, -1});
  CHECK(u.sizes() == IntArrayRef{2, 3, 2, 2});
  CHECK(u.shares_storage(x));
  CHECK(xt.unflatten(0, {2, 2}).sizes() == IntArrayRef{2, 2, 3, 2});  // splitting a dim is always a view
  CHECK_THROWS_WITH_AS(x.flatten(2, 1), doctest::Contains("flatten: start_dim 2 comes after end_dim 1"),
                       Error);
  CHECK_THROWS_WITH_AS(x.unflatten(1, {2, 2}), doctest::Contains("unflatten: shape [2, 2] is invalid"),
                       Error);
}

TEST_CASE("split, split_with_sizes and chunk") {
  Tensor x = arange(10);
  std::vector<Tensor> parts = x.split(4);
  REQUIRE(parts.size() == 3);
  CHECK(values(parts[0]) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(values(parts[2]) == std::vector<int64_t>{8, 9});
  CHECK(parts[1].shares_storage(x));
  std::vector<Tensor> w = arange(12).view({3, 4}).split_with_sizes({1, 3}, -1);
  REQUIRE(w.size() == 2);
  CHECK(values(w[0]) == std::vector<int64_t>{0, 4, 8});
  CHECK(w[1].sizes() == IntArrayRef{3, 3});
  // torch.arange(10).chunk(4) -> sizes 3, 3, 3, 1; chunk(6) -> five chunks of 2
  std::vector<Tensor> c4 = x.chunk(4);
  REQUIRE(c4.size() == 4);
  CHECK(c4[3].numel() == 1);
  CHECK(x.chunk(6).size() == 5);
  // torch.chunk(torch.empty(0), 3) -> three empty tensors
  CHECK(empty({0}).chunk(3).size() == 3);
  CHECK_THROWS_WITH_AS(x.split_with_sizes({3, 3}),
                       doctest::Contains("split_with_sizes: sizes [3, 3] sum to 6 but dim 0 has size 10"),
                       Error);
  CHECK_THROWS_WITH_AS(x.split(0), doctest::Contains("split: split_size must be positive"), Error);
  CHECK_THROWS_WITH_AS(x.chunk(0), doctest::Contains("chunk: number of chunks must be positive"), Error);
}

TEST_CASE("as_strided makes overlapping views and rejects views past the storage") {
  Tensor x = arange(10, kFloat32);
  // torch.arange(10.).as_strided((4, 3), (2, 1), 1): sliding windows
  Tensor w = x.as_strided({4, 3}, {2, 1}, 1);
  CHECK(w.to_vector<float>() == std::vector<float>{1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8, 9});
  CHECK(w.shares_storage(x));
  CHECK(x.as_strided({0, 100}, {100, 100}, 9).numel() == 0);  // empty: nothing to reach
  CHECK_THROWS_WITH_AS(
      x.as_strided({4, 3}, {3, 1}, 1),
      doctest::Contains("as_strided: view with sizes [4, 3], strides [3, 1] and offset 1 reaches "
                        "element 12 of a storage of 10 elements"),
      Error);
  CHECK_THROWS_WITH_AS(x.as_strided({2}, {1, 1}), doctest::Contains("as_strided: 1 sizes but 2 strides"),
                       Error);
  CHECK_THROWS_WITH_AS(x.as_strided({2}, {-1}), doctest::Contains("as_strided: negative size or stride"),
                       Error);
}

TEST_CASE("writes through a view reach the base; broadcast_tensors expands") {
  Tensor x = zeros({3, 4}, kInt64);
  x.slice(1, 1, std::nullopt, 2).select(0, 2).fill_(7);
  CHECK(values(x) == std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 7});
  x.t()[3].copy_(tensor<int64_t>({1, 2, 3}));
  CHECK(values(x.select(1, 3)) == std::vector<int64_t>{1, 2, 3});
  std::vector<Tensor> b = broadcast_tensors({zeros({3, 1}), zeros({4}), scalar_tensor(1.0)});
  for (const Tensor& t : b) CHECK(t.sizes() == IntArrayRef{3, 4});
  CHECK_THROWS_WITH_AS(broadcast_tensors({zeros({3}), zeros({4})}),
                       doctest::Contains("broadcast_tensors: shapes [3] and [4] cannot be broadcast"), Error);
}

TEST_CASE("copy_ between overlapping views reads the whole source first; into an expanded view it is refused") {
  // NumPy's rule for overlapping copies (PyTorch refuses these with "some elements of the input
  // tensor and the written-to tensor refer to a single memory location"): the result is the
  // source's values before the copy, whichever order a kernel writes in.
  Tensor a = arange(0, 8, 1, kInt64);
  a.narrow(0, 1, 7).copy_(a.narrow(0, 0, 7));
  CHECK(values(a) == std::vector<int64_t>{0, 0, 1, 2, 3, 4, 5, 6});
  Tensor b = arange(0, 8, 1, kInt64);
  b.narrow(0, 0, 7).copy_(b.narrow(0, 1, 7));
  CHECK(values(b) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 7});
  Tensor m = arange(0, 9, 1, kInt64).view({3, 3});
  m.copy_(m.t());
  CHECK(values(m) == std::vector<int64_t>{0, 3, 6, 1, 4, 7, 2, 5, 8});
  Tensor same = arange(0, 4, 1, kInt64);
  same.copy_(same);  // the very same elements: nothing to protect
  CHECK(values(same) == std::vector<int64_t>{0, 1, 2, 3});
  Tensor one = zeros({1}, kInt64);
  CHECK_THROWS_WITH_AS(one.expand({4}).copy_(arange(0, 4, 1, kInt64)),
                       doctest::Contains("copy_: cannot write in place into a tensor whose elements share memory"),
                       Error);
  CHECK_THROWS_WITH_AS(uniform_(zeros({1}).expand({3, 2})), doctest::Contains("uniform_: cannot write in place"),
                       Error);
  CHECK(values(one) == std::vector<int64_t>{0});
  one.expand({4}).fill_(3);  // every write stores the same value: allowed, as in PyTorch
  CHECK(values(one) == std::vector<int64_t>{3});
}
