/* Quantization parameters, their choice from a range, and quantize/dequantize (see qparams.h). */
#include "quant/qparams.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <sstream>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/parallel.h"
#include "ops/dim_geometry.h"
#include "ops/ops.h"

namespace loom::quant {

namespace {

// Loop sizes of a contiguous tensor seen as [outer, channels, inner] around the channel axis
// (channels = 1, inner = numel for per-tensor parameters).
struct ChannelLayout {
  int64_t outer = 1, channels = 1, inner = 1;
};

ChannelLayout channel_layout(const Tensor& x, const QParams& qp, const char* op) {
  ChannelLayout layout;
  if (!qp.per_channel()) {
    layout.inner = x.numel();
    return layout;
  }
  LOOM_CHECK(qp.axis < x.dim(), op, ": the qparams are per channel along axis ", qp.axis,
             " but the tensor has ", x.dim(), " dims (shape ", x.sizes(), ")");
  LOOM_CHECK(x.size(qp.axis) == qp.num_channels(), op, ": the qparams have ", qp.num_channels(),
             " channels but the tensor has ", x.size(qp.axis), " along axis ", qp.axis, " (shape ", x.sizes(),
             ")");
  const DimGeometry g = geometry_around(x, qp.axis);
  return {g.outer, g.size, g.inner};
}

// Host copies of the per-channel scales and zero points (one entry per tensor).
struct HostParams {
  std::vector<float> scale, inv_scale;
  std::vector<int32_t> zero_point;
};

HostParams host_params(const QParams& qp) {
  HostParams h;
  h.scale = qp.scale.to_vector<float>();
  h.zero_point = qp.zero_point.to_vector<int32_t>();
  h.inv_scale.resize(h.scale.size());
  for (size_t c = 0; c < h.scale.size(); ++c) h.inv_scale[c] = 1.0f / h.scale[c];
  return h;
}

// The float32 view of a floating input (a copy for other dtypes or layouts), out of autograd.
Tensor float_input(const Tensor& x, const char* op) {
  LOOM_CHECK(x.defined(), op, ": the input is undefined");
  LOOM_CHECK(x.is_floating_point(), op, ": expected a floating-point tensor, got ", x.dtype(), " of shape ",
             x.sizes());
  return x.detach().to(kCPU).to(kFloat32).contiguous();
}

// Calls f(begin, end, channel) over runs of one channel of a [outer, channels, inner] layout,
// in parallel over the flat index when there is enough work (a per-tensor layout is one run of
// numel elements, which still splits).
template <class F>
void for_each_channel_run(const ChannelLayout& layout, const F& f) {
  const int64_t numel = layout.outer * layout.channels * layout.inner;
  parallel_for(0, numel, kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end;) {
      const int64_t row = i / layout.inner, run_end = std::min(end, (row + 1) * layout.inner);
      f(i, run_end, row % layout.channels);
      i = run_end;
    }
  });
}

// round_half_even(x / scale) + zero_point clamped to [qmin, qmax], in float. rint rounds half to
// even in the default rounding mode (as nearbyint, which compilers will not inline); the
// comparisons are written so that NaN, which fails both, ends at qmin, and they vectorise.
inline float quantize_value(float x, float inv_scale, float zero_point, float qmin, float qmax) {
  float v = std::rint(x * inv_scale) + zero_point;
  v = v >= qmin ? v : qmin;
  return v <= qmax ? v : qmax;
}

// One run of quantize. The restrict pointers matter: an int8/uint8 store may alias anything,
// so without them every store would force the scale and the bounds to be reloaded.
template <class Q>
void quantize_run(const float* __restrict src, Q* __restrict dst, int64_t n, float inv_scale,
                  float zero_point, float qmin, float qmax) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = static_cast<Q>(static_cast<int32_t>(quantize_value(src[i], inv_scale, zero_point, qmin, qmax)));
}

}  // namespace

// ---- QParams -----------------------------------------------------------------------------------

int64_t QParams::num_channels() const {
  LOOM_CHECK(scale.defined(), "QParams::num_channels: the scale is undefined");
  return scale.numel();
}

float QParams::scale_at(int64_t c) const {
  LOOM_CHECK(c >= 0 && c < num_channels(), "QParams::scale_at: channel ", c, " out of range [0, ",
             num_channels(), ")");
  return scale.to(kCPU).to(kFloat32).contiguous().data_ptr<float>()[c];
}

int32_t QParams::zero_point_at(int64_t c) const {
  LOOM_CHECK(zero_point.defined(), "QParams::zero_point_at: the zero point is undefined");
  LOOM_CHECK(c >= 0 && c < zero_point.numel(), "QParams::zero_point_at: channel ", c, " out of range [0, ",
             zero_point.numel(), ")");
  return zero_point.to(kCPU).to(kInt32).contiguous().data_ptr<int32_t>()[c];
}

std::string QParams::to_string() const {
  std::ostringstream os;
  os << (per_channel() ? "per-channel(axis=" + std::to_string(axis) + ")" : std::string("per-tensor")) << ' '
     << (dtype == kUInt8  ? "u8"
         : dtype == kInt8 ? "s8"
                          : std::string(dtype_name(dtype)))
     << " [" << quant_min << ", " << quant_max << ']';
  if (!scale.defined() || !zero_point.defined()) return os.str() + " (undefined)";
  const std::vector<float> s = scale.to_vector<float>();
  const std::vector<int32_t> z = zero_point.to_vector<int32_t>();
  if (!per_channel() && s.size() == 1 && z.size() == 1) {
    os << " scale=" << s[0] << " zero_point=" << z[0];
    return os.str();
  }
  // Enough channels to recognise the parameters; a 1000-channel layer would flood the log.
  constexpr size_t kShown = 4;
  os << ' ' << s.size() << " channels scale=[";
  for (size_t c = 0; c < std::min(kShown, s.size()); ++c) os << (c ? ", " : "") << s[c];
  os << (s.size() > kShown ? ", ...]" : "]") << " zero_point=[";
  for (size_t c = 0; c < std::min(kShown, z.size()); ++c) os << (c ? ", " : "") << z[c];
  os << (z.size() > kShown ? ", ...]" : "]");
  return os.str();
}

void QParams::validate(const char* op) const {
  LOOM_CHECK(dtype == kUInt8 || dtype == kInt8, op, ": expected qparams for uint8 or int8, got ", dtype);
  const auto [lo, hi] = quant_range(dtype);
  LOOM_CHECK(lo <= quant_min && quant_min <= quant_max && quant_max <= hi, op,
             ": expected quant_min <= quant_max in [", lo, ", ", hi, "] for ", dtype, ", got [", quant_min,
             ", ", quant_max, "]");
  LOOM_CHECK(scale.defined() && zero_point.defined(), op, ": the qparams' scale or zero point is undefined");
  LOOM_CHECK(scale.dtype() == kFloat32 && scale.dim() == 1, op, ": expected a float32 scale [C], got ",
             scale.dtype(), " of shape ", scale.sizes());
  LOOM_CHECK(zero_point.dtype() == kInt32 && zero_point.sizes() == scale.sizes(), op,
             ": expected an int32 zero point of the scale's shape ", scale.sizes(), ", got ",
             zero_point.dtype(), " of shape ", zero_point.sizes());
  LOOM_CHECK(axis >= -1, op, ": expected axis -1 (per tensor) or >= 0 (per channel), got ", axis);
  LOOM_CHECK(per_channel() || scale.numel() == 1, op, ": per-tensor qparams (axis -1) need one scale, got ",
             scale.numel());
  const std::vector<float> s = scale.to_vector<float>();
  for (size_t c = 0; c < s.size(); ++c)
    LOOM_CHECK(std::isfinite(s[c]) && s[c] > 0, op, ": expected finite scales > 0, got ", s[c],
               " at channel ", c);
}

// ---- ranges and the choice of parameters -----------------------------------------------------

std::pair<int64_t, int64_t> quant_range(DType dtype, bool reduce_range) {
  return quant_range(dtype, reduce_range, 8);
}

std::pair<int64_t, int64_t> quant_range(DType dtype, bool reduce_range, int64_t bits) {
  LOOM_CHECK(dtype == kUInt8 || dtype == kInt8, "quant_range: expected uint8 or int8, got ", dtype);
  LOOM_CHECK(bits >= 2 && bits <= 8, "quant_range: expected 2 to 8 bits, got ", bits);
  const int64_t effective = reduce_range ? bits - 1 : bits;
  LOOM_CHECK(effective >= 2, "quant_range: ", bits, " bits with reduce_range leave fewer than 2 bits");
  if (dtype == kUInt8) return {0, (int64_t{1} << effective) - 1};
  return {-(int64_t{1} << (effective - 1)), (int64_t{1} << (effective - 1)) - 1};
}

namespace {

// One channel of _calculate_qparams, in float32 like torch's tensor arithmetic.
std::pair<float, int32_t> choose_one(float min, float max, DType dtype, bool symmetric, int64_t qmin,
                                     int64_t qmax, const char* op, int64_t channel) {
  const std::string where = channel < 0 ? std::string() : " at channel " + std::to_string(channel);
  LOOM_CHECK(std::isfinite(min) && std::isfinite(max), op, ": expected a finite range, got min=", min,
             " max=", max, where);
  LOOM_CHECK(min <= max, op, ": expected min <= max, got min=", min, " max=", max, where);
  const float min_neg = std::min(min, 0.0f), max_pos = std::max(max, 0.0f);
  constexpr float kEps = FLT_EPSILON;
  if (symmetric) {
    const float bound = std::max(-min_neg, max_pos);
    const float scale = std::max(bound / (static_cast<float>(qmax - qmin) / 2.0f), kEps);
    const int32_t zero_point = dtype == kUInt8 ? static_cast<int32_t>((qmin + qmax + 1) / 2) : 0;
    return {scale, zero_point};
  }
  const float scale = std::max((max_pos - min_neg) / static_cast<float>(qmax - qmin), kEps);
  const int64_t zero_point = qmin - static_cast<int64_t>(std::nearbyint(min_neg / scale));
  return {scale, static_cast<int32_t>(std::clamp(zero_point, qmin, qmax))};
}

void check_range_for(DType dtype, int64_t qmin, int64_t qmax, const char* op) {
  LOOM_CHECK(dtype == kUInt8 || dtype == kInt8, op, ": expected dtype uint8 or int8, got ", dtype);
  const auto [lo, hi] = quant_range(dtype);
  LOOM_CHECK(lo <= qmin && qmin < qmax && qmax <= hi, op, ": expected quant_min < quant_max in [", lo, ", ",
             hi, "] for ", dtype, ", got [", qmin, ", ", qmax, "]");
}

}  // namespace

QParams choose_qparams(float min, float max, DType dtype, bool symmetric, bool reduce_range) {
  LOOM_CHECK(dtype == kUInt8 || dtype == kInt8, "choose_qparams: expected dtype uint8 or int8, got ", dtype);
  const auto [qmin, qmax] = quant_range(dtype, reduce_range);
  return choose_qparams(min, max, dtype, symmetric, qmin, qmax);
}

QParams choose_qparams(float min, float max, DType dtype, bool symmetric, int64_t quant_min,
                       int64_t quant_max) {
  check_range_for(dtype, quant_min, quant_max, "choose_qparams");
  const auto [scale, zero_point] =
      choose_one(min, max, dtype, symmetric, quant_min, quant_max, "choose_qparams", -1);
  QParams qp;
  qp.scale = full({1}, scale, kFloat32);
  qp.zero_point = full({1}, zero_point, kInt32);
  qp.dtype = dtype;
  qp.quant_min = quant_min;
  qp.quant_max = quant_max;
  return qp;
}

QParams choose_qparams_per_channel(const Tensor& mins, const Tensor& maxs, int64_t axis, DType dtype,
                                   bool symmetric, bool reduce_range) {
  LOOM_CHECK(dtype == kUInt8 || dtype == kInt8,
             "choose_qparams_per_channel: expected dtype uint8 or int8, got ", dtype);
  const auto [qmin, qmax] = quant_range(dtype, reduce_range);
  return choose_qparams_per_channel(mins, maxs, axis, dtype, symmetric, qmin, qmax);
}

QParams choose_qparams_per_channel(const Tensor& mins, const Tensor& maxs, int64_t axis, DType dtype,
                                   bool symmetric, int64_t quant_min, int64_t quant_max) {
  constexpr const char* kOp = "choose_qparams_per_channel";
  check_range_for(dtype, quant_min, quant_max, kOp);
  LOOM_CHECK(axis >= 0, kOp, ": expected a channel axis >= 0, got ", axis);
  LOOM_CHECK(mins.defined() && maxs.defined(), kOp, ": mins or maxs is undefined");
  LOOM_CHECK(mins.dim() == 1 && mins.sizes() == maxs.sizes() && mins.numel() > 0, kOp,
             ": expected mins and maxs of one shape [C] (C > 0), got ", mins.sizes(), " and ", maxs.sizes());
  LOOM_CHECK(mins.is_floating_point() && maxs.is_floating_point(), kOp,
             ": expected floating mins and maxs, got ", mins.dtype(), " and ", maxs.dtype());
  const std::vector<float> lo = mins.to_vector<float>(), hi = maxs.to_vector<float>();
  const int64_t channels = mins.numel();
  QParams qp;
  qp.scale = empty({channels}, kFloat32);
  qp.zero_point = empty({channels}, kInt32);
  float* scale = qp.scale.data_ptr<float>();
  int32_t* zero_point = qp.zero_point.data_ptr<int32_t>();
  for (int64_t c = 0; c < channels; ++c)
    std::tie(scale[c], zero_point[c]) =
        choose_one(lo[c], hi[c], dtype, symmetric, quant_min, quant_max, kOp, c);
  qp.axis = axis;
  qp.dtype = dtype;
  qp.quant_min = quant_min;
  qp.quant_max = quant_max;
  return qp;
}

// ---- quantize / dequantize ---------------------------------------------------------------------

Tensor quantize(const Tensor& x, const QParams& qp) {
  constexpr const char* kOp = "quantize";
  qp.validate(kOp);
  Tensor input = float_input(x, kOp);
  const ChannelLayout layout = channel_layout(input, qp, kOp);
  const HostParams params = host_params(qp);
  Tensor out = empty(input.sizes(), qp.dtype);
  const float* src = input.data_ptr<float>();
  const float qmin = static_cast<float>(qp.quant_min), qmax = static_cast<float>(qp.quant_max);
  visit_dtype(qp.dtype, [&]<class Q>(TypeTag<Q>) {
    if constexpr (std::is_same_v<Q, uint8_t> || std::is_same_v<Q, int8_t>) {
      Q* dst = out.data_ptr<Q>();
      for_each_channel_run(layout, [&](int64_t begin, int64_t end, int64_t c) {
        quantize_run(src + begin, dst + begin, end - begin, params.inv_scale[c],
                     static_cast<float>(params.zero_point[c]), qmin, qmax);
      });
    }
  });
  return out;
}

Tensor dequantize(const Tensor& q, const QParams& qp) {
  constexpr const char* kOp = "dequantize";
  qp.validate(kOp);
  LOOM_CHECK(q.defined(), kOp, ": the input is undefined");
  LOOM_CHECK(q.dtype() == qp.dtype, kOp, ": expected a ", qp.dtype, " tensor (the qparams' dtype), got ",
             q.dtype(), " of shape ", q.sizes());
  Tensor input = q.to(kCPU).contiguous();
  const ChannelLayout layout = channel_layout(input, qp, kOp);
  const HostParams params = host_params(qp);
  Tensor out = empty(input.sizes(), kFloat32);
  float* dst = out.data_ptr<float>();
  visit_dtype(qp.dtype, [&]<class Q>(TypeTag<Q>) {
    if constexpr (std::is_same_v<Q, uint8_t> || std::is_same_v<Q, int8_t>) {
      const Q* src = input.data_ptr<Q>();
      for_each_channel_run(layout, [&](int64_t begin, int64_t end, int64_t c) {
        const float scale = params.scale[c];
        const int32_t zp = params.zero_point[c];
        for (int64_t i = begin; i < end; ++i)
          dst[i] = scale * static_cast<float>(static_cast<int32_t>(src[i]) - zp);
      });
    }
  });
  return out;
}

Tensor quantize_dequantize(const Tensor& x, const QParams& qp) {
  constexpr const char* kOp = "quantize_dequantize";
  qp.validate(kOp);
  Tensor input = float_input(x, kOp);
  const ChannelLayout layout = channel_layout(input, qp, kOp);
  const HostParams params = host_params(qp);
  Tensor out = empty(input.sizes(), kFloat32);
  const float* src = input.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const float qmin = static_cast<float>(qp.quant_min), qmax = static_cast<float>(qp.quant_max);
  for_each_channel_run(layout, [&](int64_t begin, int64_t end, int64_t c) {
    const float scale = params.scale[c], inv = params.inv_scale[c],
                zp = static_cast<float>(params.zero_point[c]);
    for (int64_t i = begin; i < end; ++i) dst[i] = scale * (quantize_value(src[i], inv, zp, qmin, qmax) - zp);
  });
  return x.dtype() == kFloat32 ? out : out.to(x.dtype());
}

}  // namespace loom::quant
