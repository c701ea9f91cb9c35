/* Tensor metadata, storage sharing, contiguity, from_blob, the caching allocator. */
#include <doctest/doctest.h>

#include <vector>

#include "core/allocator.h"
#include "ops/ops.h"

using namespace loom;

TEST_CASE("empty tensor metadata") {
  Tensor t = empty({2, 3, 4});
  CHECK(t.defined());
  CHECK(t.dim() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.sizes() == IntArrayRef{2, 3, 4});
  CHECK(t.strides() == IntArrayRef{12, 4, 1});
  CHECK(t.size(-1) == 4);
  CHECK(t.stride(0) == 12);
  CHECK(t.dtype() == kFloat32);
  CHECK(t.device() == kCPU);
  CHECK(t.is_contiguous());
  CHECK(t.nbytes() == 96);
  CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64 == 0);
}

TEST_CASE("0-dim and empty tensors") {
  Tensor s = empty({});
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  Tensor e = empty({3, 0});
  CHECK(e.numel() == 0);
  CHECK(e.is_contiguous());
}

TEST_CASE("undefined tensor and bad sizes are errors") {
  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK_THROWS_WITH_AS(u.sizes(), doctest::Contains("undefined tensor"), Error);
  CHECK_THROWS_WITH_AS(empty({2, -1}), doctest::Contains("negative dimension"), Error);
  Tensor t = empty({2, 3});
  CHECK_THROWS_WITH_AS(t.size(2), doctest::Contains("dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(t.data_ptr<double>(), doctest::Contains("data_ptr<float64>() called on a float32 tensor"),
                       Error);
}

TEST_CASE("from_blob shares the caller's memory and runs the deleter") {
  std::vector<float> data{1, 2, 3, 4, 5, 6};
  {
    Tensor t = from_blob(data.data(), {2, 3});
    CHECK(t.data_ptr<float>() == data.data());
    CHECK(t[1][2].item<float>() == 6.0f);
    t[0][1].fill_(20.0f);
  }
  CHECK(data[1] == 20.0f);
  bool deleted = false;
  {
    Tensor t = from_blob(data.data(), {6}, kFloat32, [&](void*) { deleted = true; });
    Tensor view = t.slice(0, 1, 3);
    t = Tensor();
    CHECK_FALSE(deleted);  // the view keeps the storage alive
  }
  CHECK(deleted);
  std::vector<double> strided{1, 2, 3, 4, 5, 6};
  Tensor col = from_blob(strided.data(), {3}, {2}, kFloat64);
  CHECK(col.to_vector<double>() == std::vector<double>{1, 3, 5});
}

TEST_CASE("views share storage and the version counter") {
  Tensor t = zeros({4, 4});
  Tensor row = t[2];
  CHECK(row.shares_storage(t));
  uint64_t v = t.version();
  row.fill_(1.0f);
  CHECK(t.version() == v + 1);
  CHECK(t.sum().item<float>() == 4.0f);
}

TEST_CASE("contiguity of views") {
  Tensor t = empty({3, 4});
  CHECK_FALSE(t.t().is_contiguous());
  CHECK(t.slice(0, 1, 2).is_contiguous());
  CHECK_FALSE(t.slice(1, 0, 2).is_contiguous());
  CHECK(t.unsqueeze(0).is_contiguous());
  CHECK(t.t().contiguous().is_contiguous());
  CHECK(t.contiguous().is_same(t));  // no copy when already contiguous
}

TEST_CASE("the CPU allocator re-uses freed blocks") {
  Allocator* a = cpu_allocator();
  AllocatorStats before = a->stats();
  { Tensor t = empty({1 << 20}); }
  AllocatorStats mid = a->stats();
  { Tensor t = empty({1 << 20}); }
  AllocatorStats after = a->stats();
  CHECK(after.num_allocs == before.num_allocs + 2);
  CHECK(after.num_cache_hits >= mid.num_cache_hits + 1);
  CHECK(after.peak_allocated_bytes >= (size_t{4} << 20));
  a->empty_cache();
  CHECK(a->stats().reserved_bytes == a->stats().allocated_bytes);
}

TEST_CASE("devices parse and print") {
  CHECK(Device("cpu") == kCPU);
  CHECK(Device("cuda:1") == Device::cuda(1));
  CHECK(Device("cuda").index() == 0);
  CHECK(Device::cuda(2).str() == "cuda:2");
  CHECK_THROWS_WITH_AS(Device("gpu0"), doctest::Contains("invalid device 'gpu0'"), Error);
  CHECK_THROWS_WITH_AS(Device("cuda:x"), doctest::Contains("invalid device"), Error);
}

TEST_CASE("set_num_threads") {
  int before = get_num_threads();
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  set_num_threads(before);
  CHECK_THROWS_AS(set_num_threads(0), Error);
}
