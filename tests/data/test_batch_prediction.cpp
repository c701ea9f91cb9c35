/*
 * Batch prediction (data/batch_prediction.h) and the predictions file (data/prediction_file.h)
 * with models given as functions: a fixed linear map over vectors (classification) and a fixed
 * table of logits per token (a language model). The file's rows, the accuracy and the
 * perplexity are checked against values computed here by hand; the file's failures leave an
 * existing file untouched and no temporary file behind.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/random.h"
#include "data/batch_prediction.h"
#include "data/data.h"
#include "ops/ops.h"
#include "tests/data/hdf5_columns.h"
#include "tests/test_util.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool has_temporary_files(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

TEST_CASE("predict_batches: classes, probabilities, accuracy and cross-entropy of a linear model") {
  ScratchDir dir("batch_prediction");
  Generator g(3);
  const Tensor x = randn({30, 5}, kFloat32, &g), w = randn({5, 4}, kFloat32, &g);
  const Tensor y = randint(0, 4, {30}, kInt64, &g);
  auto set = std::make_shared<data::TensorDataset>(x, y);
  data::DataLoader loader(set, data::DataLoaderOptions().batch_size(7).workers(2));
  const fs::path out = dir.path() / "p.h5";
  data::PredictionFile file(out.string(), 30, /*keep_logits=*/true, /*replace=*/false);
  std::vector<int64_t> progress;
  const data::PredictionSummary s =
      data::predict_batches([&](const Tensor& b) { return b.matmul(w); }, loader,
                            {.out = &file, .on_batch = [&](int64_t done, int64_t total) {
                               CHECK(total == 30);
                               progress.push_back(done);
                             }});
  file.finish({{"note", "by hand"}}, {{"accuracy", s.accuracy()}});
  CHECK(progress == std::vector<int64_t>{7, 14, 21, 28, 30});

  // By hand, in float64, row by row.
  const std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>();
  const std::vector<int64_t> yv = y.to_vector<int64_t>();
  const std::vector<int64_t> classes = read_column(out, "class", kInt64).to_vector<int64_t>();
  const std::vector<float> probability = read_column(out, "probability", kFloat32).to_vector<float>();
  const std::vector<float> logits = read_column(out, "logits", kFloat32).to_vector<float>();
  int64_t correct = 0;
  double nll = 0;
  for (int64_t i = 0; i < 30; ++i) {
    double l[4], top = -1e300, sum = 0;
    int64_t best = 0;
    for (int64_t k = 0; k < 4; ++k) {
      l[k] = 0;
      for (int64_t j = 0; j < 5; ++j) l[k] += static_cast<double>(xv[i * 5 + j]) * wv[j * 4 + k];
      if (l[k] > top) top = l[k], best = k;
      CHECK(logits[static_cast<size_t>(i * 4 + k)] == doctest::Approx(l[k]).epsilon(1e-5));
    }
    for (double v : l) sum += std::exp(v - top);
    CHECK(classes[static_cast<size_t>(i)] == best);
    CHECK(probability[static_cast<size_t>(i)] == doctest::Approx(1 / sum).epsilon(1e-5));
    correct += best == yv[static_cast<size_t>(i)];
    nll += top + std::log(sum) - l[yv[static_cast<size_t>(i)]];
  }
  CHECK(s.examples == 30);
  CHECK(s.scored == 30);
  CHECK(s.correct == correct);
  CHECK(s.accuracy() == doctest::Approx(static_cast<double>(correct) / 30));
  CHECK(s.mean_cross_entropy() == doctest::Approx(nll / 30).epsilon(1e-5));
  CHECK(s.perplexity() == doctest::Approx(std::exp(nll / 30)).epsilon(1e-5));
  CHECK_FALSE(s.sequences);
  char accuracy[64];
  std::snprintf(accuracy, sizeof accuracy, "; accuracy %.2f%% (%d of 30)",
                100.0 * static_cast<double>(correct) / 30, static_cast<int>(correct));
  CHECK(s.to_string().find("30 examples in ") == 0);
  CHECK(s.to_string().find(accuracy) != std::string::npos);
  CHECK(s.attributes().size() == 3);  // examples, samples_per_second, accuracy
  CHECK(s.attributes().at("accuracy") == s.accuracy());
  CHECK(read_column(out, "target", kInt64).to_vector<int64_t>() == yv);
  CHECK(read_column(out, "index", kInt64).to_vector<int64_t>() == arange(30, kInt64).to_vector<int64_t>());
  auto f = data::Hdf5File::open(out.string());
  CHECK(f->string_attribute("note").value() == "by hand");
  CHECK_FALSE(has_temporary_files(dir.path()));
}

TEST_CASE("predict_batches: a language model's perplexity is exp of its mean next-token cross-entropy") {
  // Token t's logits are row t of a table: the model predicts from the current token alone.
  Generator g(4);
  const Tensor table = randn({6, 6}, kFloat32, &g);
  const Tensor tokens = randint(0, 6, {9, 5}, kInt64, &g), targets = randint(0, 6, {9, 5}, kInt64, &g);
  auto set = std::make_shared<data::TensorDataset>(tokens, targets);
  data::DataLoader loader(set, data::DataLoaderOptions().batch_size(4));
  const data::PredictionSummary s = data::predict_batches(
      [&](const Tensor& b) {
        return table.index_select(0, b.reshape({-1})).reshape({b.size(0), b.size(1), 6});
      },
      loader);
  const std::vector<float> t = table.to_vector<float>();
  const std::vector<int64_t> in = tokens.to_vector<int64_t>(), out = targets.to_vector<int64_t>();
  double nll = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const float* l = t.data() + in[i] * 6;
    double sum = 0;
    for (int k = 0; k < 6; ++k) sum += std::exp(static_cast<double>(l[k]));
    nll += std::log(sum) - l[out[i]];
  }
  CHECK(s.scored == 45);
  CHECK(s.perplexity() == doctest::Approx(std::exp(nll / 45)).epsilon(1e-5));
  CHECK(s.sequences);
  CHECK(s.to_string().find("perplexity") != std::string::npos);
  CHECK(s.to_string().find("over 45 tokens") != std::string::npos);
  CHECK(s.attributes().at("perplexity") == s.perplexity());
}

TEST_CASE("PredictionFile: refuses to replace, checks shapes and rows, and leaves nothing half-written") {
  ScratchDir dir("prediction_file");
  const fs::path out = dir.path() / "p.h5";
  std::ofstream(out) << "precious";
  CHECK_THROWS_WITH(data::PredictionFile(out.string(), 4, false, false), doctest::Contains("exists"));
  auto batch = [](int64_t b, int64_t width) {
    data::BatchPredictions p;
    p.classes = zeros({b, width}, kInt64);
    p.probabilities = ones({b, width}, kFloat32);
    for (int64_t i = 0; i < b; ++i) p.indices.push_back(i);
    return p;
  };
  {
    data::PredictionFile file(out.string(), 4, false, true);
    file.append(batch(3, 2));
    CHECK_THROWS_WITH(file.append(batch(1, 3)), doctest::Contains("does not continue rows of shape [2]"));
    CHECK_THROWS_WITH(file.append(batch(2, 2)), doctest::Contains("5 rows arrived for a file of 4"));
    CHECK_THROWS_WITH(file.finish({}, {}), doctest::Contains("3 of 4 rows were written"));
  }  // never finished: the old file stays, the temporary one goes
  CHECK(read_text(out) == "precious");
  CHECK_FALSE(has_temporary_files(dir.path()));
}

TEST_CASE("open_prediction_data and check_model_takes: errors name the file and the shapes") {
  ScratchDir dir("prediction_data");
  const fs::path images = dir.path() / "images.h5", text = dir.path() / "text.h5";
  data::DatasetInfo info;
  data::write_image_dataset(images.string(), zeros({3, 1, 4, 4}, kUInt8), zeros({3}, kInt64), info);
  info.vocab = {"a", "b"};
  data::write_token_dataset(text.string(), zeros({10}, kInt64), info);
  CHECK_THROWS_WITH(data::open_prediction_data((dir.path() / "nope.h5").string(), {}),
                    doctest::Contains("nope.h5: no such file"));
  CHECK_THROWS_WITH(data::open_prediction_data(text.string(), {}),
                    doctest::Contains("holds tokens, but the model is an image model"));
  CHECK_THROWS_WITH(data::open_prediction_data(images.string(), {.context = 4}),
                    doctest::Contains("holds images, but the model is a language model"));
  CHECK_THROWS_WITH(data::open_prediction_data(text.string(), {.context = 12}),
                    doctest::Contains("10 tokens, fewer than one window of the model's context 12 + 1"));
  CHECK_THROWS_WITH(data::open_prediction_data(text.string(), {.context = 3, .vocab = 1}),
                    doctest::Contains("a vocabulary of 2 tokens, but the model knows 1"));
  const data::PredictionData windows = data::open_prediction_data(text.string(), {.context = 3, .vocab = 2});
  CHECK(windows.dataset->size() == 3);  // tokens [0, 4), [3, 7), [6, 10)
  const data::PredictionData d =
      data::open_prediction_data(images.string(), {.mean = {0.5f}, .std = {0.25f}});
  CHECK(d.description == "3 images 1x4x4, 1 classes");
  data::SampleRng rng(0, 0, 0);
  CHECK(d.transform->apply(d.dataset->get(0), rng).data.sum().item<double>() == doctest::Approx(-2.0 * 16));
  const Tensor w = ones({9, 2});
  CHECK_THROWS_WITH(
      data::check_model_takes(
          [&](const Tensor& x) {
            return x.reshape({x.size(0), -1}).matmul(w);
          },
          d, "--data images.h5"),
      doctest::Contains("--data images.h5 holds examples of shape [1, 4, 4] (images), which the model "
                        "does not take"));
}

}  // namespace
}  // namespace loom::test
