/*
 * Trains the model zoo's MLP or SmallCNN on Fashion-MNIST and reports test accuracy, in float32
 * or with bf16 autocast (float32 master weights): the whole nn layer in one page.
 *
 *   build/tools/make_dataset fashion-mnist --out data/
 *   build/examples/fashion_mnist data/fashion-mnist-train.h5 data/fashion-mnist-test.h5 mlp 3 f32
 *   build/examples/fashion_mnist data/fashion-mnist-train.h5 data/fashion-mnist-test.h5 mlp 3 bf16
 *
 * Arguments: TRAIN.h5 TEST.h5 [mlp|cnn] [epochs] [f32|bf16] [seed].
 */
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "core/autocast.h"
#include "core/grad_mode.h"
#include "data/data.h"
#include "nn/nn.h"

using namespace loom;

namespace {

std::shared_ptr<nn::Module> make_model(const std::string& kind) {
  if (kind == "mlp") return std::make_shared<nn::MLP>(std::vector<int64_t>{784, 512, 512, 10});
  if (kind == "cnn") return std::make_shared<nn::SmallCNN>(1, 10, 28);
  LOOM_FAIL("fashion_mnist: unknown model '", kind, "' (expected mlp or cnn)");
}

double test_accuracy(nn::Module& model, data::DataLoader& loader, bool bf16) {
  model.eval();
  NoGradGuard no_grad;
  AutocastGuard autocast(DeviceType::CPU, DType::BFloat16, bf16);
  int64_t correct = 0, total = 0;
  for (data::Batch& batch : loader) {
    Tensor predicted = model(batch.data).argmax(1);
    correct += predicted.eq(batch.target).sum().item<int64_t>();
    total += batch.size();
  }
  model.train();
  return 100.0 * static_cast<double>(correct) / static_cast<double>(total);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    LOOM_CHECK(argc >= 3, "usage: fashion_mnist TRAIN.h5 TEST.h5 [mlp|cnn] [epochs] [f32|bf16] [seed]");
    const std::string kind = argc > 3 ? argv[3] : "mlp";
    const int epochs = argc > 4 ? std::stoi(argv[4]) : 3;
    const std::string precision = argc > 5 ? argv[5] : "f32";
    const uint64_t seed = argc > 6 ? std::stoull(argv[6]) : 0;
    LOOM_CHECK(precision == "f32" || precision == "bf16", "fashion_mnist: precision must be f32 or bf16, got '",
               precision, "'");
    const bool bf16 = precision == "bf16";

    auto normalize = std::make_shared<data::Normalize>(std::vector<float>{0.2860f}, std::vector<float>{0.3530f});
    auto train_set = std::make_shared<data::Hdf5ImageDataset>(argv[1]);
    auto test_set = std::make_shared<data::Hdf5ImageDataset>(argv[2]);
    data::DataLoader train(train_set, data::DataLoaderOptions().batch_size(128).shuffle(true).seed(seed).workers(2),
                           normalize);
    data::DataLoader test(test_set, data::DataLoaderOptions().batch_size(1000).workers(2), normalize);

    manual_seed(seed);
    auto model = make_model(kind);
    nn::SGD optimizer(model->parameters(), nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
    nn::CosineWithWarmup schedule(optimizer, 100, epochs * train.num_batches());
    std::printf("%s, %s, %lld parameters\n", kind.c_str(), precision.c_str(),
                static_cast<long long>(model->num_parameters()));

    for (int epoch = 0; epoch < epochs; ++epoch) {
      auto start = std::chrono::steady_clock::now();
      double loss_sum = 0;
      int64_t batches = 0;
      for (data::Batch& batch : train) {
        optimizer.zero_grad();
        Tensor loss;
        {
          AutocastGuard autocast(DeviceType::CPU, DType::BFloat16, bf16);
          loss = nn::functional::cross_entropy((*model)(batch.data), batch.target);
        }
        loss.backward();  // outside autocast, as in torch: gradients reach the f32 weights in f32
        optimizer.step();
        schedule.step();
        loss_sum += loss.item<double>();
        ++batches;
      }
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.1f s\n", epoch + 1, loss_sum / batches,
                  test_accuracy(*model, test, bf16), seconds);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
