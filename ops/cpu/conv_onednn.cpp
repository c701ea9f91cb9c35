/*
 * 2-D convolution on oneDNN (forward, backward-data, backward-weights) for f32 and bf16. The
 * primitives are created with format_tag::any, so oneDNN picks its blocked layouts, and reorders
 * convert from and to the user's NCHW tensors; channels_last tensors (NCHW sizes, NHWC strides)
 * are handed over as nhwc with no reorder and the primitive computes in nhwc. Primitives and
 * reorders are cached per shape/stride/dtype/parameter key (onednn_utils.h), and the blocked copies
 * of x and grad_out made by one kernel are reused by the weight-gradient kernel of the same step
 * (ReorderMemo below).
 */
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/conv_paths.h"
#include "ops/cpu/onednn_utils.h"

namespace loom::cpu::conv {

namespace {

namespace dn = onednn;
using dnnl::memory;
using Tag = memory::format_tag;

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

// Multiply-adds of a convolution producing y with weights w [OC, IC / groups, KH, KW]; its
// two gradients have as many.
int64_t conv_macs(const Tensor& y, const Tensor& w) {
  return y.numel() * (w.numel() / std::max<int64_t>(w.size(0), 1));
}

// Key parts common to the three convolution kernels; inside a ProductTeam, whose size is part
// of the key.
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

// A convolution x (*) w -> y: the user's tensors as oneDNN sees them, what the primitive is asked
// for (primitive_activation_md for `layout`, `any` for the weights) and the geometry.
struct ConvMds {
  memory::desc x, w, y;
  memory::desc x_any, w_any, y_any;
  ConvShape shape;
};

ConvMds conv_mds(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p, DType t,
                 Layout layout) {
  ConvMds m;
  m.x = activation_md(x, t);
  m.w = weight_md(w, p.groups, t);
  m.y = activation_md(y, t);
  m.x_any = primitive_activation_md(m.x, layout);
  m.w_any = any_like(m.w);
  m.y_any = primitive_activation_md(m.y, layout);
  m.shape = conv_shape(x.sizes(), w.sizes(), y.sizes(), p);
  return m;
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

// The cached primitive of each kernel, with its memory descriptors and reorders.

struct ConvForward {
  dnnl::convolution_forward prim;
  memory::desc x_md, w_md, y_md, bias_md, scratch_md;
  dn::Reorder x_in, w_in, y_out;
};

struct ConvBackwardData {
  dnnl::convolution_backward_data prim;
  memory::desc gx_md, w_md, gy_md, scratch_md;
  dn::Reorder gy_in, w_in, gx_out;
};

struct ConvBackwardWeights {
  dnnl::convolution_backward_weights prim;
  memory::desc x_md, gw_md, gb_md, gy_md, scratch_md;
  dn::Reorder x_in, gy_in, gw_out, gb_out;
};

}  // namespace

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

// ---- forward ---------------------------------------------------------------------------------------

void onednn_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  static dn::LruCache<ConvForward> cache(256);
  dn::ProductTeam team(conv_macs(out, w));
  dn::Key key = conv_key(0, p);
  key.add(out).add(x).add(w).add(bias);
  auto e = cache.get(key, [&] {
    ConvForward c;
    const ConvMds m = conv_mds(x, w, out, p, x.dtype(), layout_of(x));
    memory::desc bias_md =
        bias.defined() ? memory::desc({bias.size(0)}, dn::data_type(bias.dtype()), Tag::a) : memory::desc();
    auto pd = forward_pd(m.x_any, m.w_any, bias_md, m.y_any, m.shape, dn::user_scratchpad_attr());
    c.prim = dnnl::convolution_forward(pd);
    c.x_md = pd.src_desc();
    c.w_md = pd.weights_desc();
    c.y_md = pd.dst_desc();
    c.bias_md = bias_md;
    c.scratch_md = pd.scratchpad_desc();
    c.x_in = dn::make_reorder(m.x, c.x_md);
    c.w_in = dn::make_reorder(m.w, c.w_md);
    c.y_out = dn::make_reorder(c.y_md, m.y);
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

// ---- backward data ---------------------------------------------------------------------------------

void onednn_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w, const Conv2dParams& p) {
  static dn::LruCache<ConvBackwardData> cache(256);
  dn::ProductTeam team(conv_macs(grad_out, w));
  dn::Key key = conv_key(1, p);
  key.add(grad_input).add(grad_out).add(w);
  auto e = cache.get(key, [&] {
    ConvBackwardData c;
    const ConvMds m = conv_mds(grad_input, w, grad_out, p, grad_out.dtype(), layout_of(grad_out));
    const ConvShape& s = m.shape;
    auto hint = forward_pd(m.x_any, m.w_any, memory::desc(), m.y_any, s, dnnl::primitive_attr());
    dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, m.x_any, m.w_any, m.y_any,
                                               s.strides, s.dilates, s.pad_l, s.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(desc, dn::user_scratchpad_attr(), dn::engine(), hint);
    c.prim = dnnl::convolution_backward_data(pd);
    c.gx_md = pd.diff_src_desc();
    c.w_md = pd.weights_desc();
    c.gy_md = pd.diff_dst_desc();
    c.scratch_md = pd.scratchpad_desc();
    c.gy_in = dn::make_reorder(m.y, c.gy_md);
    c.w_in = dn::make_reorder(m.w, c.w_md);
    c.gx_out = dn::make_reorder(c.gx_md, m.x);
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

// ---- backward weights ------------------------------------------------------------------------------

void onednn_backward_weights(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                             const Tensor& x, const Conv2dParams& p) {
  static dn::LruCache<ConvBackwardWeights> cache(256);
  dn::ProductTeam team(conv_macs(grad_out, grad_weight));
  dn::Key key = conv_key(2, p);
  key.add(grad_weight).add(grad_bias).add(grad_out).add(x);
  auto e = cache.get(key, [&] {
    ConvBackwardWeights c;
    const DType t = x.dtype();
    const ConvMds m = conv_mds(x, grad_weight, grad_out, p, t, layout_of(x));
    const ConvShape& s = m.shape;
    memory::desc gb_user =
        grad_bias.defined() ? memory::desc({grad_bias.size(0)}, dn::data_type(t), Tag::a) : memory::desc();
    // Gradients of bf16 weights are accumulated in f32 where the implementation allows it, then
    // rounded once by the reorder to the user's tensor.
    auto make = [&](memory::data_type acc) {
      memory::desc gw_any(m.w.dims(), acc, Tag::any);
      memory::desc gb_any = grad_bias.defined() ? memory::desc(gb_user.dims(), acc, Tag::a) : memory::desc();
      auto hint = forward_pd(m.x_any, gw_any, gb_any, m.y_any, s, dnnl::primitive_attr());
      dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, m.x_any, gw_any,
                                                    gb_any, m.y_any, s.strides, s.dilates, s.pad_l, s.pad_r);
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
    c.x_in = dn::make_reorder(m.x, c.x_md);
    c.gy_in = dn::make_reorder(m.y, c.gy_md);
    c.gw_out = dn::make_reorder(c.gw_md, m.w);
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

}  // namespace loom::cpu::conv
