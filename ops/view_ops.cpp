/*
 * View ops (see view_ops.h): each computes new sizes/strides/offset over x's storage.
 * reshape falls back to a contiguous copy only when no strides can express the new shape.
 *
 * For autograd each view is recorded as its primitive op (op_list.def) once its geometry is
 * known, so the recorded path validates once, as the unrecorded one does. The composites
 * (reshape, transpose, narrow, flatten, split, ...) are differentiable because they end in
 * one of these primitives: none of them calls make_view unrecorded.
 */
#include "ops/view_ops.h"

#include <algorithm>
#include <numeric>

#include "ops/autograd_hook.h"
#include "ops/copy_ops.h"
#include "ops/op_utils.h"

namespace loom {

namespace {

// Replaces a single -1 in `sizes` so that the product is numel.
DimVector infer_size(IntArrayRef sizes, int64_t numel, std::string_view op, IntArrayRef from) {
  DimVector out(sizes);
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      LOOM_CHECK(infer_at < 0, op, ": only one dimension can be -1, got ", sizes);
      infer_at = static_cast<int64_t>(i);
    } else {
      LOOM_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", sizes);
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    LOOM_CHECK(known != 0 && numel % known == 0, op, ": shape ", sizes, " is invalid for input of shape ", from,
               " (", numel, " elements)");
    out[static_cast<size_t>(infer_at)] = numel / known;
  } else {
    LOOM_CHECK(known == numel, op, ": shape ", sizes, " is invalid for input of shape ", from, " (", numel,
               " elements)");
  }
  return out;
}

// Strides for viewing (sizes, strides) as new_sizes without copying, if possible
// (PyTorch's computeStride: each group of old dims that is contiguous within itself can be
// split or merged freely).
bool view_strides(IntArrayRef sizes, IntArrayRef strides, IntArrayRef new_sizes, DimVector& new_strides) {
  new_strides.assign(new_sizes.size(), 0);
  if (sizes.empty() || shape_numel(sizes) == 0) {  // 0-dim (new sizes are all 1) or empty
    new_strides = contiguous_strides(new_sizes);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    // At the start of a contiguous chunk of old dims (or the outermost dim), lay out new dims.
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

// The view of x with this geometry, recorded as `op` with the attributes make_attrs() returns
// when x is in the graph (the attributes are only built then).
template <Op op, class MakeAttrs>
Tensor view_of(const Tensor& x, IntArrayRef sizes, IntArrayRef strides, int64_t offset, const MakeAttrs& make_attrs) {
  if (should_record(x))
    return recorded<op>({x}, make_attrs(), [&] { return make_view(x, sizes, strides, offset); });
  return make_view(x, sizes, strides, offset);
}

NoAttrs no_attrs() { return {}; }

}  // namespace

Tensor as_strided(const Tensor& x, IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> storage_offset) {
  check_defined(x, "as_strided");
  LOOM_CHECK(sizes.size() == strides.size(), "as_strided: ", sizes.size(), " sizes but ", strides.size(),
             " strides");
  int64_t offset = storage_offset.value_or(x.storage_offset());
  LOOM_CHECK(offset >= 0, "as_strided: negative storage offset ", offset);
  // The furthest element must lie inside the storage.
  int64_t last = offset;
  bool empty_view = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    LOOM_CHECK(sizes[i] >= 0 && strides[i] >= 0, "as_strided: negative size or stride in ", sizes, " / ",
               strides);
    if (sizes[i] == 0) empty_view = true;
    last += (sizes[i] - 1) * strides[i];
  }
  int64_t capacity = static_cast<int64_t>(x.storage()->nbytes() / x.element_size());
  LOOM_CHECK(empty_view || last < capacity, "as_strided: view with sizes ", sizes, ", strides ", strides,
             " and offset ", offset, " reaches element ", last, " of a storage of ", capacity, " elements");
  return view_of<Op::as_strided>(x, sizes, strides, offset, [&] {
    return AsStridedAttrs{DimVector(sizes), DimVector(strides), offset, DimVector(x.strides()), x.storage_offset()};
  });
}

Tensor view(const Tensor& x, IntArrayRef sizes) {
  check_defined(x, "view");
  DimVector shape = infer_size(sizes, x.numel(), "view", x.sizes());
  DimVector strides;
  LOOM_CHECK(view_strides(x.sizes(), x.strides(), shape, strides), "view: shape ", shape,
             " is not compatible with the strides ", x.strides(), " of a tensor of shape ", x.sizes(),
             " (at least one dimension spans two contiguous subspaces); use reshape");
  return view_of<Op::view>(x, shape, strides, x.storage_offset(), no_attrs);
}

Tensor reshape(const Tensor& x, IntArrayRef sizes) {
  check_defined(x, "reshape");
  DimVector shape = infer_size(sizes, x.numel(), "reshape", x.sizes());
  DimVector strides;
  if (view_strides(x.sizes(), x.strides(), shape, strides))
    return view_of<Op::view>(x, shape, strides, x.storage_offset(), no_attrs);
  return view(contiguous(x), shape);  // recorded as copy, then view
}

Tensor permute(const Tensor& x, IntArrayRef dims) {
  check_defined(x, "permute");
  const int64_t n = x.dim();
  LOOM_CHECK(static_cast<int64_t>(dims.size()) == n, "permute: got ", dims.size(), " dims ", dims, " for a ", n,
             "-D tensor of shape ", x.sizes());
  DimVector sizes(n), strides(n), wrapped(n);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute");
    LOOM_CHECK(!seen[d], "permute: dim ", d, " repeated in ", dims);
    seen[d] = true;
    wrapped[i] = d;
    sizes[i] = x.sizes()[d];
    strides[i] = x.strides()[d];
  }
  return view_of<Op::permute>(x, sizes, strides, x.storage_offset(), [&] { return DimsAttrs{wrapped}; });
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_defined(x, "transpose");
  const int64_t n = x.dim();
  // A transpose is the permutation that swaps a and b (recorded as permute).
  if (n == 0) {
    wrap_dim(dim0, 0, "transpose");
    wrap_dim(dim1, 0, "transpose");
    return view_of<Op::permute>(x, x.sizes(), x.strides(), x.storage_offset(), [] { return DimsAttrs{}; });
  }
  int64_t a = wrap_dim(dim0, n, "transpose"), b = wrap_dim(dim1, n, "transpose");
  DimVector sizes(x.sizes()), strides(x.strides());
  std::swap(sizes[a], sizes[b]);
  std::swap(strides[a], strides[b]);
  return view_of<Op::permute>(x, sizes, strides, x.storage_offset(), [&] {
    DimsAttrs attrs{DimVector(static_cast<size_t>(n), 0)};
    for (int64_t i = 0; i < n; ++i) attrs.dims[static_cast<size_t>(i)] = i;
    std::swap(attrs.dims[static_cast<size_t>(a)], attrs.dims[static_cast<size_t>(b)]);
    return attrs;
  });
}

Tensor t(const Tensor& x) {
  check_defined(x, "t");
  LOOM_CHECK(x.dim() <= 2, "t: expected a tensor with at most 2 dims, got shape ", x.sizes());
  return x.dim() < 2 ? transpose(x, 0, 0) : transpose(x, 0, 1);
}

Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  check_defined(x, "slice");
  LOOM_CHECK(x.dim() > 0, "slice: cannot slice a 0-dim tensor");
  LOOM_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t d = wrap_dim(dim, x.dim(), "slice");
  int64_t size = x.sizes()[d];
  // Python slice semantics: negative from the end, then clamped to [0, size].
  auto clamp_index = [size](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  int64_t s = clamp_index(start.value_or(0)), e = clamp_index(end.value_or(size));
  int64_t len = e > s ? (e - s + step - 1) / step : 0;
  DimVector sizes(x.sizes()), strides(x.strides());
  sizes[d] = len;
  strides[d] *= step;
  return view_of<Op::slice>(x, sizes, strides, x.storage_offset() + s * x.strides()[d],
                            [&] { return SliceAttrs{d, s, std::max(e, s), step}; });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined(x, "narrow");
  LOOM_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  int64_t d = wrap_dim(dim, x.dim(), "narrow");
  int64_t size = x.sizes()[d];
  if (start < 0) start += size;
  LOOM_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow: start ", start, " and length ", length,
             " exceed size ", size, " of dim ", d, " of shape ", x.sizes());
  return slice(x, d, start, start + length);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  check_defined(x, "select");
  LOOM_CHECK(x.dim() > 0, "select: cannot index a 0-dim tensor");
  int64_t d = wrap_dim(dim, x.dim(), "select");
  int64_t size = x.sizes()[d];
  LOOM_CHECK(index >= -size && index < size, "select: index ", index, " is out of bounds for dim ", d,
             " with size ", size);
  if (index < 0) index += size;
  DimVector sizes(x.sizes()), strides(x.strides());
  sizes.erase(d);
  strides.erase(d);
  return view_of<Op::select>(x, sizes, strides, x.storage_offset() + index * x.strides()[d],
                             [&] { return SelectAttrs{d, index}; });
}

Tensor expand(const Tensor& x, IntArrayRef sizes) {
  check_defined(x, "expand");
  const int64_t n = static_cast<int64_t>(sizes.size()), nx = x.dim();
  LOOM_CHECK(n >= nx, "expand: the target shape ", sizes, " has fewer dims than the tensor's shape ", x.sizes());
  DimVector out_sizes(n), out_strides(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t j = i - (n - nx);  // matching dim of x, or < 0 for a new leading dim
    int64_t target = sizes[i];
    LOOM_CHECK(target >= -1, "expand: invalid size ", target, " in the target shape ", sizes);
    if (j >= 0) {
      int64_t have = x.sizes()[j];
      if (target == -1) target = have;
      LOOM_CHECK(have == target || have == 1, "expand: the size ", have, " of dim ", j, " of shape ", x.sizes(),
                 " cannot become ", target, " (target shape ", sizes, "); only size-1 dims can be expanded");
      out_sizes[i] = target;
      out_strides[i] = have == target ? x.strides()[j] : 0;
    } else {
      LOOM_CHECK(target >= 0, "expand: -1 is not allowed for the new leading dim ", i, " in ", sizes);
      out_sizes[i] = target;
      out_strides[i] = 0;
    }
  }
  return view_of<Op::expand>(x, out_sizes, out_strides, x.storage_offset(), no_attrs);
}

Tensor squeeze(const Tensor& x) {
  check_defined(x, "squeeze");
  DimVector sizes, strides;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (x.sizes()[i] == 1) continue;
    sizes.push_back(x.sizes()[i]);
    strides.push_back(x.strides()[i]);
  }
  return view_of<Op::squeeze>(x, sizes, strides, x.storage_offset(), no_attrs);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  check_defined(x, "squeeze");
  if (x.dim() == 0) {
    wrap_dim(dim, 0, "squeeze");
    return view_of<Op::squeeze>(x, x.sizes(), x.strides(), x.storage_offset(), no_attrs);
  }
  int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.sizes()[d] != 1) return view_of<Op::squeeze>(x, x.sizes(), x.strides(), x.storage_offset(), no_attrs);
  DimVector sizes(x.sizes()), strides(x.strides());
  sizes.erase(d);
  strides.erase(d);
  return view_of<Op::squeeze>(x, sizes, strides, x.storage_offset(), no_attrs);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  check_defined(x, "unsqueeze");
  int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  DimVector sizes(x.sizes()), strides(x.strides());
  int64_t stride = d < x.dim() ? x.sizes()[d] * x.strides()[d] : 1;
  sizes.insert(d, 1);
  strides.insert(d, stride);
  return view_of<Op::unsqueeze>(x, sizes, strides, x.storage_offset(), no_attrs);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  check_defined(x, "flatten");
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  LOOM_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  DimVector sizes;
  for (int64_t i = 0; i < s; ++i) sizes.push_back(x.sizes()[i]);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= x.sizes()[i];
  sizes.push_back(merged);
  for (int64_t i = e + 1; i < x.dim(); ++i) sizes.push_back(x.sizes()[i]);
  return reshape(x, sizes);
}

Tensor unflatten(const Tensor& x, int64_t dim, IntArrayRef sizes) {
  check_defined(x, "unflatten");
  int64_t d = wrap_dim(dim, x.dim(), "unflatten");
  DimVector inner = infer_size(sizes, x.sizes()[d], "unflatten", x.sizes());
  DimVector shape;
  for (int64_t i = 0; i < d; ++i) shape.push_back(x.sizes()[i]);
  for (int64_t s : inner) shape.push_back(s);
  for (int64_t i = d + 1; i < x.dim(); ++i) shape.push_back(x.sizes()[i]);
  return view(x, shape);
}

std::vector<Tensor> split_with_sizes(const Tensor& x, IntArrayRef split_sizes, int64_t dim) {
  check_defined(x, "split_with_sizes");
  int64_t d = wrap_dim(dim, x.dim(), "split_with_sizes");
  int64_t total = std::accumulate(split_sizes.begin(), split_sizes.end(), int64_t{0});
  LOOM_CHECK(total == x.sizes()[d], "split_with_sizes: sizes ", split_sizes, " sum to ", total,
             " but dim ", d, " has size ", x.sizes()[d]);
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t len : split_sizes) {
    LOOM_CHECK(len >= 0, "split_with_sizes: negative size in ", split_sizes);
    parts.push_back(narrow(x, d, start, len));
    start += len;
  }
  return parts;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined(x, "split");
  LOOM_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t size = x.sizes()[d];
  DimVector sizes;
  for (int64_t start = 0; start < size; start += split_size) sizes.push_back(std::min(split_size, size - start));
  if (sizes.empty()) sizes.push_back(0);
  return split_with_sizes(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined(x, "chunk");
  LOOM_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  int64_t d = wrap_dim(dim, x.dim(), "chunk");
  int64_t size = x.sizes()[d];
  // As PyTorch: an empty dim gives `chunks` empty parts (split would give one).
  if (size == 0) return split_with_sizes(x, DimVector(static_cast<size_t>(chunks), 0), d);
  return split(x, std::max<int64_t>((size + chunks - 1) / chunks, 1), d);
}

std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& tensors) {
  DimVector shape;
  for (const Tensor& t : tensors) {
    check_defined(t, "broadcast_tensors");
    shape = broadcast_shapes(shape, t.sizes(), "broadcast_tensors");
  }
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back(expand(t, shape));
  return out;
}

// ---- Tensor methods ------------------------------------------------------------------------
Tensor Tensor::view(IntArrayRef sizes) const { return loom::view(*this, sizes); }
Tensor Tensor::reshape(IntArrayRef sizes) const { return loom::reshape(*this, sizes); }
Tensor Tensor::as_strided(IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset) const {
  return loom::as_strided(*this, sizes, strides, offset);
}
Tensor Tensor::permute(IntArrayRef dims) const { return loom::permute(*this, dims); }
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const { return loom::transpose(*this, dim0, dim1); }
Tensor Tensor::t() const { return loom::t(*this); }
Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  return loom::slice(*this, dim, start, end, step);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return loom::narrow(*this, dim, start, length);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return loom::select(*this, dim, index); }
Tensor Tensor::expand(IntArrayRef sizes) const { return loom::expand(*this, sizes); }
Tensor Tensor::squeeze() const { return loom::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return loom::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return loom::unsqueeze(*this, dim); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const { return loom::flatten(*this, start_dim, end_dim); }
Tensor Tensor::unflatten(int64_t dim, IntArrayRef sizes) const { return loom::unflatten(*this, dim, sizes); }
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  return loom::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::split_with_sizes(IntArrayRef split_sizes, int64_t dim) const {
  return loom::split_with_sizes(*this, split_sizes, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const { return loom::chunk(*this, chunks, dim); }

}  // namespace loom
