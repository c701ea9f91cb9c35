/*
 * safetensors: bit-exact round trips of every dtype and shape kind, the byte layout the writer
 * promises, interoperability with an independent Python implementation (numpy + json, run in
 * both directions), one crafted file per validation rule, and a mutation loop showing that no
 * corrupted file gets past the reader with anything other than loom::Error.
 */
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "nn/serialize/serialize.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::nn;
namespace fs = std::filesystem;

namespace {


// A tensor of `dtype` whose bytes are exactly `raw` (for bit patterns: NaN payloads, -0, ...).
template <class Raw>
Tensor from_raw(const std::vector<Raw>& raw, IntArrayRef shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  REQUIRE(t.nbytes() == raw.size() * sizeof(Raw));
  if (!raw.empty()) std::memcpy(t.data_ptr(), raw.data(), t.nbytes());
  return t;
}

std::string raw_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

void check_identical(const Tensor& loaded, const Tensor& original, const std::string& name) {
  INFO("tensor ", name);
  CHECK(loaded.dtype() == original.dtype());
  CHECK(loaded.sizes().vec() == original.sizes().vec());
  CHECK(loaded.is_contiguous());
  CHECK(raw_bytes(loaded) == raw_bytes(original));
}

// The bytes of a safetensors file: length prefix, header text as given, data buffer.
std::string make_file(std::string_view header, std::string_view buffer = "") {
  const uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  out += header;
  out += buffer;
  return out;
}

// The message of the loom::Error that loading `bytes` throws ("" if it loads).
std::string load_error(std::string_view bytes) {
  try {
    load_safetensors_from_bytes(bytes, "crafted.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define CHECK_REJECTED(bytes, ...)                                                                   \
  do {                                                                                               \
    const std::string loom_message = load_error(bytes);                                              \
    INFO("error: ", loom_message);                                                                   \
    CHECK_FALSE(loom_message.empty());                                                               \
    CHECK(loom_message.find("crafted.safetensors") != std::string::npos);                            \
    for (std::string_view part : {__VA_ARGS__}) CHECK(loom_message.find(part) != std::string::npos); \
  } while (0)

// A StateDict with one tensor of every dtype, with the values that tend to break codecs.
StateDict every_dtype() {
  const float f32_nan = std::numeric_limits<float>::quiet_NaN();
  StateDict sd;
  sd.insert(
      "f32",
      tensor<float>({1.5f, -0.0f, f32_nan, std::numeric_limits<float>::infinity(), 1e-45f, 3.4e38f}, {2, 3}));
  sd.insert("f64", tensor<double>({1e-300, -2.5, std::numeric_limits<double>::denorm_min(), 1e300}, {2, 2}));
  // f16 / bf16 as bit patterns: +inf, a NaN with payload, -0, the smallest subnormal, max.
  sd.insert("f16", from_raw<uint16_t>({0x7c00, 0x7e01, 0x8000, 0x0001, 0x7bff}, {5}, kFloat16));
  sd.insert("bf16", from_raw<uint16_t>({0x7f80, 0x7fc1, 0x8000, 0x0001, 0x7f7f, 0x3f80}, {3, 2}, kBFloat16));
  sd.insert("i64", tensor<int64_t>(
                       {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 0, -1}));
  sd.insert("i32",
            tensor<int32_t>({std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), 5}));
  sd.insert("i8", tensor<int8_t>({-128, 127, 0, -1}, {2, 2}));
  sd.insert("u8", tensor<uint8_t>({0, 255, 128}));
  sd.insert("bool", tensor<bool>({true, false, false, true}, {1, 4}));
  return sd;
}

bool have_python_numpy() {
  return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

// Runs the interop script and returns its stdout; fails the test on a non-zero exit.
std::string run_interop(const std::string& mode, const fs::path& file) {
  const std::string command = std::string("/usr/bin/python3 '") + LOOM_SOURCE_DIR +
                              "/tests/nn/safetensors_interop.py' " + mode + " '" + file.string() + "'";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  const int status = ::pclose(pipe);
  INFO("command: ", command);
  REQUIRE(status == 0);
  return out;
}

// JSON "values" from the script: numbers, or "nan" / "inf" / "-inf".
double json_value(const nlohmann::json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    return s == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  }
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  return v.get<double>();
}

}  // namespace

TEST_CASE("safetensors: every dtype round-trips bit for bit, in order, through a file and bytes") {
  test::ScratchDir dir("safetensors");
  const StateDict sd = every_dtype();
  const fs::path file = dir.path() / "every.safetensors";
  save_safetensors(file, sd);

  for (const SafetensorsFile& loaded :
       {load_safetensors(file), load_safetensors_from_bytes(read_file(file), "x")}) {
    CHECK(loaded.tensors.keys() == sd.keys());
    CHECK(loaded.metadata.empty());
    for (const auto& [name, original] : sd) check_identical(loaded.tensors.at(name), original, name);
  }
  // No temporary file is left next to the target.
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
}

TEST_CASE("safetensors: 0-dim, empty and non-contiguous tensors, and metadata") {
  test::ScratchDir dir("safetensors");
  Tensor matrix = arange(12, kFloat32).reshape({3, 4});
  StateDict sd;
  sd.insert("scalar", scalar_tensor(3.25, kFloat64));
  sd.insert("empty1", empty({0}, kFloat32));
  sd.insert("empty3", empty({2, 0, 3}, kInt64));
  sd.insert("transposed", matrix.t());                             // strides (1, 4)
  sd.insert("strided", matrix.slice(1, 0, 4, 2));                  // every other column
  sd.insert("broadcast", tensor<int32_t>({7, 8}).expand({3, 2}));  // stride 0
  const std::map<std::string, std::string> metadata{
      {"format", "pt"}, {"note", "héllo \"quoted\"\n"}, {"", ""}};
  const fs::path file = dir.path() / "shapes.safetensors";
  save_safetensors(file, sd, metadata);

  const SafetensorsFile loaded = load_safetensors(file);
  CHECK(loaded.metadata == metadata);
  CHECK(loaded.tensors.keys() == sd.keys());
  CHECK(loaded.tensors.at("scalar").dim() == 0);
  CHECK(loaded.tensors.at("scalar").item<double>() == 3.25);
  CHECK(loaded.tensors.at("empty1").sizes().vec() == std::vector<int64_t>{0});
  CHECK(loaded.tensors.at("empty3").sizes().vec() == std::vector<int64_t>{2, 0, 3});
  CHECK(loaded.tensors.at("empty3").dtype() == kInt64);
  // Row-major values of the views, written out by hand.
  CHECK(loaded.tensors.at("transposed").sizes().vec() == std::vector<int64_t>{4, 3});
  CHECK(loaded.tensors.at("transposed").to_vector<float>() ==
        std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(loaded.tensors.at("strided").to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10});
  CHECK(loaded.tensors.at("broadcast").to_vector<int32_t>() == std::vector<int32_t>{7, 8, 7, 8, 7, 8});
}

TEST_CASE("safetensors: the writer's byte layout (header order, 8-aligned buffer, aligned tensors)") {
  test::ScratchDir dir("safetensors");
  StateDict sd;
  sd.insert("u", tensor<uint8_t>({1, 2, 3}));
  sd.insert("d", tensor<double>({0.5}));
  sd.insert("f", tensor<float>({2.0f}));
  const fs::path file = dir.path() / "layout.safetensors";
  save_safetensors(file, sd, {{"k", "v"}});
  const std::string bytes = read_file(file);

  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);
  // Header order is the StateDict's; the data goes by decreasing element size (d, f, u), so
  // d at 0, f at 8, u at 12. Hand-computed; the rest of the header is space padding.
  const std::string expected =
      R"({"__metadata__":{"k":"v"},"u":{"dtype":"U8","shape":[3],"data_offsets":[12,15]},)"
      R"("d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"f":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  const std::string header = bytes.substr(8, n);
  CHECK(header.substr(0, expected.size()) == expected);
  CHECK(header.find_first_not_of(' ', expected.size()) == std::string::npos);
  CHECK(bytes.size() == 8 + n + 15);
  double d;
  float f;
  std::memcpy(&d, bytes.data() + 8 + n, 8);
  std::memcpy(&f, bytes.data() + 8 + n + 8, 4);
  CHECK(d == 0.5);
  CHECK(f == 2.0f);
  CHECK(bytes.substr(8 + n + 12) == std::string("\x01\x02\x03", 3));
}

TEST_CASE("safetensors: save_safetensors rejects what it cannot write, naming the problem") {
  test::ScratchDir dir("safetensors");
  const fs::path file = dir.path() / "bad.safetensors";
  auto save_error = [&](const StateDict& sd, const std::map<std::string, std::string>& meta = {},
                        const fs::path& where = {}) -> std::string {
    try {
      save_safetensors(where.empty() ? file : where, sd, meta);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(save_error({{"w", Tensor()}}).find("tensor 'w' is undefined") != std::string::npos);
  CHECK(save_error({{"__metadata__", ones({1})}}).find("reserved for metadata") != std::string::npos);
  CHECK(save_error({{"bad\xff", ones({1})}}).find("not valid UTF-8") != std::string::npos);
  CHECK(save_error({{"w", ones({1})}}, {{"k", "\xc3"}}).find("not valid UTF-8") != std::string::npos);
  const std::string missing_dir =
      save_error({{"w", ones({1})}}, {}, dir.path() / "no" / "such" / "x.safetensors");
  CHECK(missing_dir.find((dir.path() / "no" / "such").string()) != std::string::npos);
  CHECK(missing_dir.find("No such file or directory") != std::string::npos);
  CHECK_FALSE(fs::exists(file));  // nothing was written by the failed saves

  std::string missing;
  try {
    load_safetensors(dir.path() / "absent.safetensors");
  } catch (const Error& e) {
    missing = e.what();
  }
  CHECK(missing.find("absent.safetensors") != std::string::npos);
  CHECK(missing.find("No such file or directory") != std::string::npos);
}

TEST_CASE("safetensors: every validation rule rejects its crafted file with a precise message") {
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  const std::string eight(8, '\0');
  // The valid baseline, to show that the crafted files fail for the reason given, not another.
  CHECK(load_error(make_file("{\"x\":{" + f32x2 + "}}", eight)).empty());
  CHECK(load_error(make_file("{\"x\":{" + f32x2 + "}}    ", eight)).empty());  // space padding is fine
  CHECK(load_error(make_file("{}")).empty());                                  // no tensors at all

  // Length field and header size.
  CHECK_REJECTED(std::string("abc"), "3 bytes is shorter than the 8-byte header length");
  CHECK_REJECTED(std::string(), "0 bytes is shorter");
  {
    std::string bytes = make_file("{}");
    const uint64_t n = 100;
    std::memcpy(bytes.data(), &n, 8);
    CHECK_REJECTED(bytes, "header length 100 exceeds the 2 bytes");
    const uint64_t huge = 200'000'000;
    std::memcpy(bytes.data(), &huge, 8);
    CHECK_REJECTED(bytes, "header length 200000000 is over the 100 MB limit");
    const uint64_t wrapping = ~uint64_t{0} - 3;  // 8 + n would wrap around
    std::memcpy(bytes.data(), &wrapping, 8);
    CHECK_REJECTED(bytes, "over the 100 MB limit");
  }
  // JSON syntax and structure.
  CHECK_REJECTED(make_file("{not json"), "not valid JSON");
  CHECK_REJECTED(make_file(""), "not valid JSON");
  CHECK_REJECTED(make_file("{}x"), "not valid JSON");
  CHECK_REJECTED(make_file(std::string("{}\0\0\0\0", 6)), "not valid JSON");
  CHECK_REJECTED(make_file("{\"\xff\":{}}"), "not valid JSON");  // invalid UTF-8
  CHECK_REJECTED(make_file("[1,2]"), "the header must be a JSON object, got array");
  CHECK_REJECTED(make_file("{\"x\":{" + f32x2 + "},\"x\":{" + f32x2 + "}}", eight), "duplicate key \"x\"");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight),
                 "duplicate key \"dtype\" in entry 'x'");
  CHECK_REJECTED(make_file(R"({"__metadata__":{"a":"1","a":"2"}})"), "duplicate key \"a\"");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", eight),
                 "nested deeper than the format allows", "entry 'x'");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":{"a":{}},"shape":[2],"data_offsets":[0,8]}})", eight),
                 "nested deeper");
  {
    std::string shape = "[1";
    for (int i = 0; i < 64; ++i) shape += ",1";
    CHECK_REJECTED(make_file(R"({"x":{"dtype":"U8","shape":)" + shape + R"(],"data_offsets":[0,1]}})", "a"),
                   "more than 64 elements");
  }
  // Entries.
  CHECK_REJECTED(make_file(R"({"x":5})"), "tensor 'x': the entry must be an object, got integer");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":[2]}})", eight),
                 "tensor 'x': missing field 'data_offsets'");
  CHECK_REJECTED(make_file(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", eight), "missing field 'dtype'");
  CHECK_REJECTED(make_file("{\"x\":{" + f32x2 + ",\"extra\":1}}", eight),
                 "tensor 'x': unexpected field 'extra'");
  // dtype.
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", eight),
                 "tensor 'x': dtype 'F31' is not a safetensors dtype");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"U16","shape":[4],"data_offsets":[0,8]}})", eight),
                 "dtype 'U16' is a safetensors dtype that Loom has no tensor type for");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", eight),
                 "dtype must be a string, got integer");
  // shape.
  for (const char* shape : {"[-2]", "[2.0]", "[\"2\"]", "[null]", "[true]"}) {
    CHECK_REJECTED(
        make_file(std::string(R"({"x":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,8]}})",
                  eight),
        "tensor 'x': shape must be a list of non-negative integers, got ", shape);
  }
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", eight),
                 "shape must be a list of non-negative integers, got integer");
  CHECK_REJECTED(
      make_file(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}})", eight),
      "element count overflows 64 bits");
  CHECK_REJECTED(
      make_file(R"({"x":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", eight),
      "byte count overflows 64 bits");
  CHECK_REJECTED(
      make_file(R"({"x":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8]}})", eight),
      "larger than 2^63 - 1");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
                 "shape [3] of F32 needs 12 bytes but data_offsets [0,8] span 8");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":[],"data_offsets":[0,8]}})", eight),
                 "needs 4 bytes");
  // data_offsets.
  for (const char* offsets : {"[0]", "[0,8,8]", "[0,\"8\"]", "[0,-8]", "[0,8.0]", "8", "{}"}) {
    CHECK_REJECTED(
        make_file(std::string(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":)") + offsets + "}}", eight),
        "tensor 'x': data_offsets must be two non-negative integers [begin, end]");
  }
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight),
                 "data_offsets [8,0]: begin is after end");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
                 "data_offsets [0,16]: end is beyond the data buffer of 8 bytes");
  CHECK_REJECTED(
      make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", eight),
      "end is beyond the data buffer");
  // Tiling of the buffer.
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           std::string(12, '\0')),
                 "tensors 'x' [0, 8) and 'y' [4, 12) overlap");
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("y":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})",
                           eight),
                 "overlap");  // an empty tensor inside another one
  CHECK_REJECTED(make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("y":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                           std::string(20, '\0')),
                 "bytes [8, 12) of the data buffer belong to no tensor (the format forbids holes)");
  CHECK_REJECTED(
      make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::string(12, '\0')),
      "bytes [0, 4) of the data buffer belong to no tensor");
  CHECK_REJECTED(make_file("{\"x\":{" + f32x2 + "}}", std::string(12, '\0')),
                 "bytes [8, 12) at the end of the data buffer belong to no tensor");
  CHECK_REJECTED(make_file("{}", "x"), "bytes [0, 1) at the end");
  // Empty tensors at the boundaries are fine.
  CHECK(load_error(make_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                             R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("z":{"dtype":"I64","shape":[0,5],"data_offsets":[8,8]}})",
                             eight))
            .empty());
  // Metadata.
  CHECK_REJECTED(make_file(R"({"__metadata__":[1]})"),
                 "\"__metadata__\" must be an object of strings, got array");
  CHECK_REJECTED(make_file(R"({"__metadata__":{"a":1}})"), "\"__metadata__\" must map strings to strings",
                 "key 'a' maps to integer");
  CHECK_REJECTED(make_file(R"({"__metadata__":{"a":null}})"), "key 'a' maps to null");
  // BOOL bytes other than 0 and 1 are not bools.
  CHECK_REJECTED(
      make_file(R"({"b":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x00\x02", 3)),
      "tensor 'b': BOOL element 2 is byte 2, expected 0 or 1");

  // The file reader applies the same checks and names the file.
  test::ScratchDir dir("safetensors");
  const fs::path file = dir.path() / "overlap.safetensors";
  write_file_atomically(file, make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                        std::string(12, '\0')));
  std::string message;
  try {
    load_safetensors(file);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find(file.string()) != std::string::npos);
  CHECK(message.find("overlap") != std::string::npos);
  write_file_atomically(file, std::string("\x10\0\0\0\0\0\0\0{}", 10));
  message.clear();
  try {
    load_safetensors(file);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("header length 16 exceeds the 2 bytes") != std::string::npos);
}

TEST_CASE("safetensors: 20000 random mutations of a valid file only ever load or throw loom::Error") {
  StateDict sd = every_dtype();
  sd.insert("scalar", scalar_tensor(1.0, kFloat32));
  sd.insert("empty", empty({0, 2}, kInt32));
  test::ScratchDir dir("safetensors");
  save_safetensors(dir.path() / "seed.safetensors", sd, {{"format", "pt"}, {"step", "12"}});
  const std::string valid = read_file(dir.path() / "seed.safetensors");
  uint64_t header_size = 0;
  std::memcpy(&header_size, valid.data(), 8);

  std::mt19937_64 rng(20240601);
  auto below = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = valid;
    const int edits = 1 + static_cast<int>(below(3));
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      switch (below(7)) {
        case 0:  // random byte anywhere
          bytes[below(bytes.size())] = static_cast<char>(rng());
          break;
        case 1:  // flip one bit of the header, where every byte matters to the parser
          if (bytes.size() > 8)
            bytes[8 + below(std::min<size_t>(bytes.size() - 8, header_size))] ^=
                static_cast<char>(1 << below(8));
          break;
        case 2:  // truncate
          bytes.resize(below(bytes.size() + 1));
          break;
        case 3: {  // change a digit of the header to another digit (shapes and offsets)
          std::vector<size_t> digits;
          for (size_t i = 8; i < std::min<size_t>(bytes.size(), 8 + header_size); ++i)
            if (bytes[i] >= '0' && bytes[i] <= '9') digits.push_back(i);
          if (!digits.empty()) bytes[digits[below(digits.size())]] = static_cast<char>('0' + below(10));
          break;
        }
        case 4:  // insert a digit or a byte
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(below(bytes.size() + 1)),
                       below(2) ? static_cast<char>('0' + below(10)) : static_cast<char>(rng()));
          break;
        case 5:  // delete a byte
          bytes.erase(below(bytes.size()), 1);
          break;
        case 6: {  // rewrite the length field
          const uint64_t n = below(2) ? header_size + below(17) - 8 : rng();
          if (bytes.size() >= 8) std::memcpy(bytes.data(), &n, 8);
          break;
        }
      }
    }
    try {
      const SafetensorsFile f = load_safetensors_from_bytes(bytes, "mutant");
      // What loads must be consistent with the bytes it came from.
      size_t total = 0;
      for (const auto& [name, t] : f.tensors) total += t.nbytes();
      CHECK(total <= bytes.size());
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      FAIL("mutation ", trial, " threw a non-loom exception: ", e.what());
    }
  }
  MESSAGE(loaded, " mutants loaded, ", rejected, " rejected");
  // Both outcomes must occur, or the loop is not exercising the validator.
  CHECK(loaded > 100);
  CHECK(rejected > 10000);
}

TEST_CASE("safetensors: Python (numpy + json) reads Loom's file") {
  if (!have_python_numpy()) {
    std::cout << "[skipped: no python3/numpy] " << __FILE__ << ":" << __LINE__ << std::endl;
    MESSAGE("[skipped: no python3/numpy]");
    return;
  }
  test::ScratchDir dir("safetensors");
  StateDict sd = every_dtype();
  sd.insert("scalar", scalar_tensor(-7.0, kFloat64));
  sd.insert("empty", empty({3, 0}, kFloat16));
  sd.insert("strided", arange(20, kInt32).reshape({4, 5}).t());
  Generator gen(5);
  sd.insert("big", randn({64, 33}, kFloat32, &gen));
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"epoch", "3"}};
  const fs::path file = dir.path() / "loom.safetensors";
  save_safetensors(file, sd, metadata);

  const nlohmann::json report = nlohmann::json::parse(run_interop("read", file));
  CHECK(report["metadata"] == nlohmann::json(metadata));
  const auto& tensors = report["tensors"];
  REQUIRE(tensors.size() == sd.size());
  size_t i = 0;
  for (const auto& [name, original] : sd) {
    const auto& entry = tensors[i++];
    INFO("tensor ", name);
    CHECK(entry["name"] == name);
    CHECK(entry["shape"].get<std::vector<int64_t>>() == original.sizes().vec());
    std::vector<double> values;
    for (const auto& v : entry["values"]) values.push_back(json_value(v));
    // Python decoded the bytes on its own (numpy dtypes, bf16 widened by hand); the values
    // must equal Loom's own conversion of the original to double, exactly.
    const std::string bad = test::mismatch(values, original.to(kFloat64).to_vector<double>(), {0, 0});
    CHECK_MESSAGE(bad.empty(), bad);
  }
  CHECK(tensors[0]["dtype"] == "F32");
  CHECK(tensors[2]["dtype"] == "F16");
  CHECK(tensors[3]["dtype"] == "BF16");
  CHECK(tensors[8]["dtype"] == "BOOL");
  // The float64 sum over the 2112 random values, as numpy computed it; Loom's sum in float64
  // may add in another order, hence the tolerance.
  CHECK(tensors[12]["sum"].get<double>() ==
        doctest::Approx(sd.at("big").to(kFloat64).sum().item<double>()).epsilon(1e-12));
}

TEST_CASE("safetensors: Loom reads the file Python (numpy + json) writes") {
  if (!have_python_numpy()) {
    std::cout << "[skipped: no python3/numpy] " << __FILE__ << ":" << __LINE__ << std::endl;
    MESSAGE("[skipped: no python3/numpy]");
    return;
  }
  test::ScratchDir dir("safetensors");
  const fs::path file = dir.path() / "numpy.safetensors";
  run_interop("write", file);
  const SafetensorsFile f = load_safetensors(file);

  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"source", "numpy"}});
  // The script sorts the header (Hugging Face's order), so Loom keeps that order.
  CHECK(f.tensors.keys() == std::vector<std::string>{"a.f64", "b.f32", "c.f16", "d.bf16", "e.i64", "f.i32",
                                                     "g.i8", "h.u8", "i.bool", "j.scalar", "k.empty"});
  // The values the script writes (see safetensors_interop.py `write`), by hand.
  auto check = [&](const std::string& name, DType dtype, std::vector<int64_t> shape,
                   std::vector<double> expected) {
    INFO("tensor ", name);
    const Tensor& t = f.tensors.at(name);
    CHECK(t.dtype() == dtype);
    CHECK(t.sizes().vec() == shape);
    const std::string bad = test::mismatch(t.to_vector<double>(), expected, {0, 0});
    CHECK_MESSAGE(bad.empty(), bad);
  };
  check("a.f64", kFloat64, {2, 2}, {1e-300, -2.5, 3.0, 1e300});
  check("b.f32", kFloat32, {2, 3}, {-1, -0.5, 0, 0.5, 1, 1.5});
  check("c.f16", kFloat16, {4}, {0.5, -2.0, 65504.0, 6.103515625e-05});
  check("d.bf16", kBFloat16, {4}, {1.0, -3.140625, 3.3895313892515355e38, 0.0078125});
  check("f.i32", kInt32, {3}, {-2147483648.0, 2147483647.0, 7});
  check("g.i8", kInt8, {3}, {-128, 127, 0});
  check("h.u8", kUInt8, {3}, {0, 255, 128});
  check("i.bool", kBool, {3}, {1, 0, 1});
  check("j.scalar", kFloat32, {}, {42});
  check("k.empty", kFloat32, {0, 3}, {});
  // int64 extremes do not survive a trip through double: compare them as integers.
  CHECK(
      f.tensors.at("e.i64").to_vector<int64_t>() ==
      std::vector<int64_t>{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 0, -1});
  CHECK(f.tensors.at("e.i64").sizes().vec() == std::vector<int64_t>{2, 2});
}
