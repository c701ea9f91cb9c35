/*
 * The C++ side of the CUDA shape kernels (ops/cuda/shape.cu): restrides the operands of cat,
 * index_select, gather, scatter_add, index_add, tril/triu, flip, pad and pad_backward into the
 * plain layouts of ops/cuda/shape_launchers.h, the way the CPU kernels restride theirs
 * (ops/cpu/shape_kernels.cpp), and registers the kernels.
 *
 * Index values: on the CPU, ops/shape_ops.cpp checks every index before any kernel runs
 * (check_index_range). A CUDA index stays on the device: a check kernel records the first bad
 * position into a device word that the host reads at its next wait for the GPU
 * (check_index_on_device, core/cuda/device_checks.h), and the kernels here follow only the indices
 * in range, so a bad one reads zero or adds nothing until it is reported.
 *
 * Synchronisation: every launch is on the current stream (op_stream.h), so pad_backward's
 * intermediate buffers (freed to the caching allocator on return) are not reused before the
 * kernels that read them have run.
 */
#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_checks.h"
#include "core/numeric_cast.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/op_stream.h"
#include "ops/cuda/shape_launchers.h"
#include "ops/dispatch.h"

namespace loom::cuda {

namespace {

void check_rank(const Tensor& t, std::string_view op) {
  LOOM_CHECK(t.dim() <= kMaxDims, op, " on CUDA: tensors with more than ", kMaxDims,
             " dims are not supported, got ", t.dim());
}

// A three-operand layout of shape `sizes` (operands without strides stay at stride 0).
Layout3 layout3(IntArrayRef sizes, std::initializer_list<IntArrayRef> strides) {
  Layout3 l;
  l.ndim = static_cast<int>(sizes.size());
  for (int d = 0; d < l.ndim; ++d) l.sizes[d] = sizes[d];
  int k = 0;
  for (IntArrayRef s : strides) {
    for (int d = 0; d < l.ndim; ++d) l.strides[k][d] = s[d];
    ++k;
  }
  return l;
}

int code(const Tensor& t) {
  return static_cast<int>(t.dtype());
}
int element_size(const Tensor& t) {
  return static_cast<int>(t.element_size());
}
const int64_t* index_ptr(const Tensor& index) {
  return static_cast<const int64_t*>(index.data_ptr());
}

// Pointer to element `offset` (in elements, may be negative) of t's data.
void* element_at(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset * static_cast<int64_t>(t.element_size());
}

// dst <- src, one shape, any strides (src's may be negative: src then points at the
// element that row-major position 0 reads).
void strided_move(const Tensor& dst, const void* src, IntArrayRef src_strides) {
  StridedLayout l;
  l.ndim = static_cast<int>(dst.dim());
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = dst.sizes()[d];
    l.dst_strides[d] = dst.strides()[d];
    l.src_strides[d] = src_strides[d];
  }
  LOOM_CUDA_CHECK(launch_strided_move(dst.data_ptr(), src, element_size(dst), l, dst.numel(), op_stream()));
}

// ---- cat ------------------------------------------------------------------------------------

// Each input is moved into its slab of out along dim.
void cat_kernel(const Tensor& out, const std::vector<Tensor>& inputs, int64_t dim) {
  check_rank(out, "cat");
  int64_t offset = 0;
  for (const Tensor& in : inputs) {
    if (in.numel() > 0) {
      Tensor slab =
          make_view(out, in.sizes(), out.strides(), out.storage_offset() + offset * out.strides()[dim]);
      strided_move(slab, in.data_ptr(), in.strides());
    }
    offset += in.sizes()[dim];
  }
}

// ---- index_select and gather ------------------------------------------------------------------

// The device half of shape_ops.cpp's check_index_range (values along `dim` of a tensor of `size`).
void check_index_on_device(const Tensor& index, int64_t size, int64_t dim, std::string_view op) {
  const Tensor flat = index.contiguous();
  unsigned long long* bad_index = device_check_word(
      detail::concat(op, ": an index out of range for dim ", dim, " with size ", size), "index position");
  LOOM_CUDA_CHECK(launch_index_range_check(index_ptr(flat), flat.numel(), size, bad_index, op_stream()));
  finish_device_check();
}

void index_select_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  check_rank(out, "index_select");
  check_index_on_device(index, in.sizes()[dim], dim, "index_select");
  DimVector in_strides(in.strides());
  in_strides[dim] = 0;
  DimVector index_strides(static_cast<size_t>(out.dim()), 0);
  index_strides[dim] = index.strides()[0];
  LOOM_CUDA_CHECK(launch_indexed_copy(out.data_ptr(), in.data_ptr(), index_ptr(index), element_size(out),
                                      layout3(out.sizes(), {out.strides(), in_strides, index_strides}),
                                      in.strides()[dim], in.sizes()[dim], op_stream()));
}

void gather_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  check_rank(out, "gather");
  check_index_on_device(index, in.sizes()[dim], dim, "gather");
  DimVector in_strides(in.strides());
  in_strides[dim] = 0;
  LOOM_CUDA_CHECK(launch_indexed_copy(out.data_ptr(), in.data_ptr(), index_ptr(index), element_size(out),
                                      layout3(index.sizes(), {out.strides(), in_strides, index.strides()}),
                                      in.strides()[dim], in.sizes()[dim], op_stream()));
}

// ---- scatter_add and index_add ----------------------------------------------------------------

// Deterministic: see launch_indexed_add (a thread per line along dim, no atomics).
void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  check_rank(out, "scatter_add");
  check_index_on_device(index, out.sizes()[dim], dim, "scatter_add");
  DimVector out_strides(out.strides());
  out_strides[dim] = 0;
  LOOM_CUDA_CHECK(launch_indexed_add(out.data_ptr(), src.data_ptr(), index_ptr(index), code(out),
                                     layout3(index.sizes(), {out_strides, src.strides(), index.strides()}),
                                     static_cast<int>(dim), out.strides()[dim], out.sizes()[dim], op_stream()));
}

void index_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  check_rank(out, "index_add");
  check_index_on_device(index, out.sizes()[dim], dim, "index_add");
  DimVector out_strides(out.strides());
  out_strides[dim] = 0;
  DimVector index_strides(static_cast<size_t>(src.dim()), 0);
  index_strides[dim] = index.strides()[0];
  LOOM_CUDA_CHECK(launch_indexed_add(out.data_ptr(), src.data_ptr(), index_ptr(index), code(out),
                                     layout3(src.sizes(), {out_strides, src.strides(), index_strides}),
                                     static_cast<int>(dim), out.strides()[dim], out.sizes()[dim], op_stream()));
}

// ---- tril / triu ------------------------------------------------------------------------------

template <bool kLower>
void triangle_kernel(const Tensor& out, const Tensor& in, int64_t diagonal) {
  check_rank(out, kLower ? "tril" : "triu");
  const int64_t nd = in.dim();
  // Beyond [-rows, cols] every diagonal gives the same result; clamping avoids overflow.
  diagonal = std::clamp(diagonal, -in.sizes()[nd - 2], in.sizes()[nd - 1]);
  LOOM_CUDA_CHECK(launch_triangle(out.data_ptr(), in.data_ptr(), element_size(out),
                                  layout3(in.sizes(), {out.strides(), in.strides()}), kLower, diagonal,
                                  op_stream()));
}

// ---- flip -------------------------------------------------------------------------------------

// A move from in walked backwards (negative strides) along the flipped dims.
void flip_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims) {
  check_rank(out, "flip");
  DimVector strides(in.strides());
  int64_t offset = 0;
  for (int64_t d : dims) {
    const int64_t size = in.sizes()[d];
    if (size == 0) continue;
    offset += (size - 1) * strides[d];
    strides[d] = -strides[d];
  }
  strided_move(out, element_at(in, offset), strides);
}

// ---- pad and its gradient ---------------------------------------------------------------------

// out <- in padded by pads ((left, right) pairs from the last dim); only the lefts matter once
// out's shape is known.
void launch_pad_of(const Tensor& out, const Tensor& in, IntArrayRef pads, PadMode mode, double value) {
  const int64_t nd = out.dim();
  int64_t left[kMaxDims] = {};
  for (size_t p = 0; p < pads.size() / 2; ++p) left[nd - 1 - static_cast<int64_t>(p)] = pads[2 * p];
  LOOM_CUDA_CHECK(launch_pad(out.data_ptr(), in.data_ptr(), code(out),
                             layout3(out.sizes(), {out.strides(), in.strides()}), in.sizes().data(), left,
                             static_cast<int>(mode), value, numeric_cast<int64_t>(value), op_stream()));
}

void pad_kernel(const Tensor& out, const Tensor& in, IntArrayRef pads, PadMode mode, double value) {
  check_rank(out, "pad");
  launch_pad_of(out, in, pads, mode, value);
}

void pad_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, IntArrayRef pads, PadMode mode) {
  check_rank(grad_input, "pad_backward");
  if (mode == PadMode::Constant) {
    // Each input element was copied once (or cropped away): the gradient is grad_out with
    // the padding removed, i.e. a constant pad by the negated pads with zeros.
    DimVector negated(pads);
    for (int64_t& p : negated) p = -p;
    launch_pad_of(grad_input, grad_out, negated, PadMode::Constant, 0.0);
    return;
  }
  LOOM_CHECK(mode == PadMode::Reflect, "pad_backward kernel: ", pad_mode_name(mode),
             " padding's gradient is composed of index_add (ops/shape_ops.cpp), not computed here");
  // Reflect padding is separable: undo it one padded dim at a time, last dim first.
  const int64_t nd = grad_input.dim(), pairs = static_cast<int64_t>(pads.size() / 2);
  if (pairs == 0) {
    strided_move(grad_input, grad_out.data_ptr(), grad_out.strides());
    return;
  }
  Tensor g = grad_out;
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t dim = nd - 1 - p;
    DimVector sizes(g.sizes());
    sizes[dim] = grad_input.sizes()[dim];
    Tensor next = p == pairs - 1 ? grad_input : empty(sizes, g.options());
    LOOM_CUDA_CHECK(launch_reflect_backward_dim(
        next.data_ptr(), g.data_ptr(), code(next), layout3(next.sizes(), {next.strides(), g.strides()}),
        static_cast<int>(dim), pads[2 * p], pads[2 * p + 1], g.sizes()[dim], op_stream()));
    g = next;
  }
}

}  // namespace

void register_shape_cuda_kernels() {
  register_kernel<Op::cat>(DeviceType::CUDA, cat_kernel);
  register_kernel<Op::index_select>(DeviceType::CUDA, index_select_kernel);
  register_kernel<Op::index_add>(DeviceType::CUDA, index_add_kernel);
  register_kernel<Op::gather>(DeviceType::CUDA, gather_kernel);
  register_kernel<Op::scatter_add>(DeviceType::CUDA, scatter_add_kernel);
  register_kernel<Op::tril>(DeviceType::CUDA, triangle_kernel<true>);
  register_kernel<Op::triu>(DeviceType::CUDA, triangle_kernel<false>);
  register_kernel<Op::flip>(DeviceType::CUDA, flip_kernel);
  register_kernel<Op::pad>(DeviceType::CUDA, pad_kernel);
  register_kernel<Op::pad_backward>(DeviceType::CUDA, pad_backward_kernel);
}

}  // namespace loom::cuda
