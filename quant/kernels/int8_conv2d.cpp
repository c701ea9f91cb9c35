/* Int8Conv2d over oneDNN's int8 convolution (see int8_conv2d.h). */
#include "quant/kernels/int8_conv2d.h"

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ops/cpu/onednn_utils.h"
#include "ops/ops.h"
#include "quant/kernels/int8_split_weights.h"
#include "quant/kernels/quantize_kernels.h"

namespace loom::quant {

namespace onednn = cpu::onednn;
using dnnl::memory;

namespace detail {

bool is_channels_last(const Tensor& x) {
  if (x.dim() != 4) return false;
  const int64_t order[4] = {1, 3, 2, 0};  // innermost first
  int64_t expected = 1;
  for (int64_t d : order) {
    if (x.size(d) != 1 && x.stride(d) != expected) return false;
    expected *= x.size(d);
  }
  return true;
}

}  // namespace detail

namespace {

// The descriptor of an activation [N, C, H, W] with a format tag where one fits: strided_md
// would describe a batch-1 NHWC tensor as "cdab" (it normalises the strides of size-1 dims),
// which compares unequal to the primitive's "acdb" and would cost a reorder per call.
memory::desc activation_md(const Tensor& t) {
  const memory::dims dims(t.sizes().begin(), t.sizes().end());
  const auto dt = onednn::data_type(t.dtype());
  if (t.is_contiguous()) return memory::desc(dims, dt, memory::format_tag::nchw);
  if (detail::is_channels_last(t)) return memory::desc(dims, dt, memory::format_tag::nhwc);
  return onednn::strided_md(t);
}

// One convolution primitive for one input shape and layout, with what it reads.
struct ConvPlan {
  dnnl::convolution_forward prim;
  memory::desc src_md, weights_md, bias_md, dst_md, scratch_md;
  onednn::Reorder src_reorder;  // the user's input layout -> the primitive's (when they differ)
  onednn::Reorder dst_reorder;  // the primitive's output layout -> the returned tensor's
  std::vector<int64_t> out_sizes;
  Tensor packed_weights;
};

int64_t out_extent(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

}  // namespace

struct Int8Conv2d::Impl {
  Int8LayerParams params;
  // Names for the fields of params, which the plans below read.
  Tensor& weight = params.weight;
  Tensor& weight_scales = params.weight_scales;
  Tensor& bias = params.bias;
  float& input_scale = params.input_scale;
  int32_t& input_zero_point = params.input_zero_point;
  Int8ConvOptions options;
  Int8Output& output = params.output;
  int64_t out, in, kh, kw;
  // On CPUs whose int8 products saturate, the convolution reads each group's input channels
  // twice and the split weight halves (int8_split_weights.h): gemm_in = 2 * in channels.
  bool split = false;
  int64_t gemm_in = 0;
  Tensor gemm_weight;
  std::vector<float> scales, folded_bias;
  Tensor bias_tensor;
  // The zero point given to oneDNN (when it is not folded into the bias): an int32 [1] tensor.
  Tensor src_zero_point;

  std::mutex packed_mutex;
  std::vector<std::pair<memory::desc, Tensor>> packed;
  mutable onednn::LruCache<ConvPlan> plans{32};

  memory::desc plain_weights_md() const {
    const int64_t g = options.groups;
    if (g == 1) return memory::desc({out, gemm_in, kh, kw}, memory::data_type::s8, memory::format_tag::oihw);
    return memory::desc({g, out / g, gemm_in / g, kh, kw}, memory::data_type::s8, memory::format_tag::goihw);
  }

  Tensor packed_for(const memory::desc& md) {
    std::lock_guard<std::mutex> lock(packed_mutex);
    for (auto& [layout, bytes] : packed)
      if (layout == md) return bytes;
    Tensor bytes = onednn::scratch_bytes(md.get_size());
    onednn::Reorder r = onednn::make_reorder(plain_weights_md(), md);
    if (r.needed)
      onednn::run_reorder(r, gemm_weight.data_ptr(), bytes.data_ptr());
    else
      std::memcpy(bytes.data_ptr(), gemm_weight.data_ptr(), md.get_size());
    packed.emplace_back(md, bytes);
    return bytes;
  }

  // x: the u8 input (any strides).
  ConvPlan make_plan(const Tensor& x) {
    ConvPlan p;
    const int64_t n = x.size(0), h = x.size(2), w = x.size(3);
    const int64_t ho = out_extent(h, kh, options.stride_h, options.pad_h, options.dilation_h);
    const int64_t wo = out_extent(w, kw, options.stride_w, options.pad_w, options.dilation_w);
    p.out_sizes = {n, out, ho, wo};
    const auto any = memory::format_tag::any;
    memory::desc src_any({n, gemm_in, h, w}, memory::data_type::u8, any);
    memory::desc dst_any({n, out, ho, wo}, onednn::data_type(output.dtype), any);
    memory::desc weights_any =
        options.groups == 1
            ? memory::desc({out, gemm_in, kh, kw}, memory::data_type::s8, any)
            : memory::desc({options.groups, out / options.groups, gemm_in / options.groups, kh, kw},
                           memory::data_type::s8, any);
    dnnl::primitive_attr attr = onednn::user_scratchpad_attr();
    attr.set_output_scales(scales.size() > 1 ? 1 << 1 : 0, scales);
    if (src_zero_point.defined()) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    if (output.dtype != kFloat32 && output.zero_point != 0)
      attr.set_zero_points(DNNL_ARG_DST, 0, {output.zero_point});
    if (output.relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    const memory::dims strides{options.stride_h, options.stride_w};
    const memory::dims dilates{options.dilation_h - 1, options.dilation_w - 1};  // oneDNN counts the gaps
    // The right/bottom padding equal to the left/top gives torch's floor-mode output size: oneDNN
    // checks (in - extent + 2 pad) / stride + 1 == out with the same floor division.
    const memory::dims pad{options.pad_h, options.pad_w};
    const auto prop = dnnl::prop_kind::forward_inference;
    const auto alg = dnnl::algorithm::convolution_direct;
    using Desc = dnnl::convolution_forward::desc;
    dnnl::convolution_forward::primitive_desc pd;
    if (bias_tensor.defined()) {
      p.bias_md = memory::desc({out}, memory::data_type::f32, memory::format_tag::a);
      pd = {Desc(prop, alg, src_any, weights_any, p.bias_md, dst_any, strides, dilates, pad, pad), attr,
            onednn::engine()};
    } else {
      pd = {Desc(prop, alg, src_any, weights_any, dst_any, strides, dilates, pad, pad), attr,
            onednn::engine()};
    }
    p.prim = dnnl::convolution_forward(pd);
    p.src_md = pd.src_desc();
    p.dst_md = pd.dst_desc();
    p.weights_md = pd.weights_desc();
    p.scratch_md = pd.scratchpad_desc();
    memory::desc user_src = activation_md(x);
    if (detail::is_channels_last(x)) {  // e.g. a contiguous C == 1 input is NHWC as well
      memory::desc nhwc({n, gemm_in, h, w}, memory::data_type::u8, memory::format_tag::nhwc);
      if (nhwc == p.src_md) user_src = nhwc;
    }
    p.src_reorder = onednn::make_reorder(user_src, p.src_md);
    p.dst_reorder = onednn::make_reorder(p.dst_md, activation_md(output_tensor_like(p.out_sizes)));
    p.packed_weights = packed_for(p.weights_md);
    return p;
  }

  // An uninitialised output [N, out, Ho, Wo]: contiguous NCHW, or NHWC-strided when asked.
  Tensor output_tensor_like(const std::vector<int64_t>& s) const {
    if (!options.channels_last_output) return empty(s, TensorOptions(output.dtype));
    return empty({s[0], s[2], s[3], s[1]}, TensorOptions(output.dtype)).permute({0, 3, 1, 2});
  }
};

Int8Conv2d::Int8Conv2d(const Tensor& weight, const Tensor& weight_scales, const Tensor& bias,
                       float input_scale, int32_t input_zero_point, Int8ConvOptions options,
                       Int8Output output)
    : impl_(std::make_unique<Impl>()) {
  constexpr std::string_view op = "Int8Conv2d";
  LOOM_CHECK(weight.defined() && weight.dim() == 4, op,
             ": expected a 4-D weight [out, in / groups, kh, kw], got ",
             weight.defined() ? weight.sizes() : IntArrayRef{});
  const Int8ConvOptions& o = options;
  LOOM_CHECK(o.stride_h >= 1 && o.stride_w >= 1, op, ": expected strides >= 1, got ", o.stride_h, ", ",
             o.stride_w);
  LOOM_CHECK(o.pad_h >= 0 && o.pad_w >= 0, op, ": expected paddings >= 0, got ", o.pad_h, ", ", o.pad_w);
  LOOM_CHECK(o.dilation_h >= 1 && o.dilation_w >= 1, op, ": expected dilations >= 1, got ", o.dilation_h,
             ", ", o.dilation_w);
  LOOM_CHECK(o.groups >= 1 && weight.size(0) % o.groups == 0, op, ": expected groups >= 1 dividing the ",
             weight.size(0), " output channels, got ", o.groups);
  const bool fold = o.pad_h == 0 && o.pad_w == 0;
  detail::ChannelParams params =
      detail::channel_params(op, weight, weight_scales, bias, input_scale, input_zero_point, output, fold);
  Impl& m = *impl_;
  m.params = detail::detached_layer_params(weight, weight_scales, bias, input_scale, input_zero_point, output);
  m.options = options;
  m.out = weight.size(0);
  m.in = weight.size(1) * o.groups;
  m.split = int8_products_saturate();
  m.gemm_in = m.split ? 2 * m.in : m.in;
  m.gemm_weight = m.split ? split_weight_halves(m.weight) : m.weight;
  m.kh = weight.size(2);
  m.kw = weight.size(3);
  m.scales = std::move(params.scales);
  m.folded_bias = std::move(params.bias);
  if (!m.folded_bias.empty()) {
    m.bias_tensor = empty({m.out}, TensorOptions(kFloat32));
    std::copy(m.folded_bias.begin(), m.folded_bias.end(), m.bias_tensor.data_ptr<float>());
  }
  if (!fold && input_zero_point != 0) {
    m.src_zero_point = empty({1}, TensorOptions(kInt32));
    *m.src_zero_point.data_ptr<int32_t>() = input_zero_point;
  }
}

Int8Conv2d::~Int8Conv2d() = default;
Int8Conv2d::Int8Conv2d(Int8Conv2d&&) noexcept = default;
Int8Conv2d& Int8Conv2d::operator=(Int8Conv2d&&) noexcept = default;

Tensor Int8Conv2d::forward(const Tensor& x) const {
  constexpr std::string_view op = "Int8Conv2d::forward";
  LOOM_CHECK(impl_ != nullptr, op, ": called on a moved-from layer");
  Impl& m = *impl_;
  detail::check_int8_input(op, x);
  LOOM_CHECK(x.dim() == 4 && x.size(1) == m.in, op, ": expected an input [N, ", m.in, ", H, W], got ",
             x.sizes());
  const Int8ConvOptions& o = m.options;
  const int64_t ho = out_extent(x.size(2), m.kh, o.stride_h, o.pad_h, o.dilation_h);
  const int64_t wo = out_extent(x.size(3), m.kw, o.stride_w, o.pad_w, o.dilation_w);
  LOOM_CHECK(x.size(2) + 2 * o.pad_h >= o.dilation_h * (m.kh - 1) + 1 &&
                 x.size(3) + 2 * o.pad_w >= o.dilation_w * (m.kw - 1) + 1,
             op, ": input ", x.sizes(), " with padding (", o.pad_h, ", ", o.pad_w, ") is smaller than the ",
             m.kh, "x", m.kw, " kernel (dilation ", o.dilation_h, ", ", o.dilation_w, ")");
  if (x.size(0) == 0) return m.output_tensor_like({0, m.out, ho, wo});
  Tensor xq =
      x.dtype() == kFloat32 ? quantize_per_tensor_fast(x, m.input_scale, m.input_zero_point, kUInt8) : x;
  if (m.split) xq = repeat_input_channels(xq, o.groups);  // each group's channels twice
  Tensor y;
  onednn::guarded(op, [&] {
    // The threads the product's size pays for; a plan is built for (and keyed by) that count.
    onednn::ProductTeam team(x.size(0) * m.out * ho * wo * (m.gemm_in / o.groups) * m.kh * m.kw);
    auto plan =
        m.plans.get(onednn::Key().add(xq).add(omp_get_max_threads()), [&] { return m.make_plan(xq); });
    y = m.output_tensor_like(plan->out_sizes);
    Tensor src_holder;
    void* src = onednn::reordered(plan->src_reorder, xq.data_ptr(), src_holder);
    onednn::ReorderedOutput dst(plan->dst_reorder, y.data_ptr());
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_SRC] = onednn::wrap(plan->src_md, src);
    args[DNNL_ARG_WEIGHTS] = onednn::wrap(plan->weights_md, plan->packed_weights);
    if (m.bias_tensor.defined()) args[DNNL_ARG_BIAS] = onednn::wrap(plan->bias_md, m.bias_tensor);
    if (m.src_zero_point.defined())
      args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] =
          onednn::wrap(memory::desc({1}, memory::data_type::s32, memory::format_tag::a), m.src_zero_point);
    args[DNNL_ARG_DST] = onednn::wrap(plan->dst_md, dst.data());
    onednn::execute(plan->prim, args, plan->scratch_md);
    dst.finish();
  });
  return y;
}

int64_t Int8Conv2d::in_channels() const {
  return impl_->in;
}
int64_t Int8Conv2d::out_channels() const {
  return impl_->out;
}
const Int8ConvOptions& Int8Conv2d::options() const {
  return impl_->options;
}
const Int8LayerParams& Int8Conv2d::params() const {
  return impl_->params;
}

}  // namespace loom::quant
