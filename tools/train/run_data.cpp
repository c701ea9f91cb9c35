/* The data of a `train` run (see run_data.h). */
#include "tools/train/run_data.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "ops/ops.h"
#include "tools/train/fail.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

bool is_token_file(const std::string& path, const char* flag) {
  if (!fs::exists(path)) fail(std::string(flag) + " " + path + ": no such file (make one with make_dataset)");
  auto file = data::Hdf5File::open(path);
  if (file->has_dataset("tokens")) return true;
  if (file->has_dataset("images")) return false;
  fail(std::string(flag) + " " + path +
       ": neither /images nor /tokens in it; is it a file from make_dataset?");
}

// Per-channel mean and std of (up to) the first 10,000 training images in [0, 1], so that the
// model sees inputs of mean 0 and std 1 whatever the dataset (Fashion-MNIST: 0.286, 0.353).
std::pair<std::vector<float>, std::vector<float>> channel_stats(const data::Hdf5ImageDataset& set) {
  int64_t n = std::min<int64_t>(set.size(), 10000);
  Tensor x = set.images(0, n).to(DType::Float32).div(255.0);
  x = x.reshape({n, set.channels(), set.height() * set.width()});
  Tensor mean = x.mean({0, 2}), std = x.std({0, 2});
  std::vector<float> m, s;
  for (int64_t c = 0; c < set.channels(); ++c) {
    m.push_back(static_cast<float>(mean.select(0, c).item<double>()));
    s.push_back(std::max(1e-3f, static_cast<float>(std.select(0, c).item<double>())));
  }
  return {m, s};
}

Data open_data(const TrainOptions& o) {
  Data d;
  d.tokens = is_token_file(o.data, "--data");
  if (!o.val.empty() && is_token_file(o.val, "--val") != d.tokens)
    fail("--val " + o.val + " holds " + (d.tokens ? "images" : "tokens") + " but --data holds " +
         (d.tokens ? "tokens" : "images"));
  const bool gpt = o.model == ModelKind::kGpt;
  if (d.tokens != gpt)
    fail("--model " + std::string(to_string(o.model)) + " needs " + (gpt ? "a token" : "an image") +
         " dataset, but " + o.data + " holds " +
         (d.tokens ? "tokens (use --model gpt)" : "images (use --model mlp, cnn or resnet)"));
  if (d.tokens) {
    // Training examples are 2T-token blocks every T tokens, cut by RandomTokenWindow into a
    // random T-token input and its next-token target; validation blocks are exactly T + 1 tokens,
    // so their windows are fixed.
    //
    // --windows random instead makes every start position an example (T + 1 tokens, stride 1)
    // and draws an epoch's windows from them with replacement, as nanoGPT does (trainer.cpp's
    // sampler); an epoch is then as long as asked, whatever the text's length.
    const int64_t t = o.context;
    const bool random = o.windows == TextWindows::kRandom;
    auto train = std::make_shared<data::Hdf5TokenDataset>(
        o.data, random ? data::Hdf5TokenOptions{.block_size = t + 1, .stride = 1}
                       : data::Hdf5TokenOptions{.block_size = 2 * t, .stride = t});
    d.vocab = train->vocab_size();
    d.train = train;
    d.train_transform = std::make_shared<data::RandomTokenWindow>(t);
    if (random) d.random_windows = o.windows_per_epoch > 0 ? o.windows_per_epoch : train->num_tokens() / t;
    if (!o.val.empty()) {
      auto val = std::make_shared<data::Hdf5TokenDataset>(
          o.val, data::Hdf5TokenOptions{.block_size = t + 1, .stride = t});
      if (val->vocab_size() != d.vocab)
        fail("--val " + o.val + " has a vocabulary of " + std::to_string(val->vocab_size()) +
             " tokens, --data " + std::to_string(d.vocab));
      d.val = val;
      d.val_transform = std::make_shared<data::RandomTokenWindow>(t);
    }
    return d;
  }
  auto train = std::make_shared<data::Hdf5ImageDataset>(o.data);
  d.channels = train->channels();
  d.height = train->height();
  d.width = train->width();
  d.classes = train->num_classes();
  std::tie(d.mean, d.std) = channel_stats(*train);
  d.train_transform = d.val_transform = std::make_shared<data::Normalize>(d.mean, d.std);
  d.train = train;
  if (!o.val.empty()) {
    auto val = std::make_shared<data::Hdf5ImageDataset>(o.val);
    if (val->channels() != d.channels || val->height() != d.height || val->width() != d.width)
      fail("--val " + o.val + " holds images of another shape than --data " + o.data);
    d.val = val;
  }
  return d;
}

}  // namespace

Data load_data(const TrainOptions& o) {
  Data d = open_data(o);
  if (o.train_examples > 0) {
    if (o.train_examples > d.train->size())
      fail("--train-examples " + std::to_string(o.train_examples) + ": " + o.data + " holds only " +
           std::to_string(d.train->size()) + " training examples");
    d.train = std::make_shared<data::Subset>(d.train, o.train_examples);
  }
  return d;
}

}  // namespace loom::train
