/*
 * The quantized-model loader's caps: what a hostile file claims (tensor sizes, stage counts,
 * qparams that overflow float32) is a loom::Error before kernels are built or memory is
 * allocated for it. tests/fuzz/fuzz_quantized_model.cpp hunts for what these miss.
 */
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "nn/serialize/safetensors.h"
#include "ops/ops.h"
#include "quant/kernels/int8_linear.h"
#include "quant/quantized_model.h"
#include "tests/test_util.h"

using namespace loom;
using json = nlohmann::json;

namespace {

// A one-layer int8 model [N, 4] -> [N, 2], as a loaded safetensors file.
nn::SafetensorsFile linear_model_file(const test::ScratchDir& dir) {
  using quant::QuantizedModel;
  std::vector<QuantizedModel::Stage> stages(1);
  stages[0].kind = QuantizedModel::Stage::Kind::Linear;
  stages[0].linear = std::make_shared<quant::Int8Linear>(full({2, 4}, 3, kInt8), full({2}, 0.01), zeros({2}),
                                                         0.02f, 128, quant::Int8Output{});
  const std::string path = dir.file("linear.int8.safetensors");
  QuantizedModel(std::move(stages)).save(path);
  return nn::load_safetensors(path);
}

// The loader's error for `file` with its stage description edited by `edit` ("" if it loads).
std::string error_after(nn::SafetensorsFile file, const std::function<void(json&)>& edit) {
  json spec = json::parse(file.metadata.at(quant::kQuantizedModelKey));
  edit(spec);
  file.metadata[quant::kQuantizedModelKey] = spec.dump();
  try {
    quant::QuantizedModel::from_safetensors(std::move(file), "caps.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("quantized model caps: the unedited file loads and runs (the baseline of the cases below)") {
  test::ScratchDir dir("qmodel_caps");
  CHECK(error_after(linear_model_file(dir), [](json&) {}) == "");
}

TEST_CASE("quantized model caps: a scale that is not a normal float32 is refused, however it is written") {
  test::ScratchDir dir("qmodel_caps");
  const nn::SafetensorsFile file = linear_model_file(dir);
  // 1e300 and 1e-50 are positive finite doubles, but float32 infinity and 0; 1e-40 is a
  // float32 subnormal whose reciprocal (the kernels' quantize multiplier) is infinite.
  for (double scale : {1e300, 1e-50, 1e-40, 0.0, -1.0}) {
    CAPTURE(scale);
    const std::string error =
        error_after(file, [&](json& spec) { spec["stages"][0]["input"]["scale"] = scale; });
    CHECK(error.find("stage 0: field 'scale' must be a positive finite number (a normal float32)") !=
          std::string::npos);
  }
  CHECK(error_after(file, [](json& spec) {
          spec["stages"][0]["input"]["scale"] = "0.5";
        }).find("field 'scale'") != std::string::npos);
}

TEST_CASE("quantized model caps: a subnormal weight scale is refused") {
  test::ScratchDir dir("qmodel_caps");
  nn::SafetensorsFile file = linear_model_file(dir);
  file.tensors.set("stages.0.weight_scale", full({2}, 1e-40f));
  const std::string error = error_after(std::move(file), [](json&) {});
  CHECK(error.find("weight_scale[0]") != std::string::npos);
  CHECK(error.find("(a normal float32)") != std::string::npos);
}

TEST_CASE("quantized model caps: a stage list longer than any model is refused before it is walked") {
  test::ScratchDir dir("qmodel_caps");
  const std::string error = error_after(linear_model_file(dir), [](json& spec) {
    json many = json::array();
    for (int i = 0; i < 100001; ++i) many.push_back(json{{"kind", "relu"}});
    spec["stages"] = many;
  });
  CHECK(error.find("more than a model has") != std::string::npos);
}

TEST_CASE(
    "quantized model caps: a weight claiming more bytes than the file is refused before allocating it") {
  test::ScratchDir dir("qmodel_caps");
  const std::string path = dir.file("claims.int8.safetensors");
  // A header claiming a 2^31 x 2^31 int8 weight (4 EB) over an 8-byte buffer.
  const std::string header =
      R"({"stages.0.weight":{"dtype":"I8","shape":[2147483648,2147483648],"data_offsets":[0,4611686018427387904]},)"
      R"("__metadata__":{"loom.quantized":"{}"}})";
  const uint64_t n = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  std::ofstream(path, std::ios::binary) << bytes << header << std::string(8, '\0');
  CHECK_THROWS_WITH_AS(quant::QuantizedModel::load(path),
                       doctest::Contains("beyond the data buffer of 8 bytes"), Error);
}
