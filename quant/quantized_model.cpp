/* QuantizedModel: INT8 inference, and its file format (see quantized_model.h). */
#include "quant/quantized_model.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/grad_mode.h"
#include "nn/serialize/safetensors.h"
#include "ops/ops.h"
#include "quant/kernels/int8_pool.h"
#include "quant/kernels/quantize_kernels.h"

namespace loom::quant {
namespace {

using json = nlohmann::json;
using Kind = QuantizedModel::Stage::Kind;

constexpr int kFormatVersion = 1;

// The qparams of the integer tensor flowing between stages.
struct Activation {
  bool quantized = false;  // false: still the float input
  float scale = 1;
  int32_t zero_point = 0;
};

// Clamps u8 values to [low, high]: the fused ReLU of a standalone ReLU stage (low = zero point)
// and the range of outputs with fewer than 8 bits. A kernel's fresh output is clamped in place,
// keeping its layout (NHWC between convolutions); anything else is copied first.
Tensor clamp_u8(const Tensor& q, int64_t low, int64_t high, bool owned) {
  const bool dense = q.is_contiguous() || detail::is_channels_last(q);
  Tensor out = owned && dense ? q : q.contiguous().clone();
  auto* p = out.data_ptr<uint8_t>();
  const auto lo = static_cast<uint8_t>(low), hi = static_cast<uint8_t>(high);
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = std::min(std::max(p[i], lo), hi);
  return out;
}

// What a Linear or Conv2d stage's kernel was built from.
const Int8LayerParams& params_of(const QuantizedModel::Stage& s) {
  return s.linear ? s.linear->params() : s.conv->params();
}

// ---- file parsing: every field checked, with the file and the stage in the message ----------

struct FieldReader {
  const std::string& file;
  std::string where;

  [[noreturn]] void fail(const std::string& what) const { throw Error(file + ": " + where + ": " + what); }
  const json& at(const json& obj, const char* field) const {
    if (!obj.is_object() || !obj.contains(field)) fail(std::string("missing field '") + field + "'");
    return obj.at(field);
  }
  int64_t integer(const json& obj, const char* field, int64_t lo, int64_t hi) const {
    const json& v = at(obj, field);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      fail(std::string("field '") + field + "' must be an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "], got " + v.dump());
    return v.get<int64_t>();
  }
  // A scale is stored as float32: a JSON number that is positive as a double can still round
  // to 0, a subnormal or infinity in float32 (1e-50, 1e300), and the kernels divide by it.
  float positive_scale(const json& obj, const char* field) const {
    const json& v = at(obj, field);
    const double d = v.is_number() ? v.get<double>() : 0.0;
    if (!v.is_number() || !(d >= std::numeric_limits<float>::min() && d <= std::numeric_limits<float>::max()))
      fail(std::string("field '") + field + "' must be a positive finite number (a normal float32), got " +
           v.dump());
    return static_cast<float>(d);
  }
  bool boolean(const json& obj, const char* field) const {
    const json& v = at(obj, field);
    if (!v.is_boolean()) fail(std::string("field '") + field + "' must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  const Tensor& tensor(const nn::StateDict& tensors, const std::string& name, DType dtype) const {
    const Tensor* t = tensors.find(name);
    if (t == nullptr) fail("the tensor '" + name + "' is missing");
    if (t->dtype() != dtype)
      fail("the tensor '" + name + "' must be " + std::string(dtype_name(dtype)) + ", got " +
           std::string(dtype_name(t->dtype())));
    return *t;
  }
};

}  // namespace

QuantizedModel::QuantizedModel(std::vector<Stage> stages, std::map<std::string, std::string> metadata)
    : stages_(std::move(stages)), metadata_(std::move(metadata)) {
  LOOM_CHECK(!stages_.empty(), "QuantizedModel: no stages");
  for (size_t i = 0; i < stages_.size(); ++i) {
    const Stage& s = stages_[i];
    LOOM_CHECK(s.kind != Kind::Linear || s.linear, "QuantizedModel: stage ", i, " is a linear stage without a kernel");
    LOOM_CHECK(s.kind != Kind::Conv2d || s.conv, "QuantizedModel: stage ", i, " is a conv2d stage without a kernel");
    LOOM_CHECK(s.kind != Kind::MaxPool2d || (s.pool_kernel > 0 && s.pool_stride > 0 && s.pool_padding >= 0),
               "QuantizedModel: stage ", i, " has a bad max pool (kernel ", s.pool_kernel, ", stride ", s.pool_stride,
               ", padding ", s.pool_padding, ")");
  }
}

std::shared_ptr<QuantizedModel> QuantizedModel::to(Device device) const {
  auto moved = std::make_shared<QuantizedModel>(*this);
  moved->device_ = device;
  moved->device_layers_.clear();
  if (device.is_cpu()) return moved;
  moved->device_layers_.resize(stages_.size());
  for (size_t i = 0; i < stages_.size(); ++i) {
    const Stage& s = stages_[i];
    try {
      if (s.linear) moved->device_layers_[i] = detail::device_layer(*s.linear, device);
      if (s.conv) moved->device_layers_[i] = detail::device_layer(*s.conv, device);
    } catch (const Error& e) {
      throw Error("QuantizedModel::to: stage " + std::to_string(i) + " (from '" + s.source + "'): " + e.what());
    }
  }
  return moved;
}

Tensor QuantizedModel::forward_stage(size_t i, const Tensor& h) const {
  const Stage& s = stages_[i];
  if (!device_.is_cpu()) return detail::run_device_layer(device_layers_[i], h);
  // A float input (the model's first layer) is quantized by the kernel with its own input
  // qparams; an integer one must carry them already.
  return s.linear ? s.linear->forward(h) : s.conv->forward(h);
}

Tensor QuantizedModel::forward(const Tensor& x) const {
  LOOM_CHECK(x.defined() && x.dtype() == DType::Float32, "QuantizedModel: expected a Float32 input, got ",
             x.defined() ? dtype_name(x.dtype()) : "an undefined tensor");
  LOOM_CHECK(x.device() == device_, "QuantizedModel: the model is on ", device_, " but the input is on ",
             x.device());
  const bool cpu = device_.is_cpu();
  NoGradGuard no_grad;
  Tensor h = x.contiguous();
  Activation act;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const Stage& s = stages_[i];
    try {
      switch (s.kind) {
        case Kind::Linear:
        case Kind::Conv2d: {
          h = forward_stage(i, h);
          const Int8Output& out = params_of(s).output;
          act = {out.dtype != DType::Float32, out.scale, out.zero_point};
          if (act.quantized && s.output_quant_max < 255)
            h = cpu ? clamp_u8(h, 0, s.output_quant_max, /*owned=*/true) : clamp(h, 0, s.output_quant_max);
          break;
        }
        case Kind::MaxPool2d:
          if (!act.quantized)
            h = max_pool2d(h, {s.pool_kernel, s.pool_kernel}, {s.pool_stride, s.pool_stride},
                           {s.pool_padding, s.pool_padding});
          else if (cpu)
            h = int8_max_pool2d(h, s.pool_kernel, s.pool_stride, s.pool_padding);
          else
            h = loom::int8_max_pool2d(h, {s.pool_kernel, s.pool_kernel}, {s.pool_stride, s.pool_stride},
                                      {s.pool_padding, s.pool_padding});
          break;
        case Kind::Flatten:
          LOOM_CHECK(h.dim() >= 2, "expected at least [N, F], got ", h.sizes());
          h = h.reshape({h.size(0), -1});
          break;
        case Kind::ReLU:
          // max(x, 0) in real terms is max(q, zero_point) in integers.
          if (!act.quantized)
            h = h.relu();
          else
            h = cpu ? clamp_u8(h, act.zero_point, 255, /*owned=*/false) : clamp(h, act.zero_point, 255);
          break;
      }
    } catch (const Error& e) {
      throw Error("QuantizedModel: stage " + std::to_string(i) + " (" + stage_kind_name(s.kind) + ", from '" + s.source +
                  "'): " + e.what());
    }
  }
  if (!act.quantized) return h;
  return cpu ? dequantize_per_tensor_fast(h, act.scale, act.zero_point)
             : dequantize_per_tensor(h, act.scale, act.zero_point);
}

int64_t QuantizedModel::weight_bytes() const {
  int64_t bytes = 0;
  for (const Stage& s : stages_) {
    if (!s.linear && !s.conv) continue;
    const Int8LayerParams& p = params_of(s);
    bytes += p.weight.nbytes() + p.weight_scales.nbytes() + (p.bias.defined() ? p.bias.nbytes() : 0);
  }
  return bytes;
}

std::string QuantizedModel::to_string() const {
  std::ostringstream os;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const Stage& s = stages_[i];
    os << "  " << i << ": " << stage_kind_name(s.kind);
    if (s.linear) os << " " << s.linear->in_features() << " -> " << s.linear->out_features();
    if (s.conv) os << " " << s.conv->params().weight.sizes();
    if (s.linear || s.conv) {
      const Int8Output& out = params_of(s).output;
      os << (out.relu ? " + relu" : "") << ", output ";
      if (out.dtype == DType::Float32)
        os << "f32";
      else
        os << "u8 scale=" << out.scale << " zero_point=" << out.zero_point;
    }
    if (s.kind == Kind::MaxPool2d) os << " kernel " << s.pool_kernel << " stride " << s.pool_stride;
    os << "  (from '" << s.source << "')\n";
  }
  return os.str();
}

void QuantizedModel::save(const std::filesystem::path& path,
                          const std::map<std::string, std::string>& extra_metadata) const {
  nn::StateDict tensors;
  json stages = json::array();
  for (size_t i = 0; i < stages_.size(); ++i) {
    const Stage& s = stages_[i];
    json entry{{"kind", stage_kind_name(s.kind)}, {"source", s.source}};
    if (s.linear || s.conv) {
      const std::string prefix = "stages." + std::to_string(i) + ".";
      const Int8LayerParams& p = params_of(s);
      const Int8Output& out = p.output;
      entry["input"] = json{{"scale", p.input_scale}, {"zero_point", p.input_zero_point}};
      entry["output"] = out.dtype == DType::Float32
                            ? json{{"dtype", "f32"}}
                            : json{{"dtype", "u8"}, {"scale", out.scale}, {"zero_point", out.zero_point},
                                   {"quant_max", s.output_quant_max}};
      entry["relu"] = out.relu;
      tensors.insert(prefix + "weight", p.weight);
      tensors.insert(prefix + "weight_scale", p.weight_scales);
      if (p.bias.defined()) tensors.insert(prefix + "bias", p.bias);
      entry["bias"] = p.bias.defined();
      if (s.conv) {
        const Int8ConvOptions& c = s.conv->options();
        entry["stride"] = {c.stride_h, c.stride_w};
        entry["padding"] = {c.pad_h, c.pad_w};
        entry["dilation"] = {c.dilation_h, c.dilation_w};
        entry["groups"] = c.groups;
      }
    }
    if (s.kind == Kind::MaxPool2d)
      entry.update(json{{"kernel", s.pool_kernel}, {"stride", s.pool_stride}, {"padding", s.pool_padding}});
    stages.push_back(entry);
  }
  std::map<std::string, std::string> metadata = metadata_;
  for (const auto& [k, v] : extra_metadata) metadata[k] = v;
  metadata[kQuantizedModelKey] = json{{"format", kFormatVersion}, {"stages", stages}}.dump();
  nn::save_safetensors(path, tensors, metadata);
}

std::shared_ptr<QuantizedModel> QuantizedModel::load(const std::filesystem::path& path) {
  return from_safetensors(nn::load_safetensors(path), path.string());
}

std::shared_ptr<QuantizedModel> QuantizedModel::from_safetensors(nn::SafetensorsFile file, const std::string& name) {
  FieldReader r{name, "metadata"};
  auto it = file.metadata.find(kQuantizedModelKey);
  if (it == file.metadata.end())
    r.fail(std::string("no '") + kQuantizedModelKey +
           "' entry, so this is not a quantized model (a float model file goes to tools/quantize --model)");
  const json spec = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded() || !spec.is_object()) r.fail(std::string("'") + kQuantizedModelKey + "' is not a JSON object");
  if (r.integer(spec, "format", 0, 1 << 30) != kFormatVersion)
    r.fail("format " + spec["format"].dump() + " is not one this Loom reads (" + std::to_string(kFormatVersion) + ")");
  const json& list = r.at(spec, "stages");
  if (!list.is_array() || list.empty()) r.fail("'stages' must be a non-empty list");
  if (list.size() > 100000) r.fail("'stages' lists " + std::to_string(list.size()) + " stages, more than a model has");

  std::vector<Stage> stages;
  size_t used_tensors = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    r.where = "stage " + std::to_string(i);
    const json& kind = r.at(e, "kind");
    if (!kind.is_string()) r.fail("field 'kind' must be a string");
    Stage s;
    if (e.contains("source") && e["source"].is_string()) s.source = e["source"];
    const std::string k = kind;
    if (k == "linear" || k == "conv2d") {
      s.kind = k == "linear" ? Kind::Linear : Kind::Conv2d;
      const std::string prefix = "stages." + std::to_string(i) + ".";
      const Tensor& weight = r.tensor(file.tensors, prefix + "weight", DType::Int8);
      const Tensor& scales = r.tensor(file.tensors, prefix + "weight_scale", DType::Float32);
      const bool has_bias = r.boolean(e, "bias");
      Tensor bias = has_bias ? r.tensor(file.tensors, prefix + "bias", DType::Float32) : Tensor();
      for (int64_t c = 0; has_bias && c < bias.numel(); ++c)
        if (!std::isfinite(bias.data_ptr<float>()[c]))
          r.fail("bias[" + std::to_string(c) + "] of '" + prefix + "bias' is not finite");
      used_tensors += has_bias ? 3 : 2;
      for (int64_t c = 0; c < scales.numel(); ++c) {
        const float v = scales.data_ptr<float>()[c];
        if (!std::isnormal(v) || v <= 0) r.fail("weight_scale[" + std::to_string(c) + "] = " + std::to_string(v) +
                                                " is not a positive finite number (a normal float32)");
      }
      const json& in = r.at(e, "input");
      const float in_scale = r.positive_scale(in, "scale");
      const auto in_zp = static_cast<int32_t>(r.integer(in, "zero_point", 0, 255));
      const json& out = r.at(e, "output");
      const json& out_dtype = r.at(out, "dtype");
      Int8Output output;
      output.relu = r.boolean(e, "relu");
      if (out_dtype == "u8") {
        output.dtype = DType::UInt8;
        output.scale = r.positive_scale(out, "scale");
        output.zero_point = static_cast<int32_t>(r.integer(out, "zero_point", 0, 255));
        s.output_quant_max = r.integer(out, "quant_max", 1, 255);
      } else if (out_dtype != "f32") {
        r.fail("output dtype must be \"u8\" or \"f32\", got " + out_dtype.dump());
      }
      try {
        if (s.kind == Kind::Linear) {
          s.linear = std::make_shared<Int8Linear>(weight, scales, bias, in_scale, in_zp, output);
        } else {
          auto pair = [&](const char* field, int64_t lo) {
            const json& v = r.at(e, field);
            if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
                v[0].get<int64_t>() < lo || v[1].get<int64_t>() < lo || v[0].get<int64_t>() > 4096 ||
                v[1].get<int64_t>() > 4096)
              r.fail(std::string("field '") + field + "' must be two integers in [" + std::to_string(lo) +
                     ", 4096], got " + v.dump());
            return std::pair<int64_t, int64_t>{v[0].get<int64_t>(), v[1].get<int64_t>()};
          };
          auto [sh, sw] = pair("stride", 1);
          auto [ph, pw] = pair("padding", 0);
          auto [dh, dw] = pair("dilation", 1);
          const int64_t groups = r.integer(e, "groups", 1, 1 << 20);
          s.conv = std::make_shared<Int8Conv2d>(weight, scales, bias, in_scale, in_zp,
                                                Int8ConvOptions{.stride_h = sh,
                                                                .stride_w = sw,
                                                                .pad_h = ph,
                                                                .pad_w = pw,
                                                                .dilation_h = dh,
                                                                .dilation_w = dw,
                                                                .groups = groups,
                                                                .channels_last_output = i + 1 < list.size()},
                                                output);
        }
      } catch (const Error& err) {
        r.fail(err.what());
      }
    } else if (k == "max_pool2d") {
      s.kind = Kind::MaxPool2d;
      s.pool_kernel = r.integer(e, "kernel", 1, 4096);
      s.pool_stride = r.integer(e, "stride", 1, 4096);
      s.pool_padding = r.integer(e, "padding", 0, s.pool_kernel / 2);
    } else if (k == "flatten") {
      s.kind = Kind::Flatten;
    } else if (k == "relu") {
      s.kind = Kind::ReLU;
    } else {
      r.fail("unknown kind " + kind.dump() + " (expected linear, conv2d, max_pool2d, flatten or relu)");
    }
    stages.push_back(std::move(s));
  }
  r.where = "tensors";
  if (used_tensors != file.tensors.size())
    r.fail("the file holds " + std::to_string(file.tensors.size()) + " tensors but its stages use " +
           std::to_string(used_tensors));
  std::map<std::string, std::string> metadata = std::move(file.metadata);
  metadata.erase(kQuantizedModelKey);
  return std::make_shared<QuantizedModel>(std::move(stages), std::move(metadata));
}

}  // namespace loom::quant
