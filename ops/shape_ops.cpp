/*
 * Joining, indexing and rearranging (see shape_ops.h): validation, output allocation and
 * dispatch. Index values are checked here, before any kernel writes, so that a bad index is
 * a loom::Error naming the op, the value and the size on every backend. stack and repeat are
 * composites of views, cat and copies, and so differentiable through those.
 *
 * For autograd each primitive runs with grad mode off and is then recorded (compute_then_record):
 * the attributes (normalised dims) are made after the computation has validated the
 * arguments, so that a bad call throws exactly what it throws unrecorded. Index tensors are
 * recorded as inputs (the formulas read them) but get no gradient.
 */
#include "ops/shape_ops.h"

#include <algorithm>
#include <limits>
#include <span>
#include <string>

#include "core/parallel.h"
#include "ops/autograd_hook.h"
#include "ops/copy_ops.h"
#include "ops/dispatch.h"
#include "ops/factories.h"
#include "ops/op_utils.h"
#include "ops/pad_source.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

// PyTorch's legacy placeholder: a 1-D tensor of size 0 is skipped by cat whatever its shape.
bool is_legacy_empty(const Tensor& t) {
  return t.dim() == 1 && t.sizes()[0] == 0;
}

// The index as a contiguous int64 tensor (int32 is accepted and widened).
Tensor index_as_int64(const Tensor& index, std::string_view op) {
  check_defined(index, op, "index");
  LOOM_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op,
             ": expected an int64 or int32 index tensor, got ", index.dtype());
  return contiguous(to(index, kInt64));
}

// Throws unless every value of a contiguous int64 index lies in [0, size). Each chunk first
// finds its min and max (a vectorised pass) and looks for the culprit only when they are out.
void check_index_range(const Tensor& index, int64_t size, int64_t dim, std::string_view op) {
  // Reading a CUDA index here would wait for the GPU at every call: its kernels check the values
  // on the device instead, reported at the host's next wait (ops/cuda/shape_kernels.cpp).
  if (index.is_cuda()) return;
  const int64_t* p = index.data_ptr<int64_t>();
  parallel_for(0, index.numel(), kParallelGrain * 4, [&](int64_t b, int64_t e) {
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    for (int64_t i = b; i < e; ++i) {
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
    }
    if (lo >= 0 && hi < size) return;
    for (int64_t i = b; i < e; ++i)
      LOOM_CHECK(p[i] >= 0 && p[i] < size, op, ": index ", p[i], " is out of range for dim ", dim,
                 " with size ", size);
  });
}

// A 0-dim tensor as 1-D of size 1 (the indexing ops treat scalars so, as PyTorch does).
Tensor at_least_1d(const Tensor& t) {
  return t.dim() == 0 ? view(t, {1}) : t;
}

PadMode parse_pad_mode(std::string_view mode, std::string_view op) {
  if (mode == "constant") return PadMode::Constant;
  if (mode == "reflect") return PadMode::Reflect;
  if (mode == "replicate") return PadMode::Replicate;
  if (mode == "circular") return PadMode::Circular;
  LOOM_FAIL(op, ": unknown padding mode '", mode,
            "' (expected 'constant', 'reflect', 'replicate' or 'circular')");
}
// The kernels pass PadMode to pad_source as its kPad* code (the CUDA launchers cannot see PadMode).
static_assert(static_cast<int>(PadMode::Constant) == kPadConstant &&
              static_cast<int>(PadMode::Reflect) == kPadReflect &&
              static_cast<int>(PadMode::Replicate) == kPadReplicate &&
              static_cast<int>(PadMode::Circular) == kPadCircular);

// Shape of `sizes` padded by `pads` ((left, right) pairs from the last dim), after checking
// the pads: an even count, no more pairs than dims, a non-negative result, for reflect pads
// smaller than the dim they mirror, for circular pads at most the dim they wrap (PyTorch's
// rules), and for replicate a non-empty dim to repeat.
DimVector padded_shape(IntArrayRef sizes, IntArrayRef pads, PadMode mode, std::string_view op) {
  const int64_t nd = static_cast<int64_t>(sizes.size()), pairs = static_cast<int64_t>(pads.size() / 2);
  LOOM_CHECK(pads.size() % 2 == 0, op,
             ": expected (left, right) pairs of padding, got an odd number of values ", pads);
  LOOM_CHECK(pairs <= nd, op, ": ", pairs, " padding pairs ", pads, " for a ", nd, "-D tensor of shape ",
             sizes);
  DimVector out(sizes);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t d = nd - 1 - p, left = pads[2 * p], right = pads[2 * p + 1], size = sizes[d];
    if (mode == PadMode::Reflect) {
      LOOM_CHECK(left < size && right < size, op, ": reflect padding (", left, ", ", right, ") of dim ", d,
                 " must be smaller than its size ", size, " (input shape ", sizes, ")");
    } else if (mode == PadMode::Circular) {
      LOOM_CHECK(left <= size && right <= size, op, ": circular padding (", left, ", ", right, ") of dim ", d,
                 " must be at most its size ", size, " (input shape ", sizes, ")");
    } else if (mode == PadMode::Replicate) {
      LOOM_CHECK(size > 0 || (left <= 0 && right <= 0), op, ": replicate padding (", left, ", ", right,
                 ") of dim ", d, " has no element to repeat: the dim is empty (input shape ", sizes, ")");
    }
    out[d] = size + left + right;
    LOOM_CHECK(out[d] >= 0, op, ": padding (", left, ", ", right, ") of dim ", d, " with size ", size,
               " gives the negative size ", out[d], " (input shape ", sizes, ")");
  }
  return out;
}

// Runs compute() with grad mode off, then records it as `op` of `inputs` with the attributes
// make_attrs() returns.
template <Op op, class Compute, class MakeAttrs>
Tensor compute_then_record(std::span<const Tensor> inputs, const MakeAttrs& make_attrs, const Compute& compute) {
  Tensor out;
  {
    AutoGradMode below_autograd(false);
    out = compute();
  }
  const typename OpTraits<op>::Attrs attrs = make_attrs();
  grad_recorder()->record(op, inputs, std::span<const Tensor>(&out, 1), &attrs);
  return out;
}

template <Op op, class Compute, class MakeAttrs>
Tensor compute_then_record(std::initializer_list<Tensor> inputs, const MakeAttrs& make_attrs,
                           const Compute& compute) {
  return compute_then_record<op>(std::span<const Tensor>(inputs.begin(), inputs.size()), make_attrs, compute);
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  if (GradMode::is_enabled() &&
      std::any_of(tensors.begin(), tensors.end(), [](const Tensor& t) { return t.requires_grad(); })) {
    return compute_then_record<Op::cat>(
        tensors,
        [&] {
          // dim as cat normalised it: against the first tensor that is not a legacy empty one
          for (const Tensor& t : tensors)
            if (!is_legacy_empty(t)) return DimAttrs{wrap_dim(dim, t.dim(), "cat")};
          return DimAttrs{0};
        },
        [&] { return cat(tensors, dim); });
  }
  LOOM_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  DType dtype = tensors[0].defined() ? tensors[0].dtype() : kFloat32;
  size_t ref = tensors.size();  // first tensor that is not a legacy empty one
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    LOOM_CHECK(t.defined(), "cat: tensor ", i, " is an undefined tensor");
    check_same_device(tensors[0], t, "cat");
    dtype = promote_types(dtype, t.dtype());
    LOOM_CHECK(t.dim() > 0, "cat: zero-dimensional tensor (at position ", i, ") cannot be concatenated");
    if (ref == tensors.size() && !is_legacy_empty(t)) ref = i;
  }
  if (ref == tensors.size()) return empty({0}, tensors[0].options().dtype(dtype));
  const Tensor& first = tensors[ref];
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  DimVector shape(first.sizes());
  shape[d] = 0;
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (is_legacy_empty(t)) continue;
    LOOM_CHECK(t.dim() == first.dim(), "cat: tensors must have the same number of dims, but tensor ", ref,
               " has shape ", first.sizes(), " and tensor ", i, " has shape ", t.sizes());
    for (int64_t e = 0; e < t.dim(); ++e) {
      LOOM_CHECK(e == d || t.sizes()[e] == first.sizes()[e],
                 "cat: sizes of tensors must match except in dim ", d, ", but tensor ", ref, " has shape ",
                 first.sizes(), " and tensor ", i, " has shape ", t.sizes(), " (mismatch in dim ", e, ")");
    }
    shape[d] += t.sizes()[d];
    parts.push_back(to(t, dtype));
  }
  Tensor out = empty(shape, first.options().dtype(dtype));
  if (out.numel() > 0) get_kernel<Op::cat>(out.device())(out, parts, d);
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  LOOM_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  check_defined(tensors[0], "stack", "tensor 0");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    LOOM_CHECK(tensors[i].defined(), "stack: tensor ", i, " is an undefined tensor");
    LOOM_CHECK(tensors[i].sizes() == tensors[0].sizes(),
               "stack: expected tensors of one shape, but tensor 0 has shape ", tensors[0].sizes(),
               " and tensor ", i, " has shape ", tensors[i].sizes());
    parts.push_back(unsqueeze(tensors[i], d));
  }
  return cat(parts, d);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  if (should_record(x)) {
    return compute_then_record<Op::index_select>(
        {x, index}, [&] { return DimAttrs{wrap_dim(dim, x.dim(), "index_select")}; },
        [&] { return index_select(x, dim, index); });
  }
  check_defined(x, "index_select");
  Tensor idx = index_as_int64(index, "index_select");
  check_same_device(x, idx, "index_select");
  LOOM_CHECK(idx.dim() <= 1, "index_select: expected a 0-D or 1-D index, got shape ", index.sizes());
  const int64_t d = wrap_dim(dim, x.dim(), "index_select"), n = idx.numel();
  LOOM_CHECK(x.dim() > 0 || n == 1, "index_select: a 0-dim input takes exactly one index, got ", n);
  Tensor in = at_least_1d(x);
  check_index_range(idx, in.sizes()[d], d, "index_select");
  DimVector shape(in.sizes());
  shape[d] = n;
  Tensor out = empty(shape, x.options());
  if (out.numel() > 0) get_kernel<Op::index_select>(x.device())(out, in, d, view(idx, {n}));
  return x.dim() == 0 ? view(out, {}) : out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  if (should_record(x)) {
    return compute_then_record<Op::gather>({x, index}, [&] { return DimAttrs{wrap_dim(dim, x.dim(), "gather")}; },
                                           [&] { return gather(x, dim, index); });
  }
  check_defined(x, "gather");
  Tensor idx = index_as_int64(index, "gather");
  check_same_device(x, idx, "gather");
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  Tensor in = at_least_1d(x), ix = at_least_1d(idx);
  LOOM_CHECK(ix.dim() == in.dim(),
             "gather: expected an index with as many dims as the input, got index shape ", index.sizes(),
             " for input shape ", x.sizes());
  for (int64_t e = 0; e < in.dim(); ++e) {
    LOOM_CHECK(e == d || ix.sizes()[e] <= in.sizes()[e], "gather: index shape ", index.sizes(),
               " is larger than the input shape ", x.sizes(), " in dim ", e, " (only dim ", d,
               " may be larger)");
  }
  check_index_range(ix, in.sizes()[d], d, "gather");
  Tensor out = empty(ix.sizes(), x.options());
  if (out.numel() > 0) get_kernel<Op::gather>(x.device())(out, in, d, ix);
  return view(out, idx.sizes());
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  if (should_record(x, src)) {
    return compute_then_record<Op::scatter_add>(
        {x, index, src}, [&] { return DimAttrs{wrap_dim(dim, x.dim(), "scatter_add")}; },
        [&] { return scatter_add(x, dim, index, src); });
  }
  check_defined(x, "scatter_add");
  check_defined(src, "scatter_add", "src");
  Tensor idx = index_as_int64(index, "scatter_add");
  check_same_device(x, idx, "scatter_add");
  check_same_device(x, src, "scatter_add");
  LOOM_CHECK(src.dtype() == x.dtype(), "scatter_add: expected src with the input's dtype ", x.dtype(),
             ", got ", src.dtype());
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  Tensor in = at_least_1d(x), ix = at_least_1d(idx), from = at_least_1d(src);
  LOOM_CHECK(ix.dim() == in.dim() && from.dim() == in.dim(),
             "scatter_add: expected input, index and src with the same number of dims, got shapes ",
             x.sizes(), ", ", index.sizes(), " and ", src.sizes());
  for (int64_t e = 0; e < in.dim(); ++e) {
    LOOM_CHECK(ix.sizes()[e] <= from.sizes()[e], "scatter_add: index shape ", index.sizes(),
               " is larger than the src shape ", src.sizes(), " in dim ", e);
    LOOM_CHECK(e == d || ix.sizes()[e] <= in.sizes()[e], "scatter_add: index shape ", index.sizes(),
               " is larger than the input shape ", x.sizes(), " in dim ", e, " (only dim ", d,
               " may be larger)");
  }
  check_index_range(ix, in.sizes()[d], d, "scatter_add");
  Tensor out = clone(in);
  if (ix.numel() > 0) get_kernel<Op::scatter_add>(x.device())(out, d, ix, from);
  return view(out, x.sizes());
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  if (should_record(x, src)) {
    return compute_then_record<Op::index_add>(
        {x, index, src}, [&] { return DimAttrs{wrap_dim(dim, x.dim(), "index_add")}; },
        [&] { return index_add(x, dim, index, src); });
  }
  check_defined(x, "index_add");
  check_defined(src, "index_add", "src");
  Tensor idx = index_as_int64(index, "index_add");
  check_same_device(x, idx, "index_add");
  check_same_device(x, src, "index_add");
  LOOM_CHECK(src.dtype() == x.dtype(), "index_add: expected src with the input's dtype ", x.dtype(), ", got ",
             src.dtype());
  LOOM_CHECK(idx.dim() <= 1, "index_add: expected a 0-D or 1-D index, got shape ", index.sizes());
  const int64_t d = wrap_dim(dim, x.dim(), "index_add"), n = idx.numel();
  Tensor in = at_least_1d(x), from = at_least_1d(src);
  bool shapes_match = from.dim() == in.dim();
  for (int64_t e = 0; shapes_match && e < in.dim(); ++e)
    shapes_match = e == d || from.sizes()[e] == in.sizes()[e];
  LOOM_CHECK(shapes_match, "index_add: src shape ", src.sizes(), " must match the input shape ", x.sizes(),
             " in every dim but dim ", d);
  LOOM_CHECK(from.sizes()[d] == n, "index_add: index has ", n, " values but src has size ", from.sizes()[d],
             " in dim ", d, " (src shape ", src.sizes(), ")");
  check_index_range(idx, in.sizes()[d], d, "index_add");
  Tensor out = clone(in);
  if (from.numel() > 0) get_kernel<Op::index_add>(x.device())(out, d, view(idx, {n}), from);
  return view(out, x.sizes());
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  if (should_record(x)) return recorded<Op::tril>({x}, TriangleAttrs{diagonal}, [&] { return tril(x, diagonal); });
  check_defined(x, "tril");
  LOOM_CHECK(x.dim() >= 2, "tril: expected a tensor with at least 2 dims, got shape ", x.sizes());
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() > 0) get_kernel<Op::tril>(x.device())(out, x, diagonal);
  return out;
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  if (should_record(x)) return recorded<Op::triu>({x}, TriangleAttrs{diagonal}, [&] { return triu(x, diagonal); });
  check_defined(x, "triu");
  LOOM_CHECK(x.dim() >= 2, "triu: expected a tensor with at least 2 dims, got shape ", x.sizes());
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() > 0) get_kernel<Op::triu>(x.device())(out, x, diagonal);
  return out;
}

Tensor repeat(const Tensor& x, IntArrayRef repeats) {
  check_defined(x, "repeat");
  const int64_t n = static_cast<int64_t>(repeats.size()), lead = n - x.dim();
  LOOM_CHECK(lead >= 0, "repeat: got ", n, " repeat counts ", repeats, " for a tensor of shape ", x.sizes(),
             "; expected at least one per dim");
  // [s0, s1, ...] (with leading 1s up to n dims) -> [1, s0, 1, s1, ...] -> expanded to
  // [r0, s0, r1, s1, ...] -> copied -> viewed as [r0 * s0, r1 * s1, ...].
  DimVector split, expanded, shape;
  for (int64_t i = 0; i < n; ++i) {
    LOOM_CHECK(repeats[i] >= 0, "repeat: repeat counts must be non-negative, got ", repeats);
    const int64_t size = i < lead ? 1 : x.sizes()[i - lead];
    split.push_back(1);
    split.push_back(size);
    expanded.push_back(repeats[i]);
    expanded.push_back(size);
    shape.push_back(repeats[i] * size);
  }
  Tensor tiled = expand(reshape(x, split), expanded);
  return view(clone(tiled), shape);
}

Tensor flip(const Tensor& x, IntArrayRef dims) {
  check_defined(x, "flip");
  DimVector flipped = dims.empty() ? DimVector{} : normalize_dims(dims, x.dim(), "flip");
  if (should_record(x)) return recorded<Op::flip>({x}, DimsAttrs{flipped}, [&] { return flip(x, flipped); });
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() > 0) get_kernel<Op::flip>(x.device())(out, x, flipped);
  return out;
}

Tensor roll(const Tensor& x, IntArrayRef shifts, IntArrayRef dims) {
  check_defined(x, "roll");
  if (dims.empty()) {
    LOOM_CHECK(shifts.size() == 1, "roll: without dims, expected one shift, got ", shifts.size());
    return reshape(roll(reshape(x, {-1}), shifts, {0}), x.sizes());
  }
  LOOM_CHECK(shifts.size() == dims.size(), "roll: expected one shift per dim, got ", shifts.size(),
             " shifts and ", dims.size(), " dims");
  // Two slices joined the other way round, one dim at a time: composed of slice and cat, so
  // every device and autograd take it as it is.
  Tensor out = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll");
    const int64_t n = x.dim() == 0 ? 1 : x.size(d);
    const int64_t s = n == 0 ? 0 : ((shifts[i] % n) + n) % n;
    if (s == 0 || x.dim() == 0) continue;
    out = cat({slice(out, d, n - s, n), slice(out, d, 0, n - s)}, d);
  }
  return out.is_same(x) ? clone(x) : out;
}

Tensor pad(const Tensor& x, IntArrayRef pads, std::string_view mode, double value) {
  check_defined(x, "pad");
  const PadMode m = parse_pad_mode(mode, "pad");
  DimVector shape = padded_shape(x.sizes(), pads, m, "pad");
  if (should_record(x))
    return recorded<Op::pad>({x}, PadAttrs{DimVector(pads), m, value}, [&] { return pad(x, pads, mode, value); });
  Tensor out = empty(shape, x.options());
  if (out.numel() > 0) get_kernel<Op::pad>(x.device())(out, x, pads, m, value);
  return out;
}

namespace {

// Replicate and circular padding read some input elements more than once; their gradient adds
// those reads back into the element read. The modes are separable, so this undoes them one
// padded dim at a time with index_add (on whichever device grad_out is on, in the same order
// of additions on every backend), the index of each padded position being the input position
// it read (ops/pad_source.h).
Tensor pad_backward_by_index_add(const Tensor& grad_out, IntArrayRef input_sizes, IntArrayRef pads,
                                 PadMode mode) {
  Tensor g = grad_out;
  const int64_t nd = static_cast<int64_t>(input_sizes.size()), pairs = static_cast<int64_t>(pads.size() / 2);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t dim = nd - 1 - p, size = input_sizes[dim];
    std::vector<int64_t> sources(static_cast<size_t>(g.size(dim)));
    for (size_t j = 0; j < sources.size(); ++j)
      sources[j] = pad_source(static_cast<int64_t>(j), pads[2 * p], size, static_cast<int>(mode));
    DimVector sizes(g.sizes());
    sizes[dim] = size;
    g = index_add(zeros(sizes, g.options()), dim, tensor(sources).to(g.device()), g);
  }
  return pairs == 0 ? g.clone() : g;
}

}  // namespace

Tensor pad_backward(const Tensor& grad_out, IntArrayRef input_sizes, IntArrayRef pads,
                    std::string_view mode) {
  check_defined(grad_out, "pad_backward", "grad_out");
  const PadMode m = parse_pad_mode(mode, "pad_backward");
  shape_numel(input_sizes);  // rejects negative sizes
  DimVector expected = padded_shape(input_sizes, pads, m, "pad_backward");
  LOOM_CHECK(grad_out.sizes() == IntArrayRef(expected), "pad_backward: expected grad_out of shape ", expected,
             " for input shape ", input_sizes, " and pads ", pads, ", got ", grad_out.sizes());
  // Recorded like a forward op: its formula (autograd/formulas/shape.cpp) is pad again.
  if (should_record(grad_out)) {
    return recorded<Op::pad_backward>({grad_out}, PadAttrs{DimVector(pads), m, 0.0},
                                      [&] { return pad_backward(grad_out, input_sizes, pads, mode); });
  }
  if (m == PadMode::Replicate || m == PadMode::Circular)
    return pad_backward_by_index_add(grad_out, input_sizes, pads, m);
  Tensor grad_input = empty(input_sizes, grad_out.options());
  if (grad_input.numel() > 0) get_kernel<Op::pad_backward>(grad_out.device())(grad_input, grad_out, pads, m);
  return grad_input;
}

// ---- Tensor methods ------------------------------------------------------------------------
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  return loom::index_select(*this, dim, index);
}
Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  return loom::gather(*this, dim, index);
}
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return loom::scatter_add(*this, dim, index, src);
}
Tensor Tensor::tril(int64_t diagonal) const {
  return loom::tril(*this, diagonal);
}
Tensor Tensor::triu(int64_t diagonal) const {
  return loom::triu(*this, diagonal);
}
Tensor Tensor::repeat(IntArrayRef repeats) const {
  return loom::repeat(*this, repeats);
}
Tensor Tensor::flip(IntArrayRef dims) const {
  return loom::flip(*this, dims);
}
Tensor Tensor::roll(IntArrayRef shifts, IntArrayRef dims) const {
  return loom::roll(*this, shifts, dims);
}

}  // namespace loom
