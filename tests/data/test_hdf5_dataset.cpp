/*
 * Hdf5ImageDataset and Hdf5TokenDataset on files Loom writes: every layout the reader handles
 * (gzip chunks read raw and inflated outside the HDF5 lock, uncompressed chunks, contiguous
 * storage read by hyperslab), samples and slices checked pixel by pixel against what was
 * written, the attributes round trip, the decoded-chunk cache's hit counts, and concurrent
 * readers.
 */
#include <thread>

#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;
using loom::test::pixel;

namespace {

void check_image(const Tensor& image, int64_t i, int64_t c, int64_t h, int64_t w) {
  REQUIRE(image.sizes() == IntArrayRef{c, h, w});
  REQUIRE(image.dtype() == kUInt8);
  const uint8_t* p = image.contiguous().data_ptr<uint8_t>();
  int64_t bad = 0;
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) bad += *p++ != pixel(i, k, y, x);
  CHECK_MESSAGE(bad == 0, "image ", i, ": ", bad, " pixels differ");
}

}  // namespace

TEST_CASE("image datasets read back exactly in every storage layout") {
  test::ScratchDir dir("layouts");
  struct Layout {
    const char* name;
    WriteOptions options;
    bool raw;  // expected fast path
  };
  for (const Layout& layout : {Layout{"gzip", {.chunk_rows = 16, .deflate_level = 6}, true},
                               Layout{"raw chunks", {.chunk_rows = 7, .deflate_level = 0}, true},
                               Layout{"contiguous", {.chunk_rows = 0, .deflate_level = 0}, false}}) {
    CAPTURE(layout.name);
    // 100 images: the last chunk is partial in the chunked layouts.
    const std::string path =
        test::write_synthetic(dir, std::string(layout.name) + ".h5", 100, 3, 5, 6, layout.options);
    Hdf5ImageDataset ds(path);
    CHECK(ds.size() == 100);
    CHECK(ds.channels() == 3);
    CHECK(ds.height() == 5);
    CHECK(ds.width() == 6);
    CHECK(ds.num_classes() == 10);
    CHECK(ds.raw_chunks() == layout.raw);
    for (int64_t i : {0, 1, 15, 16, 63, 98, 99}) {
      Example e = ds.get(i);
      check_image(e.data, i, 3, 5, 6);
      CHECK(e.target.dtype() == kInt64);
      CHECK(e.target.dim() == 0);
      CHECK(e.target.item<int64_t>() == i % 10);
    }
    // A slice across chunk boundaries, through the cache and by hyperslab.
    Tensor slice = ds.images(10, 40), direct = ds.images_hyperslab(10, 40);
    REQUIRE(slice.sizes() == IntArrayRef{30, 3, 5, 6});
    for (int64_t i = 0; i < 30; ++i) check_image(slice[i], 10 + i, 3, 5, 6);
    CHECK(test::values_equal(slice, direct));
    CHECK(ds.labels().to_vector<int64_t>()[37] == 7);
  }
}

TEST_CASE("attributes describe the dataset and round trip") {
  test::ScratchDir dir("attrs");
  auto [x, y] = test::synthetic_images(20, 1, 4, 4, 3);
  DatasetInfo info;
  info.name = "tiny";
  info.split = "train";
  info.source = "made by a test";
  info.license = "CC0";
  info.description = "twenty images";
  info.version = 3;
  info.class_names = {"zero", "one", "two"};
  write_image_dataset(dir.file("a.h5"), x, y, info);
  Hdf5ImageDataset ds(dir.file("a.h5"));
  const DatasetInfo& got = ds.info();
  CHECK(got.kind == "images");
  CHECK(got.name == "tiny");
  CHECK(got.split == "train");
  CHECK(got.source == "made by a test");
  CHECK(got.license == "CC0");
  CHECK(got.description == "twenty images");
  CHECK(got.version == 3);
  CHECK(got.layout_version == kLayoutVersion);
  CHECK(got.class_names == std::vector<std::string>{"zero", "one", "two"});
  CHECK(ds.num_classes() == 3);
  // No temporary file is left beside the written one.
  int files = 0;
  for (auto& entry : std::filesystem::directory_iterator(dir.path())) files += entry.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("the decoded-chunk cache reads each chunk once while it fits, and evicts beyond its budget") {
  test::ScratchDir dir("chunk_cache");
  const std::string path =
      test::write_synthetic(dir, "c.h5", 64, 1, 8, 8, {.chunk_rows = 16, .deflate_level = 1});
  Hdf5ImageDataset ds(path);
  for (int pass = 0; pass < 3; ++pass)
    for (int64_t i = 0; i < 64; ++i) (void)ds.get(i);
  CacheStats s = ds.chunk_cache_stats();
  CHECK(s.misses == 4);  // 4 chunks of 16 images, each read once
  CHECK(s.hits == 3 * 64 - 4);
  CHECK(s.entries == 4);
  CHECK(s.bytes == 64 * 64);
  CHECK(s.evictions == 0);

  // A budget of one chunk: alternating between two chunks reads each every time.
  Hdf5ImageDataset small(path, {.chunk_cache_bytes = 16 * 64});
  for (int round = 0; round < 5; ++round) {
    (void)small.get(0);
    (void)small.get(16);
  }
  CacheStats t = small.chunk_cache_stats();
  CHECK(t.misses == 10);
  CHECK(t.evictions == 9);
  CHECK(t.entries == 1);
  CHECK(t.bytes <= 16 * 64);
}

TEST_CASE("concurrent readers get the right images") {
  test::ScratchDir dir("concurrent");
  const std::string path =
      test::write_synthetic(dir, "c.h5", 500, 1, 6, 6, {.chunk_rows = 32, .deflate_level = 4});
  // A small cache, so that threads keep reading and decoding chunks at the same time.
  Hdf5ImageDataset ds(path, {.chunk_cache_bytes = 3 * 32 * 36});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t k = 0; k < 2000; ++k) {
        const int64_t i = (k * 37 + t * 101) % 500;
        Tensor img = ds.get(i).data;
        const uint8_t* p = img.data_ptr<uint8_t>();
        for (int64_t y = 0; y < 6; ++y)
          for (int64_t x = 0; x < 6; ++x) wrong += *p++ != pixel(i, 0, y, x);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
  CHECK(ds.chunk_cache_stats().evictions > 0);
}

TEST_CASE("token datasets serve blocks by stride and decode with their vocabulary") {
  test::ScratchDir dir("tokens");
  const std::string text = "abracadabra, said the cat. ";
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += text;
  CharTokens chars = tokenize_chars(corpus, "test corpus");
  CHECK(chars.vocab.size() == 13);  // " ,.abcdehirst"
  DatasetInfo info;
  info.name = "cat";
  info.vocab = chars.vocab;
  const auto n = static_cast<int64_t>(chars.tokens.size());
  write_token_dataset(dir.file("t.h5"), from_blob(chars.tokens.data(), {n}, kInt32), info,
                      {.chunk_rows = 100, .deflate_level = 1});

  Hdf5TokenDataset ds(dir.file("t.h5"), {.block_size = 40, .stride = 20});
  CHECK(ds.raw_chunks());
  CHECK(ds.num_tokens() == n);
  CHECK(ds.vocab_size() == 13);
  CHECK(ds.size() == (n - 40) / 20 + 1);
  CHECK(ds.info().kind == "tokens");
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{17}, ds.size() - 1}) {
    Example e = ds.get(i);
    REQUIRE(e.data.sizes() == IntArrayRef{40});
    CHECK(e.data.dtype() == kInt64);
    CHECK_FALSE(e.target.defined());
    CHECK(ds.decode(e.data) == corpus.substr(static_cast<size_t>(i * 20), 40));
  }
  CHECK(ds.decode(ds.tokens(0, n)) == corpus);
}

TEST_CASE("a vocabulary over 256 entries stores int32 tokens") {
  test::ScratchDir dir("bigvocab");
  DatasetInfo info;
  for (int i = 0; i < 300; ++i) info.vocab.push_back(std::string("w").append(std::to_string(i)).append(" "));
  std::vector<int64_t> ids;
  for (int i = 0; i < 5000; ++i) ids.push_back((i * 13) % 300);
  write_token_dataset(dir.file("t.h5"), tensor<int64_t>(ids), info);
  Hdf5TokenDataset ds(dir.file("t.h5"), {.block_size = 10});
  CHECK(ds.vocab_size() == 300);
  CHECK(ds.raw_chunks());
  CHECK(ds.tokens(4990, 5000).to_vector<int64_t>() == std::vector<int64_t>(ids.begin() + 4990, ids.end()));
  CHECK(ds.decode(ds.tokens(0, 2)) == "w0 w13 ");
}
