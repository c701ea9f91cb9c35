/*
 * Bad input never crashes or hangs: each broken file gives a loom::Error that names the file,
 * the dataset and the problem. Missing file, not HDF5, missing dataset, wrong element type or
 * rank, labels of the wrong length or out of range, an empty dataset, a truncated file, a
 * corrupted compressed chunk, tokens outside the vocabulary, a missing vocabulary.
 */
#include <fstream>

#include "data/hdf5_check.h"
#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;
using test::contains_all;
using test::error_of;

namespace {

// A file with `images` and `labels` datasets of the given types and shapes (values: zeros and
// the label pattern), written directly with Hdf5File so that it can be wrong.
std::string write_raw(const test::ScratchDir& dir, const std::string& name, DType image_dtype,
                      std::vector<int64_t> image_dims, DType label_dtype, std::vector<int64_t> labels,
                      std::vector<std::string> class_names = {}) {
  const std::string path = dir.file(name);
  auto file = Hdf5File::create(path);
  int64_t n = 1;
  for (int64_t d : image_dims) n *= d;
  std::vector<uint8_t> zeros(static_cast<size_t>(n) * dtype_size(image_dtype), 0);
  file->write_dataset("images", image_dtype, image_dims, zeros.data());
  Tensor y = tensor<int64_t>(labels).to(label_dtype);
  file->write_dataset("labels", label_dtype, {static_cast<int64_t>(labels.size())}, y.data_ptr());
  if (!class_names.empty()) file->write_attribute("class_names", class_names);
  file->close();
  return path;
}

std::vector<int64_t> iota(int64_t n, int64_t mod) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i % mod);
  return v;
}

}  // namespace

TEST_CASE("a missing file or a file that is not HDF5 is named") {
  test::ScratchDir dir("missing");
  const std::string missing = dir.file("nope.h5");
  CHECK(contains_all(error_of([&] { Hdf5ImageDataset ds(missing); }), {missing, "no such file"}));
  CHECK(contains_all(error_of([&] { Hdf5TokenDataset ds(missing, {.block_size = 4}); }),
                     {missing, "no such file"}));
  const std::string text = dir.file("text.h5");
  std::ofstream(text) << "this is not an HDF5 file\n";
  CHECK(contains_all(error_of([&] { Hdf5ImageDataset ds(text); }), {text, "not an HDF5 file"}));
}

TEST_CASE("a missing dataset is named, with the datasets the file does have") {
  test::ScratchDir dir("noset");
  const std::string path = test::write_synthetic(dir, "a.h5", 10);
  const std::string msg = error_of([&] { Hdf5ImageDataset ds(path, {.images = "pictures"}); });
  CHECK(contains_all(msg, {path, "no dataset 'pictures'", "'images'", "'labels'"}));
  CHECK(
      contains_all(error_of([&] { Hdf5ImageDataset ds(path, {.labels = "classes"}); }), {path, "'classes'"}));
  CHECK(contains_all(error_of([&] { Hdf5TokenDataset ds(path, {.block_size = 4}); }),
                     {path, "no dataset 'tokens'"}));
}

TEST_CASE("wrong element types and ranks are named") {
  test::ScratchDir dir("types");
  const auto labels = iota(10, 3);
  std::string p = write_raw(dir, "float.h5", kFloat32, {10, 1, 4, 4}, kUInt8, labels);
  CHECK(
      contains_all(error_of([&] { Hdf5ImageDataset ds(p); }), {p, "'images'", "expected uint8", "float32"}));
  p = write_raw(dir, "int8.h5", kInt8, {10, 1, 4, 4}, kUInt8, labels);
  CHECK(contains_all(error_of([&] { Hdf5ImageDataset ds(p); }), {p, "'images'", "int8"}));
  p = write_raw(dir, "rank2.h5", kUInt8, {10, 16}, kUInt8, labels);
  CHECK(contains_all(error_of([&] { Hdf5ImageDataset ds(p); }), {p, "'images'", "rank 2"}));
  p = write_raw(dir, "rank5.h5", kUInt8, {10, 1, 1, 4, 4}, kUInt8, labels);
  CHECK(contains_all(error_of([&] { Hdf5ImageDataset ds(p); }), {p, "'images'", "rank 5"}));
  p = write_raw(dir, "float_labels.h5", kUInt8, {10, 1, 4, 4}, kFloat32, labels);
  CHECK(
      contains_all(error_of([&] { Hdf5ImageDataset ds(p); }), {p, "'labels'", "integer labels", "float32"}));
  // Rank 3 [N, H, W] is one channel, not an error.
  p = write_raw(dir, "rank3.h5", kUInt8, {10, 4, 5}, kInt32, labels);
  Hdf5ImageDataset ok(p);
  CHECK(ok.get(3).data.sizes() == IntArrayRef{1, 4, 5});
}

TEST_CASE("labels of the wrong length or out of range are named with the offending image") {
  test::ScratchDir dir("labels");
  std::string p = write_raw(dir, "short.h5", kUInt8, {10, 1, 4, 4}, kUInt8, iota(9, 3));
  CHECK(contains_all(error_of([&] { Hdf5ImageDataset ds(p); }), {p, "'labels'", "9 labels for 10 images"}));
  auto labels = iota(10, 3);
  labels[6] = 5;
  p = write_raw(dir, "range.h5", kUInt8, {10, 1, 4, 4}, kUInt8, labels, {"a", "b", "c"});
  CHECK(contains_all(error_of([&] { Hdf5ImageDataset ds(p); }),
                     {p, "'labels'", "label 5 of image 6", "out of range [0, 3)"}));
  labels[6] = -1;
  p = write_raw(dir, "negative.h5", kUInt8, {10, 1, 4, 4}, kInt32, labels);
  CHECK(contains_all(error_of([&] { Hdf5ImageDataset ds(p); }), {p, "label -1 of image 6"}));
}

TEST_CASE("an empty dataset is an error, not a loader that yields nothing") {
  test::ScratchDir dir("empty");
  const std::string p = write_raw(dir, "empty.h5", kUInt8, {0, 1, 4, 4}, kUInt8, {});
  CHECK(contains_all(error_of([&] { Hdf5ImageDataset ds(p); }), {p, "'images'", "empty"}));
  auto file = Hdf5File::create(dir.file("tokens.h5"));
  file->write_dataset("tokens", kUInt8, {0}, nullptr);
  file->write_attribute("vocab_size", int64_t{5});
  file->close();
  CHECK(contains_all(error_of([&] { Hdf5TokenDataset ds(dir.file("tokens.h5"), {.block_size = 4}); }),
                     {"tokens.h5", "'tokens'", "empty"}));
  CHECK(contains_all(error_of([&] {
                       data::DataLoader loader(std::make_shared<TensorDataset>(zeros({0, 3})));
                     }),
                     {"DataLoader", "empty"}));
}

TEST_CASE("a truncated file is named, at any length") {
  test::ScratchDir dir("truncated");
  const std::string good =
      test::write_synthetic(dir, "good.h5", 200, 1, 8, 8, {.chunk_rows = 16, .deflate_level = 1});
  const auto size = static_cast<int64_t>(std::filesystem::file_size(good));
  for (int64_t keep : {int64_t{0}, int64_t{7}, int64_t{100}, size / 3, size / 2, size - 200, size - 1}) {
    CAPTURE(keep);
    const std::string cut = dir.file("cut.h5");
    std::filesystem::copy_file(good, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, static_cast<uintmax_t>(keep));
    const std::string msg = error_of([&] {
      Hdf5ImageDataset ds(cut);
      for (int64_t i = 0; i < ds.size(); ++i) (void)ds.get(i);
    });
    CHECK(contains_all(msg, {cut}));
  }
}

TEST_CASE("a corrupted compressed chunk is named with its dataset and chunk") {
  test::ScratchDir dir("corrupt");
  const std::string path =
      test::write_synthetic(dir, "c.h5", 64, 1, 16, 16, {.chunk_rows = 16, .deflate_level = 6});
  // Where chunk 2 (images 32..47) is stored, from HDF5 itself.
  haddr_t address = 0;
  hsize_t stored = 0;
  {
    Hdf5Lock lock;
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "images", H5P_DEFAULT);
    hsize_t offset[4] = {0};
    unsigned mask = 0;
    hid_t space = H5Dget_space(d);
    REQUIRE(H5Dget_chunk_info(d, space, 2, offset, &mask, &address, &stored) >= 0);
    CHECK(offset[0] == 32);
    H5Sclose(space);
    H5Dclose(d);
    H5Fclose(f);
  }
  for (hsize_t k = stored / 4; k < stored / 2; ++k)
    test::corrupt_byte(path, static_cast<std::streamoff>(address + k));
  Hdf5ImageDataset ds(path);
  CHECK(ds.raw_chunks());
  CHECK(ds.get(5).data.defined());  // other chunks are fine
  const std::string msg = error_of([&] { (void)ds.get(40); });
  CHECK(contains_all(msg, {path, "'images'", "chunk 2", "deflate stream is corrupt"}));
  // Not cached as good: asking again fails again.
  CHECK(contains_all(error_of([&] { (void)ds.get(33); }), {"chunk 2"}));
}

TEST_CASE("tokens outside the vocabulary, or no vocabulary, are named") {
  test::ScratchDir dir("vocab");
  std::vector<uint8_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint8_t>(i % 5);
  tokens[777] = 9;
  {
    auto file = Hdf5File::create(dir.file("t.h5"));
    file->write_dataset("tokens", kUInt8, {1000}, tokens.data(), 256, 1);
    file->write_attribute("vocab_size", int64_t{5});
    file->close();
  }
  Hdf5TokenDataset ds(dir.file("t.h5"), {.block_size = 10});
  CHECK(ds.get(0).data.to_vector<int64_t>()[4] == 4);
  CHECK(contains_all(error_of([&] { (void)ds.get(77); }),
                     {"t.h5", "'tokens'", "token 9 at position 777", "outside the vocabulary [0, 5)"}));
  {
    auto file = Hdf5File::create(dir.file("novocab.h5"));
    file->write_dataset("tokens", kUInt8, {1000}, tokens.data());
    file->close();
  }
  CHECK(contains_all(error_of([&] { Hdf5TokenDataset d(dir.file("novocab.h5"), {.block_size = 10}); }),
                     {"novocab.h5", "no vocabulary"}));
  CHECK(contains_all(error_of([&] { Hdf5TokenDataset d(dir.file("t.h5"), {.block_size = 2000}); }),
                     {"t.h5", "shorter than one block"}));
}

TEST_CASE("HDF5 failures carry HDF5's own error stack and the call site") {
  test::ScratchDir dir("stack");
  const std::string path = test::write_synthetic(dir, "a.h5", 10);
  auto file = Hdf5File::open(path);
  // An attribute of the wrong type: a string read as an integer.
  CHECK(contains_all(error_of([&] { (void)file->int_attribute("name"); }),
                     {path, "'name'", "should be an integer"}));
  // A raw HDF5 failure through the macro: the call, the context, HDF5's reason, file:line.
  const std::string msg = error_of([&] {
    Hdf5Lock lock;
    LOOM_HDF5_CHECK(H5Dopen2(file->id(), "nothing", H5P_DEFAULT), path, ": dataset 'nothing'");
  });
  CHECK(contains_all(msg, {path, "dataset 'nothing'", "H5Dopen2", "failed", "test_bad_input.cpp"}));
}
