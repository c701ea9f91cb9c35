/*
 * Gradients of the view ops. A view reads some of its input's elements in another layout, so
 * its gradient puts each output gradient back where the element came from: the inverse
 * reshape or permutation, a sum over expanded dims, zeros around a slice. Everything is
 * written with forward ops (pad, reshape, index_add, ...) whose own gradients are known, so
 * views can be differentiated to any order.
 */
#include <algorithm>
#include <numeric>

#include "autograd/formulas/formulas.h"

namespace loom::autograd {

namespace {

// Pads for pad() that put (left, right) around dim `dim` of an ndim-D tensor and leave the
// dims after it alone (pad's pairs start from the last dim).
DimVector pads_around(int64_t ndim, int64_t dim, int64_t left, int64_t right) {
  DimVector pads(static_cast<size_t>(2 * (ndim - dim)), 0);
  pads[pads.size() - 2] = left;
  pads[pads.size() - 1] = right;
  return pads;
}

// slice: each row i of g goes back to row start + i * step of a zero gradient of the input's
// size along dim. Rows are first spread out by step - 1 zero rows after each
// ([.., len, ..] -> [.., len, step, ..] -> [.., len * step, ..]), then padded (or cropped, when
// the last spread rows overshoot the end) to the input's size.
Tensor slice_backward(const Tensor& g, IntArrayRef input_sizes, const SliceAttrs& a) {
  const int64_t nd = g.dim(), d = a.dim, len = g.size(d);
  Tensor spread = g;
  if (a.step > 1 && len > 0) {
    DimVector sizes(g.sizes());
    sizes[static_cast<size_t>(d)] = len * a.step;
    spread = pad(g.unsqueeze(d + 1), pads_around(nd + 1, d + 1, 0, a.step - 1)).view(sizes);
  }
  const int64_t size = input_sizes[static_cast<size_t>(d)];
  return pad(spread, pads_around(nd, d, a.start, size - a.start - spread.size(d)));
}

// Whether a (sizes, strides) geometry may reach one storage element twice: sorted by stride,
// each dim of size > 1 must step past everything the smaller dims reach.
bool may_overlap(IntArrayRef sizes, IntArrayRef strides) {
  std::vector<size_t> order;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 1) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t reach = 0;  // furthest offset the dims so far reach
  for (size_t i : order) {
    if (strides[i] <= reach) return true;
    reach += (sizes[i] - 1) * strides[i];
  }
  return false;
}

// The storage position (minus origin) of every element of a geometry, as a flat int64 tensor
// in row-major order: offset + sum_d i_d * stride_d, built by broadcasting one arange per dim.
Tensor storage_positions(IntArrayRef sizes, IntArrayRef strides, int64_t offset, Device device) {
  const TensorOptions index_options = TensorOptions(kInt64).device(device);
  Tensor pos = full(IntArrayRef{}, offset, index_options);
  for (size_t d = 0; d < sizes.size(); ++d) {
    DimVector shape(sizes.size(), 1);
    shape[d] = sizes[d];
    pos = pos + arange(sizes[d], index_options).view(shape) * strides[d];
  }
  return pos.reshape({-1});
}

// as_strided: both geometries address one storage. The output gradient is added into a zero
// buffer at each output element's storage position (index_add, so that output elements that
// share a position — overlapping windows — accumulate), and the input's gradient is read
// from the buffer through the input's geometry.
Tensor as_strided_backward(const Tensor& g, IntArrayRef input_sizes, const AsStridedAttrs& a) {
  if (shape_numel(input_sizes) == 0) return zeros(input_sizes, g.options());
  LOOM_CHECK(!may_overlap(input_sizes, a.input_strides), "as_strided backward: the input (shape ", input_sizes,
             ", strides ", IntArrayRef(a.input_strides),
             ") has elements that share memory (e.g. an expand); its gradient is not supported, apply as_strided "
             "to a contiguous copy (.contiguous() or .clone()) instead");
  if (g.numel() == 0) return zeros(input_sizes, g.options());
  // The span of storage both geometries reach (strides are non-negative).
  auto last = [](IntArrayRef sizes, IntArrayRef strides, int64_t offset) {
    for (size_t d = 0; d < sizes.size(); ++d) offset += (sizes[d] - 1) * strides[d];
    return offset;
  };
  const int64_t lo = std::min(a.storage_offset, a.input_storage_offset);
  const int64_t hi = std::max(last(a.sizes, a.strides, a.storage_offset),
                              last(input_sizes, a.input_strides, a.input_storage_offset));
  Tensor positions = storage_positions(a.sizes, a.strides, a.storage_offset - lo, g.device());
  Tensor buffer = index_add(zeros({hi - lo + 1}, g.options()), 0, positions, g.reshape({-1}));
  return buffer.as_strided(input_sizes, a.input_strides, a.input_storage_offset - lo);
}

}  // namespace

void register_view_formulas() {
  // The element order is unchanged: back to the input's shape.
  define_formula<Op::view>(Save{}, [](const GradContext<NoAttrs>& c, const Grads& g) {
    return Grads{g[0].reshape(c.input_sizes(0))};
  });
  define_formula<Op::squeeze>(Save{}, [](const GradContext<NoAttrs>& c, const Grads& g) {
    return Grads{g[0].reshape(c.input_sizes(0))};
  });
  define_formula<Op::unsqueeze>(Save{}, [](const GradContext<NoAttrs>& c, const Grads& g) {
    return Grads{g[0].reshape(c.input_sizes(0))};
  });
  // Output dim i is input dim dims[i]: the inverse permutation brings g back.
  define_formula<Op::permute>(Save{}, [](const GradContext<DimsAttrs>& c, const Grads& g) {
    const DimVector& dims = c.attrs().dims;
    DimVector inverse(dims.size(), 0);
    for (size_t i = 0; i < dims.size(); ++i) inverse[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
    return Grads{g[0].permute(inverse)};
  });
  // Every input element was read once per expanded copy: the copies' gradients add up.
  define_formula<Op::expand>(Save{}, [](const GradContext<NoAttrs>& c, const Grads& g) {
    return Grads{sum_to(g[0], c.input_sizes(0))};
  });
  define_formula<Op::slice>(Save{}, [](const GradContext<SliceAttrs>& c, const Grads& g) {
    return Grads{slice_backward(g[0], c.input_sizes(0), c.attrs())};
  });
  // select: g becomes row `index` of zeros along dim.
  define_formula<Op::select>(Save{}, [](const GradContext<SelectAttrs>& c, const Grads& g) {
    const SelectAttrs& a = c.attrs();
    const int64_t size = c.input_sizes(0)[static_cast<size_t>(a.dim)];
    return Grads{pad(g[0].unsqueeze(a.dim), pads_around(g[0].dim() + 1, a.dim, a.index, size - a.index - 1))};
  });
  define_formula<Op::as_strided>(Save{}, [](const GradContext<AsStridedAttrs>& c, const Grads& g) {
    return Grads{as_strided_backward(g[0], c.input_sizes(0), c.attrs())};
  });
}

}  // namespace loom::autograd
