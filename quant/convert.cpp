/* PreparedModel -> QuantizedModel (see convert.h). */
#include "quant/convert.h"

#include "core/error.h"
#include "core/grad_mode.h"
#include "nn/models/model_file.h"
#include "quant/qparams.h"

namespace loom::quant {
namespace {

const QParams& checked_activation(const QParams& qp, const std::string& where) {
  LOOM_CHECK(!qp.per_channel() && qp.dtype == DType::UInt8, "convert: ", where,
             ": expected per-tensor u8 activation qparams, got ", qp.to_string());
  return qp;
}

}  // namespace

std::shared_ptr<QuantizedModel> convert(const PreparedModel& prepared) {
  NoGradGuard no_grad;
  const QConfig& config = prepared.config();
  LOOM_CHECK(prepared.input_quant->calibrated(),
             "convert: the model has observed no data; run calibration batches through the prepared model first");
  QParams current = checked_activation(prepared.input_quant->qparams(), "the input");

  std::vector<QuantizedModel::Stage> stages;
  const size_t count = prepared.stages.size();
  for (size_t i = 0; i < count; ++i) {
    const auto& stage = prepared.stages.at<QuantStage>(static_cast<int64_t>(i));
    QuantizedModel::Stage q;
    q.kind = stage.kind;
    q.source = stage.source;
    if (stage.has_weight()) {
      // The weight as it is now (after QAT, the trained one), observed afresh.
      std::unique_ptr<Observer> observer = config.weight_observer();
      observer->observe(stage.weight);
      const QParams wq = observer->qparams();
      const Tensor weight = quantize(stage.weight.detach(), wq);
      const bool last = i + 1 == count;
      Int8Output output;
      if (last) {
        output.dtype = DType::Float32;  // the logits: dequantized by the kernel itself
        output.relu = stage.relu;
      } else {
        const std::string where = "stage " + std::to_string(i) + " (" + stage.source + ")";
        LOOM_CHECK(stage.output_quant->calibrated(), "convert: ", where, " has observed no data");
        const QParams out = checked_activation(stage.output_quant->qparams(), where);
        output = Int8Output{.dtype = DType::UInt8,
                            .scale = out.scale_at(0),
                            .zero_point = out.zero_point_at(0),
                            .relu = stage.relu};
        q.output_quant_max = out.quant_max;
      }
      const Tensor bias = stage.bias.detach().to(DType::Float32).contiguous();
      if (stage.kind == QuantStage::Kind::Linear) {
        q.linear = std::make_shared<Int8Linear>(weight, wq.scale, bias, current.scale_at(0),
                                                current.zero_point_at(0), output);
      } else {
        const nn::Conv2dOptions& c = stage.conv;
        q.conv = std::make_shared<Int8Conv2d>(weight, wq.scale, bias, current.scale_at(0), current.zero_point_at(0),
                                              Int8ConvOptions{.stride_h = c.stride.h,
                                                              .stride_w = c.stride.w,
                                                              .pad_h = c.padding.h,
                                                              .pad_w = c.padding.w,
                                                              .dilation_h = c.dilation.h,
                                                              .dilation_w = c.dilation.w,
                                                              .groups = c.groups,
                                                              .channels_last_output = !last},
                                              output);
      }
      if (!last) current = stage.output_quant->qparams();
    } else if (stage.kind == QuantStage::Kind::MaxPool2d) {
      q.pool_kernel = stage.pool_kernel;
      q.pool_stride = stage.pool_stride;
      q.pool_padding = stage.pool_padding;
    }
    stages.push_back(std::move(q));
  }
  std::map<std::string, std::string> metadata{{"loom.qconfig", config.to_string()}};
  if (!prepared.architecture().empty()) metadata[nn::kArchitectureKey] = prepared.architecture();
  return std::make_shared<QuantizedModel>(std::move(stages), std::move(metadata));
}

}  // namespace loom::quant
