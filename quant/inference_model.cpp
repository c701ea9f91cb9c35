/* A model file loaded for inference (see inference_model.h). */
#include "quant/inference_model.h"

#include <nlohmann/json.hpp>

#include "nn/models/gpt.h"
#include "nn/models/model_file.h"
#include "quant/quantized_model.h"

namespace loom::quant {
namespace {

using json = nlohmann::json;

// "loom.input_normalization" = {"mean": [...], "std": [...]}, as tools/train writes it.
void read_normalization(const std::filesystem::path& path, InferenceModel& m) {
  auto it = m.metadata.find(nn::kInputNormalizationKey);
  if (it == m.metadata.end()) return;
  const json j = json::parse(it->second, nullptr, false);
  const bool valid = j.is_object() && j.contains("mean") && j.contains("std") && j["mean"].is_array() &&
                     j["std"].is_array() && j["mean"].size() == j["std"].size() && !j["mean"].empty();
  LOOM_CHECK(valid, path.string(), ": metadata '", nn::kInputNormalizationKey,
             "' must be {\"mean\": [...], \"std\": [...]} of one length, got ", it->second);
  for (const json& v : j["mean"]) {
    LOOM_CHECK(v.is_number(), path.string(), ": metadata '", nn::kInputNormalizationKey, "': ", v.dump(),
               " is not a number");
    m.mean.push_back(v.get<float>());
  }
  for (const json& v : j["std"]) {
    LOOM_CHECK(v.is_number() && v.get<float>() > 0, path.string(), ": metadata '", nn::kInputNormalizationKey,
               "': std ", v.dump(), " is not a positive number");
    m.std.push_back(v.get<float>());
  }
}

}  // namespace

InferenceModel load_inference_model(const std::filesystem::path& path, Device device) {
  LOOM_CHECK(std::filesystem::exists(path), path.string(), ": no such model file");
  nn::SafetensorsFile file;
  try {
    file = nn::load_safetensors(path);
  } catch (const Error& e) {
    throw Error(path.string() + ": not a Loom model file (model files are safetensors files): " + e.what());
  }
  InferenceModel m;
  m.device = device;
  if (file.metadata.count(kQuantizedModelKey)) {
    m.metadata = file.metadata;
    const std::shared_ptr<QuantizedModel> q =
        QuantizedModel::from_safetensors(std::move(file), path.string())->to(device);
    m.int8 = true;
    m.description = "INT8, " + std::to_string(q->stages().size()) + " stages";
    if (auto source = m.metadata.find("loom.source_model"); source != m.metadata.end())
      m.description += ", from " + source->second;
    m.forward = [q](const Tensor& x) { return q->forward(x); };
  } else {
    LOOM_CHECK(file.metadata.count(nn::kArchitectureKey), path.string(),
               ": not a Loom model file: its metadata has neither '", nn::kArchitectureKey,
               "' (a float model from tools/train) nor '", kQuantizedModelKey,
               "' (an INT8 model from tools/quantize)");
    file = {};                                      // the float model reads the file itself
    nn::LoadedModel loaded = nn::load_model(path);  // names the file in its errors
    loaded.model->eval();
    loaded.model->to(device);
    m.metadata = std::move(loaded.metadata);
    if (const auto* gpt = dynamic_cast<const nn::GPT*>(loaded.model.get())) {
      m.context = gpt->config().context;
      m.vocab = gpt->config().vocab_size;
    }
    m.description = json::parse(m.metadata.at(nn::kArchitectureKey)).value("model", std::string("?")) + " (" +
                    loaded.model->type_name() + ", " + std::to_string(loaded.model->num_parameters()) +
                    " parameters, f32)";
    m.forward = [model = loaded.model](const Tensor& x) { return (*model)(x); };
  }
  read_normalization(path, m);
  return m;
}

}  // namespace loom::quant
