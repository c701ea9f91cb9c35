/*
 * Knowledge distillation on Fashion-MNIST: does a small MLP learn more from a big one's soft
 * targets than from the labels alone? (docs/distillation.md has the results.)
 *
 * It trains a teacher MLP 784-1200-1200-10 (ReLU, dropout) with cross entropy, then, for each
 * seed, the student MLP 784-64-10 twice from the same initial weights, with the same batches,
 * epochs, optimizer and schedule: once with plain cross entropy, once with the distillation
 * loss against the frozen teacher (quant::Teacher, quant::distillation_loss). It prints the
 * test accuracy of the teacher, of each student, and the students' means over the seeds.
 *
 *   build/tools/make_dataset fashion-mnist --out data/
 *   build/examples/distill_fashion_mnist data/fashion-mnist-train.h5 data/fashion-mnist-test.h5
 *
 * Arguments: TRAIN.h5 TEST.h5 [teacher_epochs 15] [student_epochs 15] [seeds 3] [temperature 2]
 * [alpha 0.5] [TEACHER.safetensors]. With the last one, the teacher's weights are loaded from it
 * when it exists, else saved there after training, so that several student settings can be
 * tried against one teacher.
 *
 * The defaults are the best setting found (docs/distillation.md): teacher 89.85%, students
 * 88.96% plain and 89.07% distilled (means over 3 seeds), in 150 s on 2 threads. The textbook
 * T = 4, alpha = 0.9 gives 88.50%: this 64-unit student cannot follow the logits of a
 * 1200-1200 teacher, which is what a high temperature asks of it.
 */
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "data/data.h"
#include "nn/nn.h"
#include "quant/distill.h"

using namespace loom;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double test_accuracy(nn::Module& model, data::DataLoader& loader) {
  model.eval();
  NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (data::Batch& batch : loader) {
    correct += model(batch.data).argmax(1).eq(batch.target).sum().item<int64_t>();
    total += batch.size();
  }
  model.train();
  return 100.0 * static_cast<double>(correct) / static_cast<double>(total);
}

// The loss of one batch given the model's logits.
using LossFn = std::function<Tensor(const data::Batch&, const Tensor& logits)>;

// The recipe of examples/fashion_mnist.cpp: SGD with momentum and weight decay, linear warmup
// over 100 steps, then a cosine decay to 0 at the end of the last epoch.
void train(nn::Module& model, data::DataLoader& loader, int epochs, double lr, const LossFn& loss_fn,
           const char* name) {
  nn::SGD optimizer(model.parameters(), nn::SGDOptions{.lr = lr, .momentum = 0.9, .weight_decay = 5e-4});
  nn::CosineWithWarmup schedule(optimizer, 100, epochs * loader.num_batches());
  model.train();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const auto start = Clock::now();
    double loss_sum = 0;
    int64_t batches = 0;
    for (data::Batch& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = loss_fn(batch, model(batch.data));
      loss.backward();
      optimizer.step();
      schedule.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    std::printf("  %s epoch %d: train loss %.4f, %.1f s\n", name, epoch + 1,
                loss_sum / static_cast<double>(batches), seconds_since(start));
    std::fflush(stdout);
  }
}

// The teacher: wide, with dropout after each hidden layer (it overfits without it).
std::shared_ptr<nn::MLP> make_teacher() {
  return std::make_shared<nn::MLP>(std::vector<int64_t>{784, 1200, 1200, 10}, [] {
    return std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3));
  });
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    LOOM_CHECK(argc >= 3,
               "usage: distill_fashion_mnist TRAIN.h5 TEST.h5 [teacher_epochs] [student_epochs] [seeds] "
               "[temperature] [alpha] [TEACHER.safetensors]");
    const int teacher_epochs = argc > 3 ? std::stoi(argv[3]) : 15;
    const int student_epochs = argc > 4 ? std::stoi(argv[4]) : 15;
    const int seeds = argc > 5 ? std::stoi(argv[5]) : 3;
    const quant::DistillationOptions kd{.temperature = argc > 6 ? std::stod(argv[6]) : 2.0,
                                        .alpha = argc > 7 ? std::stod(argv[7]) : 0.5};
    const std::string teacher_file = argc > 8 ? argv[8] : "";
    LOOM_CHECK(teacher_epochs > 0 && student_epochs > 0 && seeds > 0,
               "distill_fashion_mnist: epochs and seeds must be positive, got ", teacher_epochs, ", ",
               student_epochs, ", ", seeds);
    quant::DistillationLoss kd_loss(kd);  // checks temperature and alpha before any training

    auto normalize =
        std::make_shared<data::Normalize>(std::vector<float>{0.2860f}, std::vector<float>{0.3530f});
    auto train_set = std::make_shared<data::Hdf5ImageDataset>(argv[1]);
    auto test_set = std::make_shared<data::Hdf5ImageDataset>(argv[2]);
    data::DataLoader test(test_set, data::DataLoaderOptions().batch_size(1000).workers(1), normalize);
    auto train_loader = [&](uint64_t seed) {
      return data::DataLoader(train_set,
                              data::DataLoaderOptions().batch_size(128).shuffle(true).seed(seed).workers(1),
                              normalize);
    };
    const auto start = Clock::now();
    const LossFn cross_entropy = [](const data::Batch& b, const Tensor& logits) {
      return nn::functional::cross_entropy(logits, b.target);
    };

    // 1. The teacher, trained once with labels (or loaded, trained by an earlier run).
    manual_seed(1000);
    auto teacher_model = make_teacher();
    if (!teacher_file.empty() && std::filesystem::exists(teacher_file)) {
      teacher_model->load_state_dict(nn::load_safetensors(teacher_file).tensors);
      std::printf("teacher loaded from %s\n", teacher_file.c_str());
    } else {
      data::DataLoader loader = train_loader(1000);
      train(*teacher_model, loader, teacher_epochs, 0.05, cross_entropy, "teacher");
      if (!teacher_file.empty()) nn::save_safetensors(teacher_file, teacher_model->state_dict());
    }
    const double teacher_accuracy = test_accuracy(*teacher_model, test);
    std::printf("teacher 784-1200-1200-10: %lld parameters, test accuracy %.2f%%\n",
                static_cast<long long>(teacher_model->num_parameters()), teacher_accuracy);
    const quant::Teacher teacher(teacher_model);

    // 2. For each seed, the same student initialisation and batches, without and with the teacher.
    const LossFn distill = [&](const data::Batch& b, const Tensor& logits) {
      return kd_loss(logits, teacher(b.data), b.target);
    };
    std::vector<double> plain, distilled;
    for (int s = 0; s < seeds; ++s) {
      const uint64_t seed = static_cast<uint64_t>(s);
      for (bool with_teacher : {false, true}) {
        manual_seed(seed);
        nn::MLP student({784, 64, 10});
        data::DataLoader loader = train_loader(seed);
        train(student, loader, student_epochs, 0.05, with_teacher ? distill : cross_entropy,
              with_teacher ? "distilled student" : "plain student");
        const double accuracy = test_accuracy(student, test);
        (with_teacher ? distilled : plain).push_back(accuracy);
        std::printf("seed %d, student 784-64-10 %s: test accuracy %.2f%%\n", s,
                    with_teacher ? "distilled" : "plain CE ", accuracy);
        std::fflush(stdout);
      }
    }
    std::printf(
        "\nteacher %.2f%% | student plain CE %.2f%% | student distilled (T %g, alpha %g) %.2f%% "
        "(means over %d seeds; %d teacher / %d student epochs; %.0f s)\n",
        teacher_accuracy, mean(plain), kd.temperature, kd.alpha, mean(distilled), seeds, teacher_epochs,
        student_epochs, seconds_since(start));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // std::stoi on a bad argument
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
