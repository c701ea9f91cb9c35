/*
 * Helpers shared by the data tests: a scratch directory removed at exit, small synthetic
 * image datasets whose pixels encode their index (so a test can tell which image it got),
 * and running python3 with h5py to write or check files as another program would.
 */
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/data.h"
#include "ops/ops.h"
#include "tests/test_util.h"

namespace loom::test {

// Pixel (c, y, x) of image i: a pattern that identifies the image and the position.
inline uint8_t pixel(int64_t i, int64_t c, int64_t y, int64_t x) {
  return static_cast<uint8_t>((i * 7 + c * 31 + y * 5 + x * 3) % 251);
}

// n images [n, c, h, w] with pixel() values, and labels i % classes.
inline std::pair<Tensor, Tensor> synthetic_images(int64_t n, int64_t c, int64_t h, int64_t w,
                                                  int64_t classes) {
  Tensor x = empty({n, c, h, w}, kUInt8);
  uint8_t* p = x.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t z = 0; z < w; ++z) *p++ = pixel(i, k, y, z);
  Tensor labels = empty({n}, kInt64);
  for (int64_t i = 0; i < n; ++i) labels.data_ptr<int64_t>()[i] = i % classes;
  return {x, labels};
}

// Writes a synthetic image dataset in Loom's layout and returns its path.
inline std::string write_synthetic(const ScratchDir& dir, const std::string& name, int64_t n, int64_t c = 1,
                                   int64_t h = 8, int64_t w = 8,
                                   data::WriteOptions options = {.chunk_rows = 16, .deflate_level = 1}) {
  auto [x, y] = synthetic_images(n, c, h, w, 10);
  data::DatasetInfo info;
  info.name = "synthetic";
  info.class_names = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"};
  const std::string path = dir.file(name);
  data::write_image_dataset(path, x, y, info, options);
  return path;
}

// The python3 that has h5py: Debian's /usr/bin/python3 first (another python3 may come
// first in PATH without it). Empty when none does.
inline std::string python_with_h5py() {
  for (const char* candidate : {"/usr/bin/python3", "python3"}) {
    const std::string cmd = std::string(candidate) + " -c 'import h5py' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return candidate;
  }
  return "";
}

// Runs a python script (with h5py) and returns its exit status; its output goes to the log.
inline int run_python(const ScratchDir& dir, const std::string& script) {
  const std::string python = python_with_h5py();
  REQUIRE_MESSAGE(!python.empty(), "python3 with h5py is needed: apt-get install python3-h5py");
  const std::string path = dir.file("script.py");
  std::ofstream(path) << script;
  return std::system((python + " " + path).c_str());
}

// Same shape, dtype and bytes.
inline bool values_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.to(kCPU).contiguous(), cb = b.to(kCPU).contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Flips the bits of one byte of a file in place.
inline void corrupt_byte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(~c));
}


// True when `text` contains every one of `parts`.
inline bool contains_all(const std::string& text, std::initializer_list<std::string> parts) {
  for (const auto& p : parts)
    if (text.find(p) == std::string::npos) return false;
  return true;
}

}  // namespace loom::test
