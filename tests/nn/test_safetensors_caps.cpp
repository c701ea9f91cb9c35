/*
 * The safetensors loader's size caps: a header that claims more than the file holds (a header
 * length past the end, tensor bytes past the buffer, shapes whose sizes overflow) is a
 * loom::Error before anything is allocated for it. The fuzz target (tests/fuzz/
 * fuzz_safetensors.cpp) hunts for claims these miss; each one found is pinned here.
 */
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "nn/serialize/safetensors.h"
#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;

namespace {

// A safetensors file: the little-endian header length, the header, then `buffer` bytes.
std::string file_bytes(const std::string& header, const std::string& buffer = "") {
  const uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + buffer;
}

std::string with_length(uint64_t claimed, const std::string& rest) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &claimed, 8);
  return out + rest;
}

// The loader's error message for `bytes`, or "" when it loads.
std::string error_of(const std::string& bytes) {
  try {
    nn::load_safetensors_from_bytes(bytes, "caps");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string one_tensor(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"t":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
}

}  // namespace

TEST_CASE("safetensors caps: a header length beyond the file or over 100 MB is refused before reading it") {
  CHECK(error_of(with_length(1000, "{}")).find("exceeds the 2 bytes that follow") != std::string::npos);
  CHECK(error_of(with_length(uint64_t{1} << 40, "{}")).find("over the 100 MB limit") != std::string::npos);
  CHECK(error_of(with_length(~uint64_t{0}, "{}")).find("over the 100 MB limit") != std::string::npos);
  // The same through the file reader, which sizes its header buffer from the claim.
  test::ScratchDir dir("safetensors_caps");
  const std::string path = dir.file("claims.safetensors");
  std::ofstream(path, std::ios::binary) << with_length(50'000'000, "{}");
  CHECK_THROWS_WITH_AS(nn::load_safetensors(path), doctest::Contains("exceeds the 2 bytes"), Error);
}

TEST_CASE("safetensors caps: tensor bytes beyond the data buffer are refused before allocating the tensor") {
  // 4 GB claimed, 8 bytes present: the check comes before empty() would allocate the 4 GB.
  const std::string huge = one_tensor("F32", "[1073741824]", "[0,4294967296]");
  CHECK(error_of(file_bytes(huge, std::string(8, '\0'))).find("beyond the data buffer of 8 bytes") !=
        std::string::npos);
  const std::string shifted = one_tensor("F32", "[2]", "[4,12]");
  CHECK(error_of(file_bytes(shifted, std::string(8, '\0'))).find("beyond the data buffer") !=
        std::string::npos);
}

TEST_CASE("safetensors caps: shapes whose element or byte counts overflow are refused") {
  CHECK(error_of(file_bytes(one_tensor("U8", "[4294967296,4294967296]", "[0,0]")))
            .find("element count overflows") != std::string::npos);
  CHECK(error_of(file_bytes(one_tensor("F64", "[4611686018427387904]", "[0,0]")))
            .find("byte count overflows") != std::string::npos);
  CHECK(
      error_of(file_bytes(one_tensor("U8", "[9223372036854775808]", "[0,0]"))).find("larger than 2^63 - 1") !=
      std::string::npos);
}

TEST_CASE("safetensors caps: an empty tensor whose other dimensions overflow int64 is refused") {
  // No bytes to check against the buffer, but Loom's strides (and a running element count)
  // multiply the non-zero dimensions: 2^40 x 2^40 overflows wherever the zero is.
  for (std::string shape : {"[0,1099511627776,1099511627776]", "[1099511627776,0,1099511627776]"}) {
    CAPTURE(shape);
    CHECK(
        error_of(file_bytes(one_tensor("F32", shape, "[0,0]"))).find("non-zero dimensions overflows int64") !=
        std::string::npos);
  }
  // With the zero last, the running element count overflows first, and says so.
  CHECK(error_of(file_bytes(one_tensor("F32", "[1099511627776,1099511627776,0]", "[0,0]")))
            .find("element count overflows") != std::string::npos);
  // Empty tensors with large but representable dimensions still load, with their shape.
  nn::SafetensorsFile ok =
      nn::load_safetensors_from_bytes(file_bytes(one_tensor("F32", "[0,4294967296,1024]", "[0,0]")), "caps");
  CHECK(ok.tensors.at("t").numel() == 0);
  CHECK(ok.tensors.at("t").size(1) == 4294967296);
}
