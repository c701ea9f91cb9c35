/* operator<< prints like PyTorch (expected strings written from torch 1.13's output). */
#include <doctest/doctest.h>

#include <sstream>

#include "ops/ops.h"

using namespace loom;

static std::string str(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

TEST_CASE("printing") {
  CHECK(str(tensor<float>({1, 2, 3, 4}, {2, 2})) == "tensor([[1., 2.],\n        [3., 4.]])");
  CHECK(str(tensor<float>({1.5f, -2.25f})) == "tensor([ 1.5000, -2.2500])");
  CHECK(str(tensor<int32_t>({1, 20})) == "tensor([ 1, 20], dtype=int32)");
  CHECK(str(tensor<int64_t>({3})) == "tensor([3])");
  CHECK(str(full({}, 2.5)) == "tensor(2.5000)");
  CHECK(str(tensor<float>({1e-5f, 1.0f})) == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(str(zeros({0})) == "tensor([])");
  CHECK(str(zeros({2, 0})) == "tensor([], size=(2, 0))");
  CHECK(str(tensor<bool>({true, false})) == "tensor([ True, False])");
  CHECK(str(tensor<double>({0.5})) == "tensor([0.5000], dtype=float64)");
  CHECK(str(Tensor()) == "tensor(undefined)");
  CHECK(str(arange(8).reshape({2, 2, 2})) == "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])");
  CHECK(str(arange(2000)) == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  CHECK(str(arange(2000).reshape({40, 50})) ==
        "tensor([[   0,    1,    2,  ...,   47,   48,   49],\n"
        "        [  50,   51,   52,  ...,   97,   98,   99],\n"
        "        [ 100,  101,  102,  ...,  147,  148,  149],\n"
        "        ...,\n"
        "        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n"
        "        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n"
        "        [1950, 1951, 1952,  ..., 1997, 1998, 1999]])");
}
