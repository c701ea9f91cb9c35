/*
 * load_inference_model (quant/inference_model.h): a float model file (nn::save_model) and an
 * INT8 one (QuantizedModel::save) load as functions that compute what the models compute, with
 * the normalisation and context their callers need; any other file is an error naming it.
 */
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/grad_mode.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "quant/inference_model.h"
#include "quant/quant.h"
#include "tests/test_util.h"

namespace loom::test {
namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return a.sub(b).abs().max().item<double>();
}

TEST_CASE("load_inference_model: a float and an INT8 SmallCNN compute what the models do") {
  ScratchDir dir("inference_model");
  manual_seed(7);
  nn::SmallCNN cnn(1, 4, 8);
  cnn.eval();
  const std::string norm = nlohmann::json{{"mean", {0.25}}, {"std", {0.5}}}.dump();
  nn::save_model(dir.path() / "f32.safetensors", cnn, {{nn::kInputNormalizationKey, norm}});
  NoGradGuard no_grad;
  const Tensor x = randn({5, 1, 8, 8});

  const quant::InferenceModel f32 = quant::load_inference_model(dir.path() / "f32.safetensors");
  CHECK_FALSE(f32.int8);
  CHECK(f32.context == 0);
  CHECK(f32.mean == std::vector<float>{0.25f});
  CHECK(f32.std == std::vector<float>{0.5f});
  CHECK(f32.description == "cnn (SmallCNN, " + std::to_string(cnn.num_parameters()) + " parameters, f32)");
  CHECK(max_abs_diff(f32.forward(x), cnn(x)) == 0.0);

  auto prepared = quant::prepare(cnn);
  (*prepared)(x);  // calibration
  auto int8 = quant::convert(*prepared);
  int8->save(dir.path() / "int8.safetensors", {{nn::kInputNormalizationKey, norm}});
  const quant::InferenceModel q = quant::load_inference_model(dir.path() / "int8.safetensors");
  CHECK(q.int8);
  CHECK(q.mean == std::vector<float>{0.25f});
  CHECK(max_abs_diff(q.forward(x), int8->forward(x)) == 0.0);
}

TEST_CASE("load_inference_model: a GPT's context and vocabulary, and files that are not Loom models are errors naming them") {
  ScratchDir dir("inference_model_errors");
  nn::GPT gpt(nn::GPTConfig{.vocab_size = 7, .context = 6, .n_layers = 1, .n_heads = 1, .d_model = 8});
  nn::save_model(dir.path() / "gpt.safetensors", gpt);
  CHECK(quant::load_inference_model(dir.path() / "gpt.safetensors").context == 6);
  CHECK(quant::load_inference_model(dir.path() / "gpt.safetensors").vocab == 7);

  CHECK_THROWS_WITH(quant::load_inference_model(dir.path() / "nope.safetensors"),
                    doctest::Contains("nope.safetensors: no such model file"));
  std::ofstream(dir.path() / "text.safetensors") << "hello, world";
  CHECK_THROWS_WITH(
      quant::load_inference_model(dir.path() / "text.safetensors"),
      doctest::Contains("text.safetensors: not a Loom model file (model files are safetensors"));
  nn::save_safetensors(dir.path() / "bare.safetensors", gpt.state_dict());
  CHECK_THROWS_WITH(quant::load_inference_model(dir.path() / "bare.safetensors"),
                    doctest::Contains("bare.safetensors: not a Loom model file: its metadata has neither"));
  nn::save_model(dir.path() / "bad_norm.safetensors", gpt, {{nn::kInputNormalizationKey, "{\"mean\": [1]}"}});
  CHECK_THROWS_WITH(quant::load_inference_model(dir.path() / "bad_norm.safetensors"),
                    doctest::Contains("bad_norm.safetensors: metadata 'loom.input_normalization' must be"));
}

}  // namespace
}  // namespace loom::test
