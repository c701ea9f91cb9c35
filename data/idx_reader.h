/*
 * Reading IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or not: a big-endian
 * header (two zero bytes, the element type 0x08 = uint8, the number of dimensions, each
 * dimension as a 32-bit integer) followed by the elements.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, prod(dims) bytes
};

// Throws loom::Error naming the file when it is missing, not IDX, not uint8, truncated or
// longer than its header says.
IdxArray read_idx(const std::string& path);

}  // namespace loom::data
