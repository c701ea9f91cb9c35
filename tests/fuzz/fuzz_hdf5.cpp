/*
 * libFuzzer target: the data layer's HDF5 datasets on arbitrary file bytes (docs/fuzzing.md).
 *
 * The bytes become a file (on tmpfs: the datasets open files by path) that is opened both as
 * an image dataset and as a token dataset; whichever opens reads its first, middle and last
 * examples through the chunk cache and a few rows by hyperslab, so both read paths (raw chunks
 * inflated by Loom, and H5Dread) see the hostile layout. Most inputs fail inside libhdf5's
 * own parser: what this target checks is that every such failure reaches the caller as
 * loom::Error, and that what Loom does with the numbers libhdf5 hands back (dimensions, chunk
 * sizes, filter parameters) cannot make it allocate more than the file could hold.
 */
#include <algorithm>
#include <cstdint>
#include <string>

#include "data/hdf5_image_dataset.h"
#include "data/hdf5_token_dataset.h"
#include "fuzz_util.h"

namespace {

using namespace loom;

// A small cache, so that reading a few examples also exercises eviction.
constexpr size_t kCacheBytes = size_t{1} << 16;

void read_images(const std::string& path) {
  data::Hdf5ImageOptions options;
  options.chunk_cache_bytes = kCacheBytes;
  data::Hdf5ImageDataset ds(path, options);
  double total = static_cast<double>(ds.num_classes());
  const int64_t n = ds.size();
  for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
    data::Example e = ds.get(i);
    total += fuzz::touch(e.data) + fuzz::touch(e.target);
  }
  total += fuzz::touch(ds.images(0, std::min<int64_t>(n, 3)));
  total += fuzz::touch(ds.images_hyperslab(n - 1, n));
  volatile double sink = total;
  (void)sink;
}

void read_tokens(const std::string& path) {
  data::Hdf5TokenOptions options;
  options.block_size = 4;
  options.stride = 3;
  options.chunk_cache_bytes = kCacheBytes;
  data::Hdf5TokenDataset ds(path, options);
  double total = static_cast<double>(ds.vocab_size());
  const int64_t n = ds.size();
  for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
    data::Example e = ds.get(i);
    total += fuzz::touch(e.data);
    if (!ds.vocab().empty()) total += static_cast<double>(ds.decode(e.data).size());
  }
  volatile double sink = total;
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fuzz::ScratchFile file(".h5");
  file.write(fuzz::as_chars(data, size));
  const std::string& path = file.path();
  try {
    read_images(path);
  } catch (const Error&) {
  }
  try {
    read_tokens(path);
  } catch (const Error&) {
  }
  return 0;
}
