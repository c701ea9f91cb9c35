// Trains a small model for a few steps through the installed headers and libraries.
#include <cstdio>

#include "nn/nn.h"

int main() {
  using namespace loom;
  manual_seed(0);
  nn::MLP model({8, 16, 3});
  nn::SGD optimizer(model.parameters(), {.lr = 0.1});
  Tensor x = randn({32, 8}), y = randint(0, 3, {32});
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    optimizer.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model(x), y);
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::printf("consumer: loss %.4f -> %.4f\n", first, last);
  return last < first ? 0 : 1;
}
