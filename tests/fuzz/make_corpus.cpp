/*
 * Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/): small, valid files of
 * every kind each loader reads, written by Loom's own writers, so that the fuzzer starts from
 * inputs that pass every check and mutates inward from there.
 *
 *   fuzz_make_corpus OUT_DIR     (docs/fuzzing.md: regenerating the corpora)
 *
 * Everything is deterministic (fixed seeds, no timestamps in the files), so regenerating
 * gives the same bytes except where HDF5 itself records times (Loom's writer does not).
 */
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset_writer.h"
#include "nn/serialize/safetensors.h"
#include "ops/ops.h"
#include "quant/kernels/int8_conv2d.h"
#include "quant/kernels/int8_linear.h"
#include "quant/quantized_model.h"
#include "tools/train/options.h"

namespace fs = std::filesystem;
using namespace loom;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  LOOM_CHECK(out.good(), "make_corpus: cannot write ", path.string());
}

void safetensors_seeds(const fs::path& dir) {
  manual_seed(1);
  // Every dtype the loader reads, 0-dim, empty and multi-dim shapes, and metadata.
  nn::save_safetensors(dir / "mixed.safetensors",
                       {{"weight", randn({2, 3})},
                        {"bias", randn({3}).to(kFloat64)},
                        {"half", randn({2, 2}).to(kFloat16)},
                        {"brain", randn({3}).to(kBFloat16)},
                        {"step", tensor<int64_t>({7})},
                        {"ids", tensor<int32_t>({1, -2, 3}, {3})},
                        {"codes", tensor<int8_t>({-1, 2}, {2})},
                        {"bytes", tensor<uint8_t>({0, 255}, {2})},
                        {"mask", tensor<bool>({true, false, true}, {3})},
                        {"none", empty({0, 4})}},
                       {{"format", "pt"}, {"note", "fuzz seed"}});
  nn::save_safetensors(dir / "empty.safetensors", {});
  nn::save_safetensors(dir / "one.safetensors", {{"x", randn({4, 1, 2})}});
}

// A two-layer int8 MLP [N, 8] -> [N, 3] and a small int8 CNN [N, 1, 6, 6] -> [N, 3], built
// from the kernels directly (no calibration needed for a seed).
void quantized_seeds(const fs::path& dir) {
  manual_seed(2);
  using quant::QuantizedModel;
  using Kind = QuantizedModel::Stage::Kind;
  auto int8_weight = [](std::vector<int64_t> shape) { return randint(-127, 128, shape).to(kInt8); };
  const quant::Int8Output u8_relu{.dtype = kUInt8, .scale = 0.05f, .zero_point = 0, .relu = true};
  const quant::Int8Output f32{};
  {
    std::vector<QuantizedModel::Stage> stages(2);
    stages[0].kind = Kind::Linear;
    stages[0].source = "fc1 + relu";
    stages[0].linear = std::make_shared<quant::Int8Linear>(int8_weight({6, 8}), full({6}, 0.01), randn({6}),
                                                           0.02f, 128, u8_relu);
    stages[1].kind = Kind::Linear;
    stages[1].source = "fc2";
    stages[1].linear =
        std::make_shared<quant::Int8Linear>(int8_weight({3, 6}), full({1}, 0.02), Tensor(), 0.05f, 0, f32);
    QuantizedModel(std::move(stages), {{"loom.model", "mlp"}}).save(dir / "mlp.int8.safetensors");
  }
  {
    std::vector<QuantizedModel::Stage> stages(5);
    stages[0].kind = Kind::Conv2d;
    stages[0].source = "conv + relu";
    stages[0].conv = std::make_shared<quant::Int8Conv2d>(
        int8_weight({2, 1, 3, 3}), full({2}, 0.01), randn({2}), 0.02f, 128,
        quant::Int8ConvOptions{.pad_h = 1, .pad_w = 1, .channels_last_output = true}, u8_relu);
    stages[1].kind = Kind::MaxPool2d;
    stages[1].pool_kernel = 2;
    stages[1].pool_stride = 2;
    stages[2].kind = Kind::Flatten;
    stages[3].kind = Kind::Linear;
    stages[3].source = "fc";
    stages[3].linear =
        std::make_shared<quant::Int8Linear>(int8_weight({3, 18}), full({3}, 0.02), randn({3}), 0.05f, 0, f32);
    stages[4].kind = Kind::ReLU;
    QuantizedModel(std::move(stages)).save(dir / "cnn.int8.safetensors");
  }
}

void hdf5_seeds(const fs::path& dir) {
  manual_seed(3);
  data::DatasetInfo images_info;
  images_info.name = "fuzz";
  images_info.class_names = {"zero", "one", "two"};
  const Tensor images = randint(0, 256, {5, 1, 4, 4}).to(kUInt8);
  const Tensor labels = tensor<int64_t>({0, 1, 2, 1, 0}, {5});
  // Chunked and deflated (the raw-chunk path), and contiguous (the hyperslab path).
  data::write_image_dataset((dir / "images_deflate.h5").string(), images, labels, images_info,
                            {.chunk_rows = 2, .deflate_level = 1});
  data::write_image_dataset((dir / "images_plain.h5").string(), images, labels, images_info,
                            {.chunk_rows = 0, .deflate_level = 0});
  data::DatasetInfo tokens_info;
  tokens_info.name = "fuzz";
  tokens_info.vocab = {"a", "b", " ", "\n"};
  const Tensor tokens = randint(0, 4, {23}).to(kInt64);
  data::write_token_dataset((dir / "tokens_deflate.h5").string(), tokens, tokens_info,
                            {.chunk_rows = 8, .deflate_level = 1});
  data::write_token_dataset((dir / "tokens_plain.h5").string(), tokens, tokens_info,
                            {.chunk_rows = 0, .deflate_level = 0});
}

void config_seeds(const fs::path& dir) {
  train::TrainOptions mlp;
  mlp.data = "train.h5";
  mlp.val = "test.h5";
  write_text(dir / "mlp.json", train::to_json(mlp).dump(2));
  train::TrainOptions gpt;
  gpt.model = train::ModelKind::kGpt;
  gpt.data = "corpus.h5";
  gpt.optimizer = train::OptimizerKind::kAdamW;
  gpt.amp = train::AmpMode::kBf16;
  gpt.dp = 2;
  gpt.teacher = "teacher.safetensors";
  write_text(dir / "gpt.json", train::to_json(gpt).dump());
  write_text(dir / "small.json", R"({"model": "cnn", "epochs": 2, "force": true, "hidden": "16,8"})");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_corpus OUT_DIR (writes OUT_DIR/<target>/...)\n";
    return 2;
  }
  try {
    const fs::path out = argv[1];
    const std::map<std::string, void (*)(const fs::path&)> targets = {{"safetensors", safetensors_seeds},
                                                                      {"quantized_model", quantized_seeds},
                                                                      {"hdf5", hdf5_seeds},
                                                                      {"config", config_seeds}};
    for (const auto& [name, write] : targets) {
      fs::create_directories(out / name);
      write(out / name);
    }
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
