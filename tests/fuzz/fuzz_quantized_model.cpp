/*
 * libFuzzer target: quant::QuantizedModel::from_safetensors on arbitrary bytes, then one
 * forward pass on an input of the shape the model's first layer expects (docs/fuzzing.md).
 *
 * Loading checks the stage description (the "loom.quantized" metadata) against the tensors;
 * the forward pass then runs the int8 kernels on what passed, which is where a qparam or a
 * shape the checks let through would turn into an out-of-bounds access.
 *
 * A file may honestly describe a large model (a 4096-dilated 3x3 convolution is legal), and a
 * forward pass over it is arithmetic, not a bug. So the input's shape is pushed through the
 * stages first and the forward pass is skipped when an activation or a layer's work would
 * exceed the caps below: the fuzzer hunts for crashes, not for honest big computations.
 */
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "fuzz_util.h"
#include "nn/serialize/safetensors.h"
#include "quant/quantized_model.h"

namespace {

using namespace loom;
using Stage = quant::QuantizedModel::Stage;

constexpr int64_t kMaxActivation = int64_t{1} << 20;  // elements of any activation
constexpr int64_t kMaxLayerWork = int64_t{1} << 26;   // multiply-adds of one layer

// a * b, or nullopt past the caps (and before int64 could overflow).
std::optional<int64_t> capped_mul(int64_t a, int64_t b, int64_t cap) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out) || out > cap) return std::nullopt;
  return out;
}

// floor((in + 2 pad - effective_kernel) / stride) + 1, or 0 when the window does not fit.
int64_t window_out(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t room = in + 2 * pad - span;
  return room < 0 ? 0 : room / stride + 1;
}

// What pushing a shape through the stages found.
enum class Walk { kFits, kTooBig, kMismatch };

// Pushes `shape` through the stages as forward() would, without computing anything.
Walk walk(const quant::QuantizedModel& model, std::vector<int64_t> shape) {
  auto numel = [](const std::vector<int64_t>& s) -> std::optional<int64_t> {
    int64_t n = 1;
    for (int64_t d : s) {
      auto m = capped_mul(n, d, kMaxActivation);
      if (!m) return std::nullopt;
      n = *m;
    }
    return n;
  };
  if (!numel(shape)) return Walk::kTooBig;
  for (const Stage& s : model.stages()) {
    if (s.linear) {
      if (shape.size() != 2 || shape[1] != s.linear->in_features()) return Walk::kMismatch;
      if (!capped_mul(shape[0] * shape[1], s.linear->out_features(), kMaxLayerWork)) return Walk::kTooBig;
      shape = {shape[0], s.linear->out_features()};
    } else if (s.conv) {
      const quant::Int8ConvOptions& o = s.conv->options();
      const Tensor& w = s.conv->params().weight;
      if (shape.size() != 4 || shape[1] != w.size(1) * o.groups) return Walk::kMismatch;
      // No overflow: kernel dims are bounded by the file's size, strides, paddings and
      // dilations by the loader (4096).
      const int64_t ho = window_out(shape[2], w.size(2), o.stride_h, o.pad_h, o.dilation_h);
      const int64_t wo = window_out(shape[3], w.size(3), o.stride_w, o.pad_w, o.dilation_w);
      if (ho == 0 || wo == 0) return Walk::kMismatch;
      shape = {shape[0], w.size(0), ho, wo};
      const auto out = numel(shape);
      if (!out) return Walk::kTooBig;
      if (!capped_mul(*out, w.numel() / std::max<int64_t>(w.size(0), 1), kMaxLayerWork)) return Walk::kTooBig;
    } else if (s.kind == Stage::Kind::MaxPool2d) {
      if (shape.size() != 4) return Walk::kMismatch;
      const int64_t ho = window_out(shape[2], s.pool_kernel, s.pool_stride, s.pool_padding, 1);
      const int64_t wo = window_out(shape[3], s.pool_kernel, s.pool_stride, s.pool_padding, 1);
      if (ho == 0 || wo == 0) return Walk::kMismatch;
      shape = {shape[0], shape[1], ho, wo};
      const auto out = numel(shape);
      if (!out) return Walk::kTooBig;
      if (!capped_mul(*out, s.pool_kernel * s.pool_kernel, kMaxLayerWork)) return Walk::kTooBig;
    } else if (s.kind == Stage::Kind::Flatten) {
      if (shape.size() < 2) return Walk::kMismatch;
      shape = {shape[0], *numel(shape) / std::max<int64_t>(shape[0], 1)};
    }
    if (!numel(shape)) return Walk::kTooBig;
  }
  return Walk::kFits;
}

// An input for the model: [2, in] when the first weighted layer is a Linear; [1, C, S, S]
// when it is a Conv2d, with the smallest S (up to 64 above the least the convolution takes)
// for which every later stage fits, e.g. a Linear after a Flatten. Nullopt when the input or
// the work would exceed the caps. A shape the model rejects is returned too: rejecting it with
// loom::Error is behaviour under test.
std::optional<std::vector<int64_t>> choose_input(const quant::QuantizedModel& model) {
  std::vector<int64_t> shape = {2, 1, 4, 4};  // no weighted layer: any image
  for (const Stage& s : model.stages()) {
    if (s.linear) {
      shape = {2, s.linear->in_features()};
      break;
    }
    if (s.conv) {
      const quant::Int8ConvOptions& o = s.conv->options();
      const Tensor& w = s.conv->params().weight;
      const int64_t least = std::max<int64_t>(1, std::max(o.dilation_h * (w.size(2) - 1) + 1 - 2 * o.pad_h,
                                                          o.dilation_w * (w.size(3) - 1) + 1 - 2 * o.pad_w));
      const int64_t channels = w.size(1) * o.groups;
      shape = {1, channels, least, least};
      for (int64_t side = least; side <= least + 64; ++side) {
        const Walk w_side = walk(model, {1, channels, side, side});
        if (w_side == Walk::kFits) return std::vector<int64_t>{1, channels, side, side};
        if (w_side == Walk::kTooBig) break;  // larger sides only grow
      }
      break;
    }
  }
  if (walk(model, shape) == Walk::kTooBig) return std::nullopt;
  return shape;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto model = quant::QuantizedModel::from_safetensors(
        nn::load_safetensors_from_bytes(fuzz::as_chars(data, size), "fuzz"), "fuzz");
    volatile size_t description = model->to_string().size() + static_cast<size_t>(model->weight_bytes());
    (void)description;
    const std::optional<std::vector<int64_t>> shape = choose_input(*model);
    if (!shape) return 0;
    manual_seed(size);
    Tensor x = randn(*shape);
    Tensor y = model->forward(x);
    volatile double sink = fuzz::touch(y);
    (void)sink;
  } catch (const Error&) {
    // The loader's (or forward's) answer to a bad file.
  }
  return 0;
}
