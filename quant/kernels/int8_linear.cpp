/* Int8Linear over oneDNN's int8 matmul (see int8_linear.h). */
#include "quant/kernels/int8_linear.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "ops/cpu/onednn_utils.h"
#include "ops/ops.h"
#include "quant/kernels/int8_split_weights.h"
#include "quant/kernels/quantize_kernels.h"

namespace loom::quant {

namespace onednn = cpu::onednn;
using dnnl::memory;

namespace detail {

void check_int8_output(std::string_view op, const Int8Output& output) {
  LOOM_CHECK(output.dtype == kFloat32 || output.dtype == kUInt8 || output.dtype == kInt8, op,
             ": expected an output dtype float32, uint8 or int8, got ", output.dtype);
  if (output.dtype == kFloat32) return;
  LOOM_CHECK(std::isfinite(output.scale) && output.scale > 0, op,
             ": expected a positive finite output scale, got ", output.scale);
  const int32_t lo = output.dtype == kUInt8 ? 0 : -128, hi = output.dtype == kUInt8 ? 255 : 127;
  LOOM_CHECK(output.zero_point >= lo && output.zero_point <= hi, op, ": output zero point ",
             output.zero_point, " is outside the range [", lo, ", ", hi, "] of ", output.dtype);
}

void check_int8_input(std::string_view op, const Tensor& x) {
  LOOM_CHECK(x.defined(), op, ": expected a defined input");
  LOOM_CHECK(x.is_cpu(), op, ": expected a CPU input, got one on ", x.device());
  LOOM_CHECK(x.dtype() == kUInt8 || x.dtype() == kFloat32, op, ": expected a uint8 (or float32) input, got ",
             x.dtype());
}

Int8LayerParams detached_layer_params(const Tensor& weight, const Tensor& weight_scales, const Tensor& bias,
                                      float input_scale, int32_t input_zero_point, const Int8Output& output) {
  Int8LayerParams p;
  p.weight = weight.detach().contiguous().clone();
  p.weight_scales = weight_scales.detach().contiguous().clone();
  if (bias.defined()) p.bias = bias.detach().contiguous().clone();
  p.input_scale = input_scale;
  p.input_zero_point = input_zero_point;
  p.output = output;
  return p;
}

ChannelParams channel_params(std::string_view op, const Tensor& weight, const Tensor& weight_scales,
                             const Tensor& bias, float input_scale, int32_t input_zero_point,
                             const Int8Output& output, bool fold_zero_point) {
  LOOM_CHECK(weight.defined() && weight.is_cpu(), op, ": expected a defined CPU weight");
  LOOM_CHECK(weight.dtype() == kInt8, op, ": expected an int8 weight, got ", weight.dtype());
  LOOM_CHECK(weight.dim() >= 2 && weight.size(0) > 0 && weight.numel() > 0, op,
             ": expected a non-empty weight [out, ...], got ", weight.sizes());
  const int64_t out = weight.size(0);
  LOOM_CHECK(weight_scales.defined() && weight_scales.is_cpu() && weight_scales.dtype() == kFloat32, op,
             ": expected float32 weight scales on the CPU");
  LOOM_CHECK(weight_scales.dim() == 1 && (weight_scales.numel() == out || weight_scales.numel() == 1), op,
             ": expected weight scales of shape [", out, "] (per channel) or [1] (per tensor), got ",
             weight_scales.sizes());
  if (bias.defined()) {
    LOOM_CHECK(bias.is_cpu() && bias.dtype() == kFloat32, op, ": expected a float32 CPU bias, got ",
               bias.dtype());
    LOOM_CHECK(bias.dim() == 1 && bias.numel() == out, op, ": expected a bias of shape [", out, "], got ",
               bias.sizes());
  }
  LOOM_CHECK(std::isfinite(input_scale) && input_scale > 0, op,
             ": expected a positive finite input scale, got ", input_scale);
  LOOM_CHECK(input_zero_point >= 0 && input_zero_point <= 255, op, ": input zero point ", input_zero_point,
             " is outside the range [0, 255] of uint8");
  check_int8_output(op, output);

  const std::vector<float> ws = weight_scales.to_vector<float>();
  for (float s : ws)
    LOOM_CHECK(std::isfinite(s) && s > 0, op, ": expected positive finite weight scales, got ", s);
  const bool fold = fold_zero_point && input_zero_point != 0;
  const bool per_channel = ws.size() > 1 || bias.defined() || fold;
  const int64_t channels = per_channel ? out : 1;

  ChannelParams p;
  const double requant = output.dtype == kFloat32 ? 1.0 : 1.0 / output.scale;
  std::vector<double> alpha(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    alpha[c] = static_cast<double>(input_scale) * ws[ws.size() == 1 ? 0 : c];
    p.scales.push_back(static_cast<float>(alpha[c] * requant));
  }
  if (bias.defined() || fold) {
    std::vector<float> b = bias.defined() ? bias.to_vector<float>() : std::vector<float>(out, 0.0f);
    Tensor w = weight.contiguous().view({out, -1});
    const int8_t* wp = w.data_ptr<int8_t>();
    const int64_t k = w.size(1);
    for (int64_t c = 0; c < out; ++c) {
      int64_t row_sum = 0;
      if (fold)
        for (int64_t i = 0; i < k; ++i) row_sum += wp[c * k + i];
      p.bias.push_back(static_cast<float>(b[c] / alpha[c] - static_cast<double>(input_zero_point) * row_sum));
    }
  }
  return p;
}

}  // namespace detail

namespace {

// One matmul primitive for one batch size, with the packed weights it reads.
struct Plan {
  dnnl::matmul prim;
  memory::desc src_md, dst_md, weights_md, bias_md, scratch_md;
  Tensor packed_weights;  // bytes in weights_md's layout (shared between plans of equal layout)
};

}  // namespace

struct Int8Linear::Impl {
  Int8LayerParams params;
  // Names for the fields of params, which the plans below read.
  Tensor& weight = params.weight;
  Tensor& weight_scales = params.weight_scales;
  Tensor& bias = params.bias;
  float& input_scale = params.input_scale;
  int32_t& input_zero_point = params.input_zero_point;
  Int8Output& output = params.output;
  int64_t in, out;
  // On CPUs whose int8 products saturate, the matmul reduces over [x, x] and the split weight
  // halves (int8_split_weights.h): `reduced` = 2 * in and gemm_weight [out, 2 * in].
  bool split = false;
  int64_t reduced = 0;
  Tensor gemm_weight;
  std::vector<float> scales, folded_bias;
  Tensor bias_tensor;  // folded_bias as a [1, out] float tensor (undefined when none)

  std::mutex packed_mutex;
  std::vector<std::pair<memory::desc, Tensor>> packed;  // weights per oneDNN layout
  mutable onednn::LruCache<Plan> plans{32};

  // The plain weight reordered into `md` (once per layout; usually a single layout serves all
  // batch sizes).
  Tensor packed_for(const memory::desc& md) {
    std::lock_guard<std::mutex> lock(packed_mutex);
    for (auto& [layout, bytes] : packed)
      if (layout == md) return bytes;
    // The weight [out, k] row-major is the matmul's B = W^T [k, out] with strides (1, k).
    memory::desc plain({reduced, out}, memory::data_type::s8, memory::dims{1, reduced});
    Tensor bytes = onednn::scratch_bytes(md.get_size());
    onednn::Reorder r = onednn::make_reorder(plain, md);
    if (r.needed)
      onednn::run_reorder(r, gemm_weight.data_ptr(), bytes.data_ptr());
    else
      std::memcpy(bytes.data_ptr(), gemm_weight.data_ptr(), md.get_size());
    packed.emplace_back(md, bytes);
    return bytes;
  }

  Plan make_plan(int64_t batch) {
    Plan p;
    p.src_md = memory::desc({batch, reduced}, memory::data_type::u8, memory::format_tag::ab);
    p.dst_md = memory::desc({batch, out}, onednn::data_type(output.dtype), memory::format_tag::ab);
    memory::desc any_weights({reduced, out}, memory::data_type::s8, memory::format_tag::any);
    dnnl::primitive_attr attr = onednn::user_scratchpad_attr();
    attr.set_output_scales(scales.size() > 1 ? 1 << 1 : 0, scales);
    if (output.dtype != kFloat32 && output.zero_point != 0)
      attr.set_zero_points(DNNL_ARG_DST, 0, {output.zero_point});
    if (output.relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd;
    if (bias_tensor.defined()) {
      p.bias_md = memory::desc({1, out}, memory::data_type::f32, memory::format_tag::ab);
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p.src_md, any_weights, p.bias_md, p.dst_md), attr,
                                        onednn::engine());
    } else {
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p.src_md, any_weights, p.dst_md), attr,
                                        onednn::engine());
    }
    p.prim = dnnl::matmul(pd);
    p.weights_md = pd.weights_desc();
    p.scratch_md = pd.scratchpad_desc();
    p.packed_weights = packed_for(p.weights_md);
    return p;
  }
};

Int8Linear::Int8Linear(const Tensor& weight, const Tensor& weight_scales, const Tensor& bias,
                       float input_scale, int32_t input_zero_point, Int8Output output)
    : impl_(std::make_unique<Impl>()) {
  constexpr std::string_view op = "Int8Linear";
  LOOM_CHECK(weight.defined() && weight.dim() == 2, op, ": expected a 2-D weight [out, in], got ",
             weight.defined() ? weight.sizes() : IntArrayRef{});
  detail::ChannelParams params =
      detail::channel_params(op, weight, weight_scales, bias, input_scale, input_zero_point, output, true);
  Impl& m = *impl_;
  m.params = detail::detached_layer_params(weight, weight_scales, bias, input_scale, input_zero_point, output);
  m.out = weight.size(0);
  m.in = weight.size(1);
  m.split = int8_products_saturate();
  m.reduced = m.split ? 2 * m.in : m.in;
  m.gemm_weight = m.split ? split_weight_halves(m.weight) : m.weight;
  m.scales = std::move(params.scales);
  m.folded_bias = std::move(params.bias);
  if (!m.folded_bias.empty()) {
    m.bias_tensor = empty({1, m.out}, TensorOptions(kFloat32));
    std::copy(m.folded_bias.begin(), m.folded_bias.end(), m.bias_tensor.data_ptr<float>());
  }
  // Build (and pack the weights for) the common batch sizes now: the first forward is then as
  // fast as the others, and a layout mismatch between batch sizes shows up here.
  onednn::guarded(op, [&] {
    for (int64_t batch : {int64_t{1}, int64_t{128}}) {
      onednn::ProductTeam team(batch * m.reduced * m.out);
      m.plans.get(onednn::Key().add(batch).add(omp_get_max_threads()), [&] { return m.make_plan(batch); });
    }
  });
}

Int8Linear::~Int8Linear() = default;
Int8Linear::Int8Linear(Int8Linear&&) noexcept = default;
Int8Linear& Int8Linear::operator=(Int8Linear&&) noexcept = default;

Tensor Int8Linear::forward(const Tensor& x) const {
  constexpr std::string_view op = "Int8Linear::forward";
  LOOM_CHECK(impl_ != nullptr, op, ": called on a moved-from layer");
  Impl& m = *impl_;
  detail::check_int8_input(op, x);
  LOOM_CHECK(x.dim() == 2 && x.size(1) == m.in, op, ": expected an input [N, ", m.in, "], got ", x.sizes());
  const int64_t batch = x.size(0);
  Tensor y = empty({batch, m.out}, TensorOptions(m.output.dtype));
  if (batch == 0) return y;
  // The matmul reads a row-major [N, in]; quantizing keeps a transposed input's layout.
  Tensor xq =
      (x.dtype() == kFloat32 ? quantize_per_tensor_fast(x, m.input_scale, m.input_zero_point, kUInt8) : x)
          .contiguous();
  if (m.split) xq = repeat_input_channels(xq, 1);  // [x, x] for the split weight halves
  onednn::guarded(op, [&] {
    // The threads the product's size pays for; a plan is built for (and keyed by) that count.
    onednn::ProductTeam team(batch * m.reduced * m.out);
    auto plan =
        m.plans.get(onednn::Key().add(batch).add(omp_get_max_threads()), [&] { return m.make_plan(batch); });
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_SRC] = onednn::wrap(plan->src_md, xq);
    args[DNNL_ARG_WEIGHTS] = onednn::wrap(plan->weights_md, plan->packed_weights);
    if (m.bias_tensor.defined()) args[DNNL_ARG_BIAS] = onednn::wrap(plan->bias_md, m.bias_tensor);
    args[DNNL_ARG_DST] = onednn::wrap(plan->dst_md, y);
    onednn::execute(plan->prim, args, plan->scratch_md);
  });
  return y;
}

int64_t Int8Linear::in_features() const {
  return impl_->in;
}
int64_t Int8Linear::out_features() const {
  return impl_->out;
}
const Int8LayerParams& Int8Linear::params() const {
  return impl_->params;
}

}  // namespace loom::quant
