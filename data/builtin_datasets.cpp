/* Converting Debian's Fashion-MNIST and King James Bible to HDF5 (see builtin_datasets.h). */
#include "data/builtin_datasets.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/hdf5_file.h"
#include "data/idx_reader.h"
#include "data/text_corpus.h"
#include "ops/ops.h"

namespace loom::data {

namespace {

// True when `path` is a conversion by the current converter (name, split and version match).
bool up_to_date(const std::string& path, const std::string& name, const std::string& split, int64_t version) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    auto file = Hdf5File::open(path);
    DatasetInfo info = read_dataset_info(*file);
    return info.layout_version == kLayoutVersion && info.name == name && info.split == split &&
           info.version == version;
  } catch (const Error&) {
    return false;  // unreadable: convert again
  }
}

}  // namespace

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

void convert_fashion_mnist(const std::string& split, const std::string& out_path, const WriteOptions& options,
                           const std::string& source_dir) {
  LOOM_CHECK(split == "train" || split == "test", "Fashion-MNIST: split must be 'train' or 'test', got '",
             split, "'");
  const std::string prefix = source_dir + "/" + (split == "train" ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz",
                    labels_path = prefix + "-labels-idx1-ubyte.gz";
  std::error_code ec;
  LOOM_CHECK(std::filesystem::exists(images_path, ec) && std::filesystem::exists(labels_path, ec),
             "Fashion-MNIST: ", images_path,
             " not found: install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)");
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  LOOM_CHECK(images.dims.size() == 3, images_path, ": expected images [N, 28, 28], got ", images.dims.size(),
             " dims");
  LOOM_CHECK(labels.dims.size() == 1 && labels.dims[0] == images.dims[0], labels_path, ": expected ",
             images.dims[0], " labels");
  const int64_t n = images.dims[0];
  Tensor x = from_blob(images.data.data(), {n, 1, images.dims[1], images.dims[2]}, kUInt8);
  Tensor y = from_blob(labels.data.data(), {n}, kUInt8);
  DatasetInfo info;
  info.name = "fashion-mnist";
  info.split = split;
  info.source = images_path + ", " + labels_path + " (Debian package dataset-fashion-mnist)";
  info.license = "MIT (Zalando Research)";
  info.description = "Fashion-MNIST: 28x28 grayscale images of clothes in 10 classes";
  info.version = kFashionMnistVersion;
  info.class_names = fashion_mnist_classes();
  write_image_dataset(out_path, x, y, info, options);
}

std::string fashion_mnist_hdf5(const std::string& split, const std::string& dir, const WriteOptions& options,
                               const std::string& source_dir) {
  const WriteOptions defaults;
  std::string name = "fashion-mnist-" + split;
  if (options.chunk_rows != defaults.chunk_rows || options.deflate_level != defaults.deflate_level)
    name +=
        "-chunk" + std::to_string(options.chunk_rows) + "-deflate" + std::to_string(options.deflate_level);
  const std::string path = (std::filesystem::path(dir) / (name + ".h5")).string();
  if (!up_to_date(path, "fashion-mnist", split, kFashionMnistVersion))
    convert_fashion_mnist(split, path, options, source_dir);
  return path;
}

void convert_kjv(const std::string& out_path, const std::string& bible, const std::string& data_dir) {
  const std::string text = kjv_text(bible, data_dir);
  CharTokens chars = tokenize_chars(text, "the King James Bible");
  DatasetInfo info;
  info.name = "kjv";
  info.split = "all";
  info.source = "bible -p " + data_dir +
                " Gen1:1-Rev22:21 (Debian packages bible-kjv, bible-kjv-text), verse "
                "references stripped, one verse per line";
  info.license = "public domain";
  info.description = "The King James Bible as character tokens";
  info.version = kKjvVersion;
  info.vocab = chars.vocab;
  const auto n = static_cast<int64_t>(chars.tokens.size());
  write_token_dataset(out_path, from_blob(chars.tokens.data(), {n}, kInt32), info);
}

std::string kjv_hdf5(const std::string& dir, const std::string& bible, const std::string& data_dir) {
  const std::string path = (std::filesystem::path(dir) / "kjv.h5").string();
  if (!up_to_date(path, "kjv", "all", kKjvVersion)) convert_kjv(path, bible, data_dir);
  return path;
}

void convert_text_file(const std::string& text_path, const std::string& out_path, const std::string& name) {
  std::ifstream in(text_path, std::ios::binary);
  LOOM_CHECK(in.good(), text_path, ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  LOOM_CHECK(!text.empty(), text_path, ": the file is empty");
  CharTokens chars = tokenize_chars(text, text_path);
  DatasetInfo info;
  info.name = name;
  info.split = "all";
  info.source = text_path;
  info.version = 1;
  info.vocab = chars.vocab;
  const auto n = static_cast<int64_t>(chars.tokens.size());
  write_token_dataset(out_path, from_blob(chars.tokens.data(), {n}, kInt32), info);
}

}  // namespace loom::data
