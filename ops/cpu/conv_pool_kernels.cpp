/*
 * CPU kernels for 2-D convolution and pooling.
 *
 * Convolution (forward, backward-data, backward-weights) runs on oneDNN for f32 and bf16. The
 * primitives are created with format_tag::any, so oneDNN picks its blocked layouts, and reorders
 * convert from and to the user's NCHW tensors; channels_last tensors (NCHW sizes, NHWC strides)
 * are handed over as nhwc with no reorder and the primitive computes in nhwc. Primitives and
 * reorders are cached per shape/stride/dtype/parameter key (onednn_utils.h), and the blocked copies
 * of x and grad_out made by one kernel are reused by the weight-gradient kernel of the same step
 * (ReorderMemo below). With at most 8 input channels the input gradient is a GEMM + col2im
 * instead (oneDNN pads the channels to 16). f16 (no oneDNN f16 convolution on CPUs in 2.6)
 * computes in f32; f64 uses a reference im2col + Eigen GEMM path.
 *
 * Pooling is written as direct loops over (n, c) planes, in parallel: PyTorch's exact window,
 * padding, ceil_mode and divisor rules, and its max-pool indices (flat h * W + w per plane; a
 * oneDNN workspace holds window-local offsets instead). The loops accept any strides.
 */
#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "core/parallel.h"
#include "ops/copy_ops.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/onednn_utils.h"
#include "ops/dispatch.h"
#include "ops/linalg.h"
#include "ops/view_ops.h"

namespace loom::cpu {

namespace {

namespace dn = onednn;
using dnnl::memory;
using Tag = memory::format_tag;

// ================================================================================================
// Convolution: oneDNN
// ================================================================================================

enum class Layout : int64_t { Nchw, Nhwc, Strided };

// NCHW sizes with NHWC strides (PyTorch's channels_last), ignoring size-1 dims.
bool is_channels_last(const Tensor& t) {
  if (t.dim() != 4) return false;
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  const int64_t expected[4] = {h * w * c, 1, w * c, c};
  for (int d = 0; d < 4; ++d)
    if (t.size(d) != 1 && t.stride(d) != expected[d]) return false;
  return true;
}

Layout layout_of(const Tensor& t) {
  if (t.is_contiguous()) return Layout::Nchw;
  return is_channels_last(t) ? Layout::Nhwc : Layout::Strided;
}

// The user's activation tensor [N, C, H, W] as oneDNN sees it.
memory::desc activation_md(const Tensor& t, DType compute) {
  memory::dims dims(t.sizes().begin(), t.sizes().end());
  switch (layout_of(t)) {
    case Layout::Nchw:
      return memory::desc(dims, dn::data_type(compute), Tag::nchw);
    case Layout::Nhwc:
      return memory::desc(dims, dn::data_type(compute), Tag::nhwc);
    default:
      return dn::strided_md(t.sizes(), t.strides(), compute);
  }
}

// Weight dims as oneDNN wants them: [Cout, Cin/g, kh, kw], or [g, Cout/g, Cin/g, kh, kw] for groups.
memory::dims weight_dims(IntArrayRef w, int64_t groups) {
  if (groups == 1) return {w[0], w[1], w[2], w[3]};
  return {groups, w[0] / groups, w[1], w[2], w[3]};
}

memory::desc weight_md(const Tensor& w, int64_t groups, DType compute) {
  memory::dims dims = weight_dims(w.sizes(), groups);
  const auto dt = dn::data_type(compute);
  switch (layout_of(w)) {
    case Layout::Nchw:
      return memory::desc(dims, dt, groups == 1 ? Tag::oihw : Tag::goihw);
    case Layout::Nhwc:
      return memory::desc(dims, dt, groups == 1 ? Tag::ohwi : Tag::gohwi);
    default: {
      if (groups == 1) return dn::strided_md(w.sizes(), w.strides(), compute);
      const int64_t og = w.size(0) / groups;
      memory::dims strides{og * w.stride(0), w.stride(0), w.stride(1), w.stride(2), w.stride(3)};
      return memory::desc(dims, dt, strides);
    }
  }
}

// What the primitive is asked for: nhwc when the user's activations are channels_last (oneDNN's
// nhwc kernels are fast and no reorder is needed), else `any` (blocked) with reorders.
memory::desc primitive_activation_md(const memory::desc& user, Layout layout) {
  if (layout == Layout::Nhwc) return user;
  return memory::desc(user.dims(), user.data_type(), Tag::any);
}

struct ConvShape {
  memory::dims strides, dilates, pad_l, pad_r;
};

// oneDNN's dilation counts the holes (PyTorch's minus 1); the right padding is what makes
// oneDNN's output size equal PyTorch's floor rule (it may be smaller than the left, or negative).
ConvShape conv_shape(IntArrayRef x, IntArrayRef w, IntArrayRef y, const Conv2dParams& p) {
  ConvShape s;
  s.strides = {p.stride[0], p.stride[1]};
  s.dilates = {p.dilation[0] - 1, p.dilation[1] - 1};
  s.pad_l = {p.padding[0], p.padding[1]};
  s.pad_r.resize(2);
  for (int d = 0; d < 2; ++d) {
    const int64_t extent = (w[2 + d] - 1) * p.dilation[d] + 1;
    s.pad_r[d] = (y[2 + d] - 1) * p.stride[d] + extent - x[2 + d] - p.padding[d];
  }
  return s;
}

// Key parts common to the three convolution kernels.
dn::Key conv_key(int64_t kind, const Conv2dParams& p) {
  dn::Key key;
  key.add(kind).add(omp_get_max_threads());
  key.add(p.stride[0]).add(p.stride[1]).add(p.padding[0]).add(p.padding[1]);
  key.add(p.dilation[0]).add(p.dilation[1]).add(p.groups);
  return key;
}

dnnl::convolution_forward::primitive_desc forward_pd(const memory::desc& x, const memory::desc& w,
                                                     const memory::desc& bias, const memory::desc& y,
                                                     const ConvShape& s, const dnnl::primitive_attr& attr) {
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                       x, w, bias, y, s.strides, s.dilates, s.pad_l, s.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, dn::engine());
}

memory::desc any_like(const memory::desc& md) {
  return memory::desc(md.dims(), md.data_type(), Tag::any);
}

// ---- reordered activations kept between the kernels of one training step ----------------------
//
// With NCHW tensors a training step reorders the same activations twice: x in the forward and again
// in the weight gradient, grad_out in the data gradient and again in the weight gradient (PyTorch
// does the same). A few reordered copies are kept here, keyed by the identity of the tensor (its
// storage, held weakly, offset, geometry, dtype) and its version counter, and the weight-gradient
// kernel takes them over instead of reordering again. An in-place op on the tensor bumps the version
// and invalidates its entry; a dead storage drops it. (Writes through raw data pointers are not seen,
// just as autograd's saved-tensor check does not see them.)

class ReorderMemo {
 public:
  // The buffer holding t reordered to `to`, or an undefined tensor. `take` removes the entry.
  Tensor find(const Tensor& t, const memory::desc& to, bool take) {
    std::lock_guard<std::mutex> lock(mutex_);
    purge();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (!matches(*it, t, to)) continue;
      Tensor buffer = it->buffer;
      if (take) entries_.erase(it);
      return buffer;
    }
    return Tensor();
  }

  void put(const Tensor& t, const memory::desc& to, const Tensor& buffer) {
    if (buffer.nbytes() > kMaxBytes) return;
    std::lock_guard<std::mutex> lock(mutex_);
    purge();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (matches(*it, t, to)) {
        entries_.erase(it);
        break;
      }
    entries_.push_back({t.storage(), t.storage()->version(), t.storage_offset(), DimVector(t.sizes()),
                        DimVector(t.strides()), t.dtype(), to, buffer});
    if (entries_.size() > kMaxEntries) entries_.erase(entries_.begin());
  }

 private:
  static constexpr size_t kMaxEntries = 4;
  static constexpr size_t kMaxBytes = size_t{256} << 20;

  struct Entry {
    std::weak_ptr<StorageImpl> storage;
    uint64_t version;
    int64_t offset;
    DimVector sizes, strides;
    DType dtype;
    memory::desc to;
    Tensor buffer;
  };

  static bool matches(const Entry& e, const Tensor& t, const memory::desc& to) {
    return e.storage.lock() == t.storage() && e.version == t.storage()->version() &&
           e.offset == t.storage_offset() && e.dtype == t.dtype() && e.sizes == DimVector(t.sizes()) &&
           e.strides == DimVector(t.strides()) && e.to == to;
  }
  void purge() {
    std::erase_if(entries_, [](const Entry& e) { return e.storage.expired(); });
  }

  std::mutex mutex_;
  std::vector<Entry> entries_;
};

ReorderMemo& reorder_memo() {
  static ReorderMemo memo;
  return memo;
}

// `t` laid out as r.to: t's own data when no reorder is needed, else a reordered copy (from the memo
// when `reuse`, and recorded there when `remember`).
void* reordered_activation(const dn::Reorder& r, const Tensor& t, Tensor& holder, bool reuse, bool remember) {
  if (!r.needed) return t.data_ptr();
  if (reuse) {
    holder = reorder_memo().find(t, r.to, /*take=*/true);
    if (holder.defined()) return holder.data_ptr();
  }
  void* data = dn::reordered(r, t.data_ptr(), holder);
  if (remember) reorder_memo().put(t, r.to, holder);
  return data;
}

// ---- forward ----------------------------------------------------------------------------------

struct ConvForward {
  dnnl::convolution_forward prim;
  memory::desc x_md, w_md, y_md, bias_md, scratch_md;
  dn::Reorder x_in, w_in, y_out;
};

void onednn_conv_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Conv2dParams& p) {
  static dn::LruCache<ConvForward> cache(256);
  dn::Key key = conv_key(0, p);
  key.add(out).add(x).add(w).add(bias);
  auto e = cache.get(key, [&] {
    ConvForward c;
    const DType t = x.dtype();
    const Layout layout = layout_of(x);
    memory::desc x_user = activation_md(x, t), y_user = activation_md(out, t),
                 w_user = weight_md(w, p.groups, t);
    memory::desc bias_md =
        bias.defined() ? memory::desc({bias.size(0)}, dn::data_type(bias.dtype()), Tag::a) : memory::desc();
    ConvShape s = conv_shape(x.sizes(), w.sizes(), out.sizes(), p);
    auto pd = forward_pd(primitive_activation_md(x_user, layout), any_like(w_user), bias_md,
                         primitive_activation_md(y_user, layout), s, dn::user_scratchpad_attr());
    c.prim = dnnl::convolution_forward(pd);
    c.x_md = pd.src_desc();
    c.w_md = pd.weights_desc();
    c.y_md = pd.dst_desc();
    c.bias_md = bias_md;
    c.scratch_md = pd.scratchpad_desc();
    c.x_in = dn::make_reorder(x_user, c.x_md);
    c.w_in = dn::make_reorder(w_user, c.w_md);
    c.y_out = dn::make_reorder(c.y_md, y_user);
    return c;
  });

  Tensor x_buf, w_buf;
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_SRC] = dn::wrap(e->x_md, reordered_activation(e->x_in, x, x_buf, false, true));
  args[DNNL_ARG_WEIGHTS] = dn::wrap(e->w_md, dn::reordered(e->w_in, w.data_ptr(), w_buf));
  if (bias.defined()) args[DNNL_ARG_BIAS] = dn::wrap(e->bias_md, bias);
  dn::ReorderedOutput y(e->y_out, out.data_ptr());
  args[DNNL_ARG_DST] = dn::wrap(e->y_md, y.data());
  dn::execute(e->prim, args, e->scratch_md);
  y.finish();
}

// ---- backward data ----------------------------------------------------------------------------

struct ConvBackwardData {
  dnnl::convolution_backward_data prim;
  memory::desc gx_md, w_md, gy_md, scratch_md;
  dn::Reorder gy_in, w_in, gx_out;
};

void onednn_conv_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                               const Conv2dParams& p) {
  static dn::LruCache<ConvBackwardData> cache(256);
  dn::Key key = conv_key(1, p);
  key.add(grad_input).add(grad_out).add(w);
  auto e = cache.get(key, [&] {
    ConvBackwardData c;
    const DType t = grad_out.dtype();
    const Layout layout = layout_of(grad_out);
    memory::desc gx_user = activation_md(grad_input, t), gy_user = activation_md(grad_out, t),
                 w_user = weight_md(w, p.groups, t);
    ConvShape s = conv_shape(grad_input.sizes(), w.sizes(), grad_out.sizes(), p);
    memory::desc gx_any = primitive_activation_md(gx_user, layout),
                 gy_any = primitive_activation_md(gy_user, layout), w_any = any_like(w_user);
    auto hint = forward_pd(gx_any, w_any, memory::desc(), gy_any, s, dnnl::primitive_attr());
    dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, gx_any, w_any, gy_any,
                                               s.strides, s.dilates, s.pad_l, s.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(desc, dn::user_scratchpad_attr(), dn::engine(), hint);
    c.prim = dnnl::convolution_backward_data(pd);
    c.gx_md = pd.diff_src_desc();
    c.w_md = pd.weights_desc();
    c.gy_md = pd.diff_dst_desc();
    c.scratch_md = pd.scratchpad_desc();
    c.gy_in = dn::make_reorder(gy_user, c.gy_md);
    c.w_in = dn::make_reorder(w_user, c.w_md);
    c.gx_out = dn::make_reorder(c.gx_md, gx_user);
    return c;
  });

  Tensor gy_buf, w_buf;
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_DIFF_DST] = dn::wrap(e->gy_md, reordered_activation(e->gy_in, grad_out, gy_buf, false, true));
  args[DNNL_ARG_WEIGHTS] = dn::wrap(e->w_md, dn::reordered(e->w_in, w.data_ptr(), w_buf));
  dn::ReorderedOutput gx(e->gx_out, grad_input.data_ptr());
  args[DNNL_ARG_DIFF_SRC] = dn::wrap(e->gx_md, gx.data());
  dn::execute(e->prim, args, e->scratch_md);
  gx.finish();
}

// ---- backward weights -------------------------------------------------------------------------

struct ConvBackwardWeights {
  dnnl::convolution_backward_weights prim;
  memory::desc x_md, gw_md, gb_md, gy_md, scratch_md;
  dn::Reorder x_in, gy_in, gw_out, gb_out;
};

void onednn_conv_backward_weights(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                  const Tensor& x, const Conv2dParams& p) {
  static dn::LruCache<ConvBackwardWeights> cache(256);
  dn::Key key = conv_key(2, p);
  key.add(grad_weight).add(grad_bias).add(grad_out).add(x);
  auto e = cache.get(key, [&] {
    ConvBackwardWeights c;
    const DType t = x.dtype();
    const Layout layout = layout_of(x);
    memory::desc x_user = activation_md(x, t), gy_user = activation_md(grad_out, t),
                 gw_user = weight_md(grad_weight, p.groups, t);
    memory::desc gb_user =
        grad_bias.defined() ? memory::desc({grad_bias.size(0)}, dn::data_type(t), Tag::a) : memory::desc();
    ConvShape s = conv_shape(x.sizes(), grad_weight.sizes(), grad_out.sizes(), p);
    memory::desc x_any = primitive_activation_md(x_user, layout),
                 gy_any = primitive_activation_md(gy_user, layout);
    // Gradients of bf16 weights are accumulated in f32 where the implementation allows it, then
    // rounded once by the reorder to the user's tensor.
    auto make = [&](memory::data_type acc) {
      memory::desc gw_any(gw_user.dims(), acc, Tag::any);
      memory::desc gb_any = grad_bias.defined() ? memory::desc(gb_user.dims(), acc, Tag::a) : memory::desc();
      auto hint = forward_pd(x_any, gw_any, gb_any, gy_any, s, dnnl::primitive_attr());
      dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, x_any, gw_any,
                                                    gb_any, gy_any, s.strides, s.dilates, s.pad_l, s.pad_r);
      return dnnl::convolution_backward_weights::primitive_desc(desc, dn::user_scratchpad_attr(),
                                                                dn::engine(), hint);
    };
    dnnl::convolution_backward_weights::primitive_desc pd;
    if (t == DType::BFloat16) {
      try {
        pd = make(memory::data_type::f32);
      } catch (const dnnl::error&) {
        pd = make(memory::data_type::bf16);
      }
    } else {
      pd = make(dn::data_type(t));
    }
    c.prim = dnnl::convolution_backward_weights(pd);
    c.x_md = pd.src_desc();
    c.gw_md = pd.diff_weights_desc();
    c.gy_md = pd.diff_dst_desc();
    c.scratch_md = pd.scratchpad_desc();
    c.x_in = dn::make_reorder(x_user, c.x_md);
    c.gy_in = dn::make_reorder(gy_user, c.gy_md);
    c.gw_out = dn::make_reorder(c.gw_md, gw_user);
    if (grad_bias.defined()) {
      c.gb_md = pd.diff_bias_desc();
      c.gb_out = dn::make_reorder(c.gb_md, gb_user);
    }
    return c;
  });

  Tensor x_buf, gy_buf;
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_SRC] = dn::wrap(e->x_md, reordered_activation(e->x_in, x, x_buf, true, false));
  args[DNNL_ARG_DIFF_DST] = dn::wrap(e->gy_md, reordered_activation(e->gy_in, grad_out, gy_buf, true, false));
  dn::ReorderedOutput gw(e->gw_out, grad_weight.data_ptr());
  args[DNNL_ARG_DIFF_WEIGHTS] = dn::wrap(e->gw_md, gw.data());
  // Without a bias, gb_out is the empty (not needed) reorder and gb stays unused.
  dn::ReorderedOutput gb(e->gb_out, grad_bias.defined() ? grad_bias.data_ptr() : nullptr);
  if (grad_bias.defined()) args[DNNL_ARG_DIFF_BIAS] = dn::wrap(e->gb_md, gb.data());
  dn::execute(e->prim, args, e->scratch_md);
  gw.finish();
  gb.finish();
}

// ---- few input channels (first layers): backward data as a GEMM + col2im ------------------------
//
// oneDNN's convolution kernels pad the input channels to a block of 16, so with 3 input channels the
// input gradient costs 5x its arithmetic there (1.8 ms for 3->64, batch 32, 32x32, against 0.7 ms
// here). Over (tap, channel) = (i, j, c) it is one matmul that oneDNN runs well,
//   col[pixel, (i, j, c)] = sum_o grad_out[pixel, o] * w[o, c, i, j],
// and a col2im pass in which each input pixel gathers the col entries of the taps that read it.
// NCHW tensors use the transposed ("planar") form, so that no operand needs a transpose copy.
// (The weight gradient as a GEMM was measured too: no faster than oneDNN's kernel, so it stays.)

struct SmallCin {
  int64_t n, cin, h, w, cout, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw;
  int64_t taps() const { return cin * kh * kw; }
  int64_t pixels() const { return ho * wo; }
};

SmallCin small_cin_geometry(IntArrayRef x, IntArrayRef w, IntArrayRef y, const Conv2dParams& p) {
  return {x[0], x[1],        x[2],        x[3],         w[0],         w[2],          w[3],         y[2],
          y[3], p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1]};
}

// f32, no groups, at most 8 input channels, and activations in one plain format (both NCHW or both
// NHWC, which the ops layer arranges).
bool use_small_cin(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p) {
  if (x.dtype() != DType::Float32 || p.groups != 1 || x.size(1) > 8) return false;
  const Layout a = layout_of(x), b = layout_of(grad_out);
  return a == b && a != Layout::Strided;
}

// col2im for one NCHW image: g[c, ih, iw] += col[(c, i, j), (oh, ow)], a row at a time.
void col2im_planar(const float* __restrict col, float* __restrict g, const SmallCin& d) {
  const int64_t pixels = d.pixels();
  for (int64_t c = 0; c < d.cin; ++c)
    for (int64_t i = 0; i < d.kh; ++i)
      for (int64_t j = 0; j < d.kw; ++j) {
        // Output columns whose tap lands inside the input: iw = ow * sw + off_w in [0, W).
        const int64_t off_w = j * d.dw - d.pw;
        const int64_t ow_lo = off_w >= 0 ? 0 : (-off_w + d.sw - 1) / d.sw;
        const int64_t ow_hi = std::min(d.wo, d.w - off_w <= 0 ? 0 : (d.w - off_w - 1) / d.sw + 1);
        const float* plane = col + ((c * d.kh + i) * d.kw + j) * pixels;
        for (int64_t oh = 0; oh < d.ho; ++oh) {
          const int64_t ih = oh * d.sh - d.ph + i * d.dh;
          if (ih < 0 || ih >= d.h) continue;
          const float* __restrict src = plane + oh * d.wo;
          float* __restrict row = g + (c * d.h + ih) * d.w;
          if (d.sw == 1) {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) row[ow + off_w] += src[ow];
          } else {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) row[ow * d.sw + off_w] += src[ow];
          }
        }
      }
}

// col2im for one NHWC image: g[ih, iw, c] = the sum of col[(oh, ow), (i, j, c)] over the taps that read
// (ih, iw). CIN is the channel count when known at compile time (0: d.cin). With stride 1 the valid
// taps of each input row and column are ranges; the sums of an input row build up in `acc` [W, cin].
template <int CIN>
void col2im_rows(const float* __restrict col, float* __restrict g, const SmallCin& d, float* __restrict acc) {
  const int64_t cin = CIN ? CIN : d.cin, r = d.taps();
  if (d.sh == 1 && d.sw == 1) {
    std::vector<int64_t> j_lo(static_cast<size_t>(d.w)), j_hi(static_cast<size_t>(d.w));
    for (int64_t iw = 0; iw < d.w; ++iw) {  // tap j reads iw from output column iw + pw - j * dw
      int64_t lo = 0, hi = d.kw;
      while (lo < d.kw && iw + d.pw - lo * d.dw >= d.wo) ++lo;
      while (hi > lo && iw + d.pw - (hi - 1) * d.dw < 0) --hi;
      j_lo[iw] = lo;
      j_hi[iw] = hi;
    }
    for (int64_t ih = 0; ih < d.h; ++ih) {
      std::fill(acc, acc + d.w * cin, 0.0f);
      for (int64_t i = 0; i < d.kh; ++i) {
        const int64_t oh = ih + d.ph - i * d.dh;
        if (oh < 0 || oh >= d.ho) continue;
        const float* row = col + oh * d.wo * r + i * d.kw * cin;
        for (int64_t iw = 0; iw < d.w; ++iw) {
          const float* base = row + (iw + d.pw) * r;
          float* a = acc + iw * cin;
          for (int64_t j = j_lo[iw]; j < j_hi[iw]; ++j) {
            const float* src = base - j * d.dw * r + j * cin;
            for (int64_t c = 0; c < cin; ++c) a[c] += src[c];
          }
        }
      }
      std::memcpy(g + ih * d.w * cin, acc, sizeof(float) * static_cast<size_t>(d.w * cin));
    }
    return;
  }
  for (int64_t ih = 0; ih < d.h; ++ih)
    for (int64_t iw = 0; iw < d.w; ++iw) {
      float sum[8] = {};
      for (int64_t i = 0; i < d.kh; ++i) {
        const int64_t t = ih + d.ph - i * d.dh;  // = oh * sh
        if (t < 0 || t % d.sh != 0 || t / d.sh >= d.ho) continue;
        for (int64_t j = 0; j < d.kw; ++j) {
          const int64_t u = iw + d.pw - j * d.dw;  // = ow * sw
          if (u < 0 || u % d.sw != 0 || u / d.sw >= d.wo) continue;
          const float* src = col + ((t / d.sh) * d.wo + u / d.sw) * r + (i * d.kw + j) * cin;
          for (int64_t c = 0; c < cin; ++c) sum[c] += src[c];
        }
      }
      std::memcpy(g + (ih * d.w + iw) * cin, sum, sizeof(float) * static_cast<size_t>(cin));
    }
}

void small_cin_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                             const Conv2dParams& p) {
  const SmallCin d = small_cin_geometry(grad_input.sizes(), w.sizes(), grad_out.sizes(), p);
  const int64_t r = d.taps(), pixels = d.pixels();
  const bool nhwc = layout_of(grad_out) == Layout::Nhwc;
  // NHWC: col [images * Ho * Wo, (i, j, c)] = grad_out rows [images*Ho*Wo, Cout] x w as [Cout, (i, j, c)].
  // NCHW: col [images, (c, i, j), Ho * Wo] = w^T as [(c, i, j), Cout] x grad_out [images, Cout, Ho * Wo].
  Tensor w_matrix = nhwc ? contiguous(permute(w, {0, 2, 3, 1})).view({d.cout, r})
                         : make_view(contiguous(w), {r, d.cout}, {1, r}, 0);
  // Images go in chunks whose col (about 512 KiB) stays in cache between the matmul and col2im.
  const int64_t col_image = r * pixels, image = d.cin * d.h * d.w;
  const int64_t chunk = std::clamp<int64_t>((int64_t{1} << 17) / std::max<int64_t>(col_image, 1), 1, d.n);
  float* gx = grad_input.data_ptr<float>();
  for (int64_t first = 0; first < d.n; first += chunk) {
    const int64_t count = std::min(chunk, d.n - first);
    const int64_t offset = grad_out.storage_offset() + first * grad_out.stride(0);
    Tensor col = nhwc ? matmul(make_view(grad_out, {count * pixels, d.cout}, {d.cout, 1}, offset), w_matrix)
                      : matmul(w_matrix, make_view(grad_out, {count, d.cout, pixels},
                                                   {d.cout * pixels, pixels, 1}, offset));
    const float* cp = col.data_ptr<float>();
    parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> acc(static_cast<size_t>(d.w * d.cin));
      for (int64_t b = begin; b < end; ++b) {
        const float* c = cp + b * col_image;
        float* g = gx + (first + b) * image;
        if (!nhwc) {
          std::fill(g, g + image, 0.0f);
          col2im_planar(c, g, d);
        } else if (d.cin == 3) {
          col2im_rows<3>(c, g, d, acc.data());
        } else if (d.cin == 1) {
          col2im_rows<1>(c, g, d, acc.data());
        } else {
          col2im_rows<0>(c, g, d, acc.data());
        }
      }
    });
  }
}

// ================================================================================================
// Convolution: reference path (f64) — im2col and Eigen GEMM on contiguous NCHW data
// ================================================================================================

struct ConvDims {
  int64_t n, cin, h, w, cout, kh, kw, ho, wo, groups, cg, og;
  int64_t patch() const { return cg * kh * kw; }
};

ConvDims conv_dims(IntArrayRef x, IntArrayRef wt, IntArrayRef y, int64_t groups) {
  return {x[0], x[1], x[2], x[3], wt[0], wt[2], wt[3], y[2], y[3], groups, x[1] / groups, wt[0] / groups};
}

// col [cg*kh*kw, ho*wo] from one group of one image (x: [cg, h, w] contiguous planes).
template <class T>
void im2col(const T* x, T* col, const ConvDims& d, const Conv2dParams& p) {
  for (int64_t c = 0; c < d.cg; ++c)
    for (int64_t i = 0; i < d.kh; ++i)
      for (int64_t j = 0; j < d.kw; ++j) {
        T* row = col + ((c * d.kh + i) * d.kw + j) * d.ho * d.wo;
        for (int64_t oh = 0; oh < d.ho; ++oh) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
          for (int64_t ow = 0; ow < d.wo; ++ow) {
            const int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
            row[oh * d.wo + ow] =
                (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) ? x[(c * d.h + ih) * d.w + iw] : T(0);
          }
        }
      }
}

// x[cg, h, w] += the columns of col, scattered back to the pixels they were read from.
template <class T>
void col2im(const T* col, T* x, const ConvDims& d, const Conv2dParams& p) {
  for (int64_t c = 0; c < d.cg; ++c)
    for (int64_t i = 0; i < d.kh; ++i)
      for (int64_t j = 0; j < d.kw; ++j) {
        const T* row = col + ((c * d.kh + i) * d.kw + j) * d.ho * d.wo;
        for (int64_t oh = 0; oh < d.ho; ++oh) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
          if (ih < 0 || ih >= d.h) continue;
          for (int64_t ow = 0; ow < d.wo; ++ow) {
            const int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
            if (iw >= 0 && iw < d.w) x[(c * d.h + ih) * d.w + iw] += row[oh * d.wo + ow];
          }
        }
      }
}

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatMap = Eigen::Map<RowMat<T>>;
template <class T>
using ConstMatMap = Eigen::Map<const RowMat<T>>;

// Writes into `out` through a contiguous temporary when out is not contiguous.
template <class Body>
void with_contiguous_output(const Tensor& out, const Body& body) {
  if (out.is_contiguous()) {
    body(out);
    return;
  }
  Tensor tmp = empty(out.sizes(), out.options());
  body(tmp);
  copy_(out, tmp);
}

template <class T>
void reference_conv_forward(const Tensor& out_user, const Tensor& x_user, const Tensor& w_user,
                            const Tensor& bias, const Conv2dParams& p) {
  Tensor x = contiguous(x_user), w = contiguous(w_user), b = bias.defined() ? contiguous(bias) : Tensor();
  const ConvDims d = conv_dims(x.sizes(), w.sizes(), out_user.sizes(), p.groups);
  with_contiguous_output(out_user, [&](const Tensor& out) {
    const T* xp = x.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    const T* bp = b.defined() ? b.data_ptr<T>() : nullptr;
    T* yp = out.data_ptr<T>();
    parallel_for(0, d.n, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> col(static_cast<size_t>(d.patch() * d.ho * d.wo));
      for (int64_t n = begin; n < end; ++n)
        for (int64_t g = 0; g < d.groups; ++g) {
          im2col(xp + (n * d.cin + g * d.cg) * d.h * d.w, col.data(), d, p);
          ConstMatMap<T> W(wp + g * d.og * d.patch(), d.og, d.patch());
          ConstMatMap<T> C(col.data(), d.patch(), d.ho * d.wo);
          MatMap<T> Y(yp + (n * d.cout + g * d.og) * d.ho * d.wo, d.og, d.ho * d.wo);
          Y.noalias() = W * C;
          if (bp)
            for (int64_t o = 0; o < d.og; ++o) Y.row(o).array() += bp[g * d.og + o];
        }
    });
  });
}

template <class T>
void reference_conv_backward_data(const Tensor& gx_user, const Tensor& gy_user, const Tensor& w_user,
                                  const Conv2dParams& p) {
  Tensor gy = contiguous(gy_user), w = contiguous(w_user);
  const ConvDims d = conv_dims(gx_user.sizes(), w.sizes(), gy.sizes(), p.groups);
  with_contiguous_output(gx_user, [&](const Tensor& gx) {
    const T* gyp = gy.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    T* gxp = gx.data_ptr<T>();
    parallel_for(0, d.n, 1, [&](int64_t begin, int64_t end) {
      RowMat<T> col(d.patch(), d.ho * d.wo);
      std::fill(gxp + begin * d.cin * d.h * d.w, gxp + end * d.cin * d.h * d.w, T(0));
      for (int64_t n = begin; n < end; ++n)
        for (int64_t g = 0; g < d.groups; ++g) {
          ConstMatMap<T> W(wp + g * d.og * d.patch(), d.og, d.patch());
          ConstMatMap<T> GY(gyp + (n * d.cout + g * d.og) * d.ho * d.wo, d.og, d.ho * d.wo);
          col.noalias() = W.transpose() * GY;
          col2im(col.data(), gxp + (n * d.cin + g * d.cg) * d.h * d.w, d, p);
        }
    });
  });
}

template <class T>
void reference_conv_backward_weights(const Tensor& gw_user, const Tensor& gb_user, const Tensor& gy_user,
                                     const Tensor& x_user, const Conv2dParams& p) {
  Tensor gy = contiguous(gy_user), x = contiguous(x_user);
  const ConvDims d = conv_dims(x.sizes(), gw_user.sizes(), gy.sizes(), p.groups);
  with_contiguous_output(gw_user, [&](const Tensor& gw) {
    const T* gyp = gy.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    T* gwp = gw.data_ptr<T>();
    MatMap<T>(gwp, d.cout, d.patch()).setZero();
    RowMat<T> col(d.patch(), d.ho * d.wo);
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t g = 0; g < d.groups; ++g) {
        im2col(xp + (n * d.cin + g * d.cg) * d.h * d.w, col.data(), d, p);
        ConstMatMap<T> GY(gyp + (n * d.cout + g * d.og) * d.ho * d.wo, d.og, d.ho * d.wo);
        MatMap<T>(gwp + g * d.og * d.patch(), d.og, d.patch()).noalias() += GY * col.transpose();
      }
  });
  if (gb_user.defined()) {
    with_contiguous_output(gb_user, [&](const Tensor& gb) {
      const T* gyp = gy.data_ptr<T>();
      T* gbp = gb.data_ptr<T>();
      for (int64_t o = 0; o < d.cout; ++o) {
        T sum = 0;
        for (int64_t n = 0; n < d.n; ++n)
          sum += ConstMatMap<T>(gyp + (n * d.cout + o) * d.ho * d.wo, 1, d.ho * d.wo).sum();
        gbp[o] = sum;
      }
    });
  }
}

// ================================================================================================
// Convolution: the registered kernels, by dtype
// ================================================================================================

// f16: oneDNN 2.6 has no f16 convolution on CPUs, so the f16 kernels widen to f32 (keeping the
// layout of channels_last tensors) and round the result once.
Tensor widen(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor out =
      is_channels_last(t) && !t.is_contiguous()
          ? permute(empty({t.size(0), t.size(2), t.size(3), t.size(1)}, t.options().dtype(DType::Float32)),
                    {0, 3, 1, 2})
          : empty(t.sizes(), t.options().dtype(DType::Float32));
  copy_(out, t);
  return out;
}

void conv2d_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                   const Conv2dParams& p) {
  if (out.numel() == 0) return;
  switch (x.dtype()) {
    case DType::Float32:
    case DType::BFloat16:
      dn::guarded("conv2d", [&] { onednn_conv_forward(out, x, w, bias, p); });
      return;
    case DType::Float16: {
      Tensor out32 = widen(out);
      dn::guarded("conv2d", [&] { onednn_conv_forward(out32, widen(x), widen(w), widen(bias), p); });
      copy_(out, out32);
      return;
    }
    case DType::Float64:
      reference_conv_forward<double>(out, x, w, bias, p);
      return;
    default:
      LOOM_FAIL("conv2d: expected a floating-point tensor, got ", x.dtype());
  }
}

void conv2d_backward_input_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                                  const Conv2dParams& p) {
  if (grad_input.numel() == 0) return;
  switch (grad_out.dtype()) {
    case DType::Float32:
    case DType::BFloat16:
      if (use_small_cin(grad_input, grad_out, p)) {
        small_cin_backward_data(grad_input, grad_out, w, p);
        return;
      }
      dn::guarded("conv2d_backward_input", [&] { onednn_conv_backward_data(grad_input, grad_out, w, p); });
      return;
    case DType::Float16: {
      Tensor gx32 = widen(grad_input);
      dn::guarded("conv2d_backward_input",
                  [&] { onednn_conv_backward_data(gx32, widen(grad_out), widen(w), p); });
      copy_(grad_input, gx32);
      return;
    }
    case DType::Float64:
      reference_conv_backward_data<double>(grad_input, grad_out, w, p);
      return;
    default:
      LOOM_FAIL("conv2d_backward_input: expected a floating-point tensor, got ", grad_out.dtype());
  }
}

void conv2d_backward_weight_kernel(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                   const Tensor& x, const Conv2dParams& p) {
  if (grad_out.numel() == 0 || x.numel() == 0) {  // nothing reaches the weights
    fill_(grad_weight, 0);
    if (grad_bias.defined()) fill_(grad_bias, 0);
    return;
  }
  switch (x.dtype()) {
    case DType::Float32:
    case DType::BFloat16:
      dn::guarded("conv2d_backward_weight",
                  [&] { onednn_conv_backward_weights(grad_weight, grad_bias, grad_out, x, p); });
      return;
    case DType::Float16: {
      Tensor gw32 = widen(grad_weight), gb32 = widen(grad_bias);
      dn::guarded("conv2d_backward_weight",
                  [&] { onednn_conv_backward_weights(gw32, gb32, widen(grad_out), widen(x), p); });
      copy_(grad_weight, gw32);
      if (grad_bias.defined()) copy_(grad_bias, gb32);
      return;
    }
    case DType::Float64:
      reference_conv_backward_weights<double>(grad_weight, grad_bias, grad_out, x, p);
      return;
    default:
      LOOM_FAIL("conv2d_backward_weight: expected a floating-point tensor, got ", x.dtype());
  }
}

// ================================================================================================
// Pooling: direct loops over (n, c) planes
// ================================================================================================

// One [H, W] plane of a 4-D tensor: base pointer and element strides.
template <class T>
struct Plane {
  T* data;
  int64_t sh, sw;
  T& at(int64_t h, int64_t w) const { return data[h * sh + w * sw]; }
};

template <class T>
Plane<T> plane(const Tensor& t, int64_t index) {
  const int64_t c = t.size(1);
  const int64_t n = index / c, ch = index % c;
  T* base = static_cast<T*>(t.data_ptr()) + n * t.stride(0) + ch * t.stride(1);
  return {base, t.stride(2), t.stride(3)};
}

// Sum of in[h0:h1, w0:w1] in opmath. Rows of unit stride are summed in 8 independent lanes, which
// the compiler vectorises (a single running sum would be a serial chain of adds).
template <class T>
opmath_t<T> window_sum(const Plane<const T>& in, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
  using M = opmath_t<T>;
  M lanes[8] = {};
  M sum = 0;
  for (int64_t h = h0; h < h1; ++h) {
    const T* row = &in.at(h, 0);
    if (in.sw == 1 && w1 - w0 >= 16) {
      int64_t w = w0;
      for (; w + 8 <= w1; w += 8)
        for (int k = 0; k < 8; ++k) lanes[k] += static_cast<M>(row[w + k]);
      for (; w < w1; ++w) sum += static_cast<M>(row[w]);
    } else {
      for (int64_t w = w0; w < w1; ++w) sum += static_cast<M>(row[w * in.sw]);
    }
  }
  for (int k = 0; k < 8; ++k) sum += lanes[k];
  return sum;
}

// Runs body(first_plane, last_plane) over the N*C planes in parallel chunks sized by `work`
// (elementary steps per plane).
template <class Body>
void for_planes(int64_t planes, int64_t work, const Body& body) {
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(work, 1));
  parallel_for(0, planes, grain, body);
}

// The most common pooling (2x2, stride 2, no padding, contiguous planes): each output reads two
// pairs of neighbours, a pattern the compiler vectorises with even/odd shuffles.
// Every window must lie inside the input: ceil_mode can add a last, partial window.
template <class T, class I>
bool is_plain_2x2(const Pool2dParams& p, const Plane<const T>& in, const Plane<T>& out, const Plane<I>& idx,
                  int64_t H, int64_t W, int64_t Ho, int64_t Wo) {
  return p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 && p.stride[1] == 2 && p.padding[0] == 0 &&
         p.padding[1] == 0 && p.dilation[0] == 1 && p.dilation[1] == 1 && 2 * Ho <= H && 2 * Wo <= W &&
         in.sw == 1 && in.sh == W && out.sw == 1 && idx.sw == 1;
}

template <class T>
void max_pool_2x2(const T* __restrict in, T* __restrict out, int64_t* __restrict index, int64_t W, int64_t Ho,
                  int64_t Wo) {
  using M = opmath_t<T>;
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const T* r0 = in + 2 * oh * W;
    const T* r1 = r0 + W;
    T* o = out + oh * Wo;
    int64_t* ix = index + oh * Wo;
    const int64_t base = 2 * oh * W;
    for (int64_t ow = 0; ow < Wo; ++ow) {
      // Window order (0,0), (0,1), (1,0), (1,1): the first maximum wins ties, a NaN wins.
      M best = static_cast<M>(r0[2 * ow]);
      int64_t at = base + 2 * ow;
      const M b = static_cast<M>(r0[2 * ow + 1]);
      bool take = b > best || b != b;
      best = take ? b : best;
      at = take ? base + 2 * ow + 1 : at;
      const M c = static_cast<M>(r1[2 * ow]);
      take = c > best || c != c;
      best = take ? c : best;
      at = take ? base + W + 2 * ow : at;
      const M d = static_cast<M>(r1[2 * ow + 1]);
      take = d > best || d != d;
      best = take ? d : best;
      at = take ? base + W + 2 * ow + 1 : at;
      o[ow] = static_cast<T>(best);
      ix[ow] = at;
    }
  }
}

// The window is walked offset by offset, (i, j) in row-major order, and for each offset the
// whole output row is updated: the inner loop runs over ow with a fixed input stride, which
// vectorises, where a loop over each output's tiny window (2x2) would not. The visiting order
// per output is the same as a window scan, so ties keep the first maximum and a NaN wins, as in
// PyTorch.
template <class T>
void max_pool_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  using M = opmath_t<T>;
  const int64_t H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1], dh = p.dilation[0], dw = p.dilation[1];
  // Output columns [lo, hi) whose window column j lies inside the input.
  auto valid_columns = [&](int64_t j) {
    const int64_t offset = j * dw - pw;  // input column = ow * sw + offset
    const int64_t lo = offset >= 0 ? 0 : (-offset + sw - 1) / sw;
    const int64_t hi = W - 1 - offset < 0 ? 0 : std::min(Wo, (W - 1 - offset) / sw + 1);
    return std::pair{lo, std::max(lo, hi)};
  };
  for_planes(x.size(0) * x.size(1), Ho * Wo * kh * kw, [&](int64_t begin, int64_t end) {
    std::vector<M> best(static_cast<size_t>(Wo));
    std::vector<int64_t> best_index(static_cast<size_t>(Wo));
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<const T> in = plane<const T>(x, pl);
      Plane<T> o = plane<T>(out, pl);
      Plane<int64_t> idx = plane<int64_t>(indices, pl);
      if (is_plain_2x2(p, in, o, idx, H, W, Ho, Wo)) {
        max_pool_2x2(in.data, o.data, idx.data, W, Ho, Wo);
        continue;
      }
      for (int64_t oh = 0; oh < Ho; ++oh) {
        int64_t h_first = oh * sh - ph;
        while (h_first < 0) h_first += dh;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          int64_t w_first = ow * sw - pw;
          while (w_first < 0) w_first += dw;
          best[ow] = -std::numeric_limits<M>::infinity();
          best_index[ow] = h_first * W + w_first;
        }
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t h = oh * sh - ph + i * dh;
          if (h < 0 || h >= H) continue;
          const T* row = &in.at(h, 0);
          const int64_t row_stride = in.sw, row_base = h * W, step = sw;
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t offset = j * dw - pw;
            const auto [lo, hi] = valid_columns(j);
            // Locals, not captures: the stores below could alias captured int64s otherwise.
            M* __restrict b = best.data();
            int64_t* __restrict bi = best_index.data();
            for (int64_t ow = lo; ow < hi; ++ow) {
              const int64_t w = ow * step + offset;
              const M v = static_cast<M>(row[w * row_stride]);
              const bool take = v > b[ow] || v != v;  // v != v: NaN
              b[ow] = take ? v : b[ow];
              bi[ow] = take ? row_base + w : bi[ow];
            }
          }
        }
        for (int64_t ow = 0; ow < Wo; ++ow) {
          o.at(oh, ow) = static_cast<T>(best[ow]);
          idx.at(oh, ow) = best_index[ow];
        }
      }
    }
  });
}

template <class T>
void max_pool_backward(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices) {
  using M = opmath_t<T>;
  const int64_t H = grad_input.size(2), W = grad_input.size(3), Ho = grad_out.size(2), Wo = grad_out.size(3);
  for_planes(grad_input.size(0) * grad_input.size(1), Ho * Wo + H * W, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<T> gx = plane<T>(grad_input, pl);
      Plane<const T> gy = plane<const T>(grad_out, pl);
      Plane<const int64_t> idx = plane<const int64_t>(indices, pl);
      if (gx.sw == 1 && gx.sh == W) {
        std::fill(gx.data, gx.data + H * W, T(0));
      } else {
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) gx.at(h, w) = T(0);
      }
      if (gx.sw == 1 && gx.sh == W) {
        // Contiguous plane: the index is the offset. One range check per plane, not per element.
        int64_t bad = -1;
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t i = idx.at(oh, ow);
            if (i < 0 || i >= H * W) {
              bad = i;
              continue;
            }
            gx.data[i] = static_cast<T>(static_cast<M>(gx.data[i]) + static_cast<M>(gy.at(oh, ow)));
          }
        LOOM_CHECK(bad < 0, "max_pool2d_backward: index ", bad, " out of range for an input plane of ", H, "x", W);
        continue;
      }
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t i = idx.at(oh, ow);
          LOOM_CHECK(i >= 0 && i < H * W, "max_pool2d_backward: index ", i,
                     " out of range for an input plane of ", H, "x", W);
          T& dst = gx.at(i / W, i % W);
          dst = static_cast<T>(static_cast<M>(dst) + static_cast<M>(gy.at(oh, ow)));
        }
    }
  });
}

// PyTorch's average-pool window for output (oh, ow): the clipped input range and the divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};

inline AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const Pool2dParams& p) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]),
          w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
  const int64_t padded_size = (h1 - h0) * (w1 - w0);  // padding counts, ceil_mode overhang does not
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H);
  w1 = std::min(w1, W);
  return {h0, h1, w0, w1, p.count_include_pad ? padded_size : (h1 - h0) * (w1 - w0)};
}

template <class T>
void avg_pool_forward(const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  using M = opmath_t<T>;
  const int64_t H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  for_planes(x.size(0) * x.size(1), Ho * Wo * p.kernel[0] * p.kernel[1], [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<const T> in = plane<const T>(x, pl);
      Plane<T> o = plane<T>(out, pl);
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const AvgWindow win = avg_window(oh, ow, H, W, p);
          M sum = window_sum<T>(in, win.h0, win.h1, win.w0, win.w1);
          o.at(oh, ow) =
              static_cast<T>(win.h0 >= win.h1 || win.w0 >= win.w1 ? M(0) : sum / static_cast<M>(win.divisor));
        }
    }
  });
}

template <class T>
void avg_pool_backward(const Tensor& grad_input, const Tensor& grad_out, const Pool2dParams& p) {
  using M = opmath_t<T>;
  const int64_t H = grad_input.size(2), W = grad_input.size(3), Ho = grad_out.size(2), Wo = grad_out.size(3);
  for_planes(grad_input.size(0) * grad_input.size(1), Ho * Wo * p.kernel[0] * p.kernel[1] + H * W,
             [&](int64_t begin, int64_t end) {
               std::vector<M> acc(static_cast<size_t>(H * W));
               for (int64_t pl = begin; pl < end; ++pl) {
                 Plane<T> gx = plane<T>(grad_input, pl);
                 Plane<const T> gy = plane<const T>(grad_out, pl);
                 std::fill(acc.begin(), acc.end(), M(0));
                 for (int64_t oh = 0; oh < Ho; ++oh)
                   for (int64_t ow = 0; ow < Wo; ++ow) {
                     const AvgWindow win = avg_window(oh, ow, H, W, p);
                     if (win.h0 >= win.h1 || win.w0 >= win.w1) continue;
                     const M g = static_cast<M>(gy.at(oh, ow)) / static_cast<M>(win.divisor);
                     for (int64_t h = win.h0; h < win.h1; ++h)
                       for (int64_t w = win.w0; w < win.w1; ++w) acc[h * W + w] += g;
                   }
                 for (int64_t h = 0; h < H; ++h)
                   for (int64_t w = 0; w < W; ++w) gx.at(h, w) = static_cast<T>(acc[h * W + w]);
               }
             });
}

// PyTorch's adaptive bins: [floor(i * in / out), ceil((i + 1) * in / out)).
inline int64_t bin_start(int64_t i, int64_t in, int64_t out) {
  return (i * in) / out;
}
inline int64_t bin_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

template <class T>
void adaptive_avg_forward(const Tensor& out, const Tensor& x) {
  using M = opmath_t<T>;
  const int64_t H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  for_planes(x.size(0) * x.size(1), H * W + Ho * Wo, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<const T> in = plane<const T>(x, pl);
      Plane<T> o = plane<T>(out, pl);
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t h0 = bin_start(oh, H, Ho), h1 = bin_end(oh, H, Ho);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t w0 = bin_start(ow, W, Wo), w1 = bin_end(ow, W, Wo);
          M sum = window_sum<T>(in, h0, h1, w0, w1);
          o.at(oh, ow) = static_cast<T>(sum / static_cast<M>((h1 - h0) * (w1 - w0)));
        }
      }
    }
  });
}

template <class T>
void adaptive_avg_backward(const Tensor& grad_input, const Tensor& grad_out) {
  using M = opmath_t<T>;
  const int64_t H = grad_input.size(2), W = grad_input.size(3), Ho = grad_out.size(2), Wo = grad_out.size(3);
  for_planes(grad_input.size(0) * grad_input.size(1), 2 * H * W + Ho * Wo, [&](int64_t begin, int64_t end) {
    std::vector<M> acc(static_cast<size_t>(H * W));
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<T> gx = plane<T>(grad_input, pl);
      Plane<const T> gy = plane<const T>(grad_out, pl);
      std::fill(acc.begin(), acc.end(), M(0));
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t h0 = bin_start(oh, H, Ho), h1 = bin_end(oh, H, Ho);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t w0 = bin_start(ow, W, Wo), w1 = bin_end(ow, W, Wo);
          const M g = static_cast<M>(gy.at(oh, ow)) / static_cast<M>((h1 - h0) * (w1 - w0));
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) acc[h * W + w] += g;
        }
      }
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) gx.at(h, w) = static_cast<T>(acc[h * W + w]);
    }
  });
}

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  if (out.numel() == 0) return;
  visit_floating_dtype(x.dtype(), "max_pool2d",
                       [&](auto tag) { max_pool_forward<typename decltype(tag)::type>(out, indices, x, p); });
}

void max_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices,
                                const Pool2dParams&) {
  if (grad_input.numel() == 0) return;
  visit_floating_dtype(grad_out.dtype(), "max_pool2d_backward", [&](auto tag) {
    max_pool_backward<typename decltype(tag)::type>(grad_input, grad_out, indices);
  });
}

void avg_pool2d_kernel(const Tensor& out, const Tensor&, const Tensor& x, const Pool2dParams& p) {
  if (out.numel() == 0) return;
  visit_floating_dtype(x.dtype(), "avg_pool2d",
                       [&](auto tag) { avg_pool_forward<typename decltype(tag)::type>(out, x, p); });
}

void avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor&,
                                const Pool2dParams& p) {
  if (grad_input.numel() == 0) return;
  visit_floating_dtype(grad_out.dtype(), "avg_pool2d_backward", [&](auto tag) {
    avg_pool_backward<typename decltype(tag)::type>(grad_input, grad_out, p);
  });
}

void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& x) {
  if (out.numel() == 0) return;
  visit_floating_dtype(x.dtype(), "adaptive_avg_pool2d",
                       [&](auto tag) { adaptive_avg_forward<typename decltype(tag)::type>(out, x); });
}

void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out) {
  if (grad_input.numel() == 0) return;
  visit_floating_dtype(grad_out.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    adaptive_avg_backward<typename decltype(tag)::type>(grad_input, grad_out);
  });
}

}  // namespace

void register_conv_pool_kernels() {
  register_kernel<Op::conv2d>(DeviceType::CPU, conv2d_kernel);
  register_kernel<Op::conv2d_backward_input>(DeviceType::CPU, conv2d_backward_input_kernel);
  register_kernel<Op::conv2d_backward_weight>(DeviceType::CPU, conv2d_backward_weight_kernel);
  register_kernel<Op::max_pool2d>(DeviceType::CPU, max_pool2d_kernel);
  register_kernel<Op::max_pool2d_backward>(DeviceType::CPU, max_pool2d_backward_kernel);
  register_kernel<Op::avg_pool2d>(DeviceType::CPU, avg_pool2d_kernel);
  register_kernel<Op::avg_pool2d_backward>(DeviceType::CPU, avg_pool2d_backward_kernel);
  register_kernel<Op::adaptive_avg_pool2d>(DeviceType::CPU, adaptive_avg_pool2d_kernel);
  register_kernel<Op::adaptive_avg_pool2d_backward>(DeviceType::CPU, adaptive_avg_pool2d_backward_kernel);
}

}  // namespace loom::cpu
