/* Model files (see model_file.h). */
#include "nn/models/model_file.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/layers/activation.h"
#include "nn/models/gpt.h"
#include "nn/models/mlp.h"
#include "nn/models/resnet.h"
#include "nn/models/small_cnn.h"
#include "nn/serialize/safetensors.h"

namespace loom::nn {
namespace {

using json = nlohmann::json;

// A positive integer field of the architecture.
int64_t positive(const json& spec, const char* field) {
  LOOM_CHECK(spec.contains(field), "model architecture: missing field '", field, "' in ", spec.dump());
  const json& v = spec.at(field);
  LOOM_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, "model architecture: field '", field,
             "' must be a positive integer, got ", v.dump());
  return v.get<int64_t>();
}

// An optional string field of the architecture (files written before it existed lack it).
std::string optional_string(const json& spec, const char* field, const std::string& fallback) {
  if (!spec.contains(field)) return fallback;
  const json& v = spec.at(field);
  LOOM_CHECK(v.is_string(), "model architecture: field '", field, "' must be a string, got ", v.dump());
  return v.get<std::string>();
}

}  // namespace

std::string architecture_json(const Module& model) {
  if (const auto* mlp = dynamic_cast<const MLP*>(&model)) {
    // The file records sizes only, so only the default activation round-trips.
    for (size_t i = 1; i < mlp->size(); i += 2)
      LOOM_CHECK(dynamic_cast<const ReLU*>(&(*mlp)[static_cast<int64_t>(i)]) != nullptr,
                 "architecture_json: only MLPs with ReLU activations can be described, layer ", i, " is ",
                 (*mlp)[static_cast<int64_t>(i)].type_name());
    return json{{"model", "mlp"}, {"sizes", mlp->sizes()}}.dump();
  }
  if (const auto* cnn = dynamic_cast<const SmallCNN*>(&model))
    return json{{"model", "cnn"},
                {"in_channels", cnn->in_channels()},
                {"num_classes", cnn->num_classes()},
                {"image_size", cnn->image_size()}}
        .dump();
  if (const auto* resnet = dynamic_cast<const ResNet*>(&model)) {
    const ResNetConfig& c = resnet->config();
    return json{{"model", "resnet"},
                {"in_channels", c.in_channels},
                {"num_classes", c.num_classes},
                {"blocks_per_stage", c.blocks_per_stage},
                {"base_width", c.base_width}}
        .dump();
  }
  if (const auto* gpt = dynamic_cast<const GPT*>(&model)) {
    const GPTConfig& c = gpt->config();
    return json{
        {"model", "gpt"},         {"vocab_size", c.vocab_size},   {"context", c.context},
        {"n_layers", c.n_layers}, {"n_heads", c.n_heads},         {"d_model", c.d_model},
        {"dropout", c.dropout},   {"tie_weights", c.tie_weights}, {"gelu_approximate", c.gelu_approximate}}
        .dump();
  }
  throw Error("architecture_json: " + model.type_name() +
              " is not a zoo model (nn::MLP, SmallCNN, ResNet or GPT); save its state_dict with save_safetensors");
}

std::shared_ptr<Module> make_model(const std::string& architecture) {
  json spec = json::parse(architecture, nullptr, /*allow_exceptions=*/false);
  LOOM_CHECK(!spec.is_discarded() && spec.is_object(), "model architecture: expected a JSON object, got '",
             architecture, "'");
  LOOM_CHECK(spec.contains("model") && spec["model"].is_string(), "model architecture: missing field 'model' in ",
             architecture);
  const std::string name = spec["model"];
  if (name == "mlp") {
    LOOM_CHECK(spec.contains("sizes") && spec["sizes"].is_array(), "model architecture: mlp needs 'sizes', a list",
               " of layer widths, in ", architecture);
    std::vector<int64_t> sizes;
    for (const json& v : spec["sizes"]) {
      LOOM_CHECK(v.is_number_integer(), "model architecture: mlp 'sizes' must hold integers, got ", v.dump());
      sizes.push_back(v.get<int64_t>());
    }
    return std::make_shared<MLP>(sizes);
  }
  if (name == "cnn")
    return std::make_shared<SmallCNN>(positive(spec, "in_channels"), positive(spec, "num_classes"),
                                      positive(spec, "image_size"));
  if (name == "resnet")
    return std::make_shared<ResNet>(ResNetConfig{.in_channels = positive(spec, "in_channels"),
                                                 .num_classes = positive(spec, "num_classes"),
                                                 .blocks_per_stage = positive(spec, "blocks_per_stage"),
                                                 .base_width = positive(spec, "base_width")});
  if (name == "gpt")
    return std::make_shared<GPT>(
        GPTConfig{.vocab_size = positive(spec, "vocab_size"),
                  .context = positive(spec, "context"),
                  .n_layers = positive(spec, "n_layers"),
                  .n_heads = positive(spec, "n_heads"),
                  .d_model = positive(spec, "d_model"),
                  .dropout = spec.value("dropout", 0.0),
                  .tie_weights = spec.value("tie_weights", true),
                  .gelu_approximate = optional_string(spec, "gelu_approximate", "none")});
  throw Error("model architecture: unknown model '" + name + "' (expected mlp, cnn, resnet or gpt)");
}

void save_model(const std::filesystem::path& path, const Module& model, std::map<std::string, std::string> metadata) {
  metadata[kArchitectureKey] = architecture_json(model);
  save_safetensors(path, model.state_dict(), metadata);
}

LoadedModel load_model(const std::filesystem::path& path) {
  SafetensorsFile file = load_safetensors(path);
  auto it = file.metadata.find(kArchitectureKey);
  LOOM_CHECK(it != file.metadata.end(), path.string(), ": no '", kArchitectureKey,
             "' in the metadata, so the architecture is unknown (the file was not written by save_model or "
             "tools/train; a run directory's model.safetensors is)");
  LoadedModel loaded;
  try {
    loaded.model = make_model(it->second);
    loaded.model->load_state_dict(file.tensors);
  } catch (const Error& e) {
    throw Error(path.string() + ": " + e.what());
  }
  loaded.metadata = std::move(file.metadata);
  return loaded;
}

}  // namespace loom::nn
