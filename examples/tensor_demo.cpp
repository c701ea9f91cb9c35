/*
 * A tour of Loom's tensor API: creation, views that share memory, broadcasting, type
 * promotion, reductions, a matrix product, softmax, and the errors Loom raises on bad input.
 * Run: build/examples/tensor_demo
 */
#include <iostream>

#include "ops/ops.h"

int main() {
  using namespace loom;
  manual_seed(0);

  std::cout << "== creation\n";
  Tensor x = arange(12).reshape({3, 4}).to(kFloat32);
  std::cout << "x = arange(12).reshape({3, 4}):\n" << x << "\n";
  std::cout << "randn({2, 3}):\n" << randn({2, 3}) << "\n";
  std::cout << "eye(3, kInt32):\n" << eye(3, -1, kInt32) << "\n";

  std::cout << "\n== views share storage (no copies)\n";
  Tensor col = x.select(1, 2);
  std::cout << "x.select(1, 2) = " << col << "  (stride " << col.stride(0) << ")\n";
  std::cout << "x.t() is contiguous? " << std::boolalpha << x.t().is_contiguous() << "\n";
  col.fill_(-1);
  std::cout << "after col.fill_(-1), x =\n" << x << "\n";

  std::cout << "\n== broadcasting and type promotion\n";
  Tensor row = tensor<float>({10, 20, 30, 40});
  std::cout << "x + row:\n" << x + row << "\n";
  Tensor ints = tensor<int32_t>({1, 2, 3});
  std::cout << "int32 * 2 -> " << (ints * 2) << "\n";
  std::cout << "int32 * 0.5 -> " << (ints * 0.5) << "\n";
  std::cout << "bfloat16: " << tensor<float>({3.14159f, 2.71828f}).to(kBFloat16) << "\n";

  std::cout << "\n== reductions\n";
  std::cout << "x.sum() = " << x.sum() << ", x.mean({1}) = " << x.mean({1}) << "\n";
  auto [values, indices] = x.max(1);
  std::cout << "x.max(1): values " << values << ", indices " << indices << "\n";

  std::cout << "\n== linear algebra and nn ops\n";
  Tensor w = randn({4, 2});
  std::cout << "x.matmul(w):\n" << x.matmul(w) << "\n";
  std::cout << "softmax(x, -1):\n" << softmax(x, -1) << "\n";
  Tensor logits = randn({4, 5}), target = tensor<int64_t>({0, 3, 1, 4});
  std::cout << "cross_entropy(logits, target) = " << cross_entropy(logits, target) << "\n";

  std::cout << "\n== errors name the op and the shapes\n";
  try {
    (void)(x + randn({5}));
  } catch (const Error& e) {
    std::cout << "x + randn({5}) -> loom::Error: " << e.what() << "\n";
  }
  try {
    (void)matmul(x, randn({3, 3}));
  } catch (const Error& e) {
    std::cout << "matmul(x, randn({3, 3})) -> loom::Error: " << e.what() << "\n";
  }
  return 0;
}
