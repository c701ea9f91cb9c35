/*
 * CPU kernels for joining, indexing and rearranging: cat, index_select, gather, scatter_add,
 * index_add, tril/triu, flip, pad and pad's gradient.
 *
 * Most of these move elements without looking at them, so they are written per element size
 * (1, 2, 4 or 8 bytes) rather than per dtype; only the accumulating kernels (scatter_add,
 * index_add, reflect pad_backward) and the pad fill value need the dtype.
 *
 * The indexing kernels restride their operands to one common shape, as PyTorch's
 * TensorIterator does: the indexed dim gets stride 0 in the data operand and the index value
 * supplies the offset along it, so one strided walk (ops/cpu/loops.h) covers any rank and any
 * strides. flip is a copy from a view with negative strides.
 */
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/parallel_grain.h"
#include "ops/dim_geometry.h"
#include "ops/dispatch.h"
#include "ops/pad_source.h"

namespace loom::cpu {

namespace {

// Calls f(TypeTag<U>{}) with an unsigned integer type as wide as one element.
template <class F>
void visit_element_size(size_t size, F&& f) {
  switch (size) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    case 8:
      return f(TypeTag<uint64_t>{});
    default:
      LOOM_FAIL("shape kernels: unsupported element size ", size);
  }
}

// A view of t's storage with new geometry (strides in elements; 0 and negative allowed), used
// only inside these kernels.
Tensor restride(const Tensor& t, IntArrayRef sizes, IntArrayRef strides, int64_t offset_delta = 0) {
  return make_view(t, sizes, strides, t.storage_offset() + offset_delta);
}

// Geometry with `dim` removed.
Tensor drop_dim(const Tensor& t, int64_t dim) {
  DimVector sizes(t.sizes()), strides(t.strides());
  sizes.erase(static_cast<size_t>(dim));
  strides.erase(static_cast<size_t>(dim));
  return restride(t, sizes, strides);
}

// dst <- src: same shape and element size, any strides (negative ones included).
void strided_copy(const Tensor& dst, const Tensor& src) {
  visit_element_size(dst.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    for_each_run<2>({&dst, &src}, kParallelGrain, [](char* const* p, const int64_t* s, int64_t n) {
      U* __restrict o = reinterpret_cast<U*>(p[0]);
      const U* __restrict a = reinterpret_cast<const U*>(p[1]);
      constexpr int64_t e = sizeof(U);
      if (s[0] == e && s[1] == e) {
        std::memcpy(o, a, static_cast<size_t>(n * e));
      } else if (s[0] == e && s[1] == -e) {  // a flipped innermost dim
        for (int64_t i = 0; i < n; ++i) o[i] = a[-i];
      } else {
        const int64_t so = s[0] / e, sa = s[1] / e;
        for (int64_t i = 0; i < n; ++i) o[i * so] = a[i * sa];
      }
    });
  });
}

// Like for_each_run, but elements that differ only along `dim` may write the same place
// (scatter_add, index_add): the parallel chunks split the other dims only, so each such line
// is handled by one thread, in order of k. Within a chunk the loops nest whichever way reads
// memory in order: `dim` outside when the other dims are the inner ones in memory (loop gets
// runs of the other dims, at one k), `dim` inside otherwise (loop gets whole lines along
// `dim`, whose writes may then collide within one call). Memory order is judged on
// operand `order_by` (the source of the additions).
// loop(ptrs, byte_strides, n) as in for_each_run.
template <size_t N, class Loop>
void for_each_run_serial_dim(const std::array<const Tensor*, N>& operands, int64_t dim, size_t order_by,
                             const Loop& loop) {
  const Tensor& ref = *operands[0];
  if (ref.numel() == 0) return;
  const int64_t len = ref.sizes()[dim];
  std::array<Tensor, N> rest;
  std::array<const Tensor*, N> rest_ptrs;
  std::array<int64_t, N> dim_strides;
  for (size_t k = 0; k < N; ++k) {
    rest[k] = drop_dim(*operands[k], dim);
    rest_ptrs[k] = &rest[k];
    dim_strides[k] = operands[k]->strides()[dim] * static_cast<int64_t>(operands[k]->element_size());
  }
  StridedGeometry<N> g = coalesce<N>(rest_ptrs);
  const size_t nd = g.sizes.size();
  const int64_t inner = g.sizes[nd - 1];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = g.byte_strides[k][nd - 1];
  const int64_t numel = rest[0].numel();
  const bool dim_inside =
      len > 1 && (inner == 1 || std::abs(dim_strides[order_by]) < std::abs(inner_strides[order_by]));

  parallel_for(0, numel, grain_for(len), [&](int64_t begin, int64_t end) {
    DimVector start;
    std::array<char*, N> start_ptrs;
    g.locate(begin, start, start_ptrs);
    if (dim_inside) {
      g.walk(begin, end, start, start_ptrs, [&](std::array<char*, N> ptrs, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          loop(ptrs.data(), dim_strides.data(), len);
          for (size_t k = 0; k < N; ++k) ptrs[k] += inner_strides[k];
        }
      });
    } else {
      for (int64_t step = 0; step < len; ++step) {
        std::array<char*, N> ptrs;
        for (size_t k = 0; k < N; ++k) ptrs[k] = start_ptrs[k] + step * dim_strides[k];
        g.walk(begin, end, start, ptrs,
               [&](const std::array<char*, N>& p, int64_t n) { loop(p.data(), inner_strides.data(), n); });
      }
    }
  });
}

// Element offset of row r of t, where rows are all dims but the last, in row-major order.
int64_t row_offset(const Tensor& t, int64_t r) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    const int64_t size = t.sizes()[d];
    offset += (r % size) * t.strides()[d];
    r /= size;
  }
  return offset;
}

// ---- cat ------------------------------------------------------------------------------------

// Every row of out (the dims before `dim`) is the inputs' rows side by side. Contiguous inputs
// are copied as byte ranges by one parallel loop over out's bytes, so that the work splits
// evenly whether there are many small rows or one huge one; other inputs go through the
// strided copy into their slice of out.
void cat_kernel(const Tensor& out, const std::vector<Tensor>& inputs, int64_t dim) {
  const int64_t es = static_cast<int64_t>(out.element_size());
  const DimGeometry g = geometry_around(out, dim);
  const int64_t rows = g.outer, inner = g.inner;
  const size_t n = inputs.size();
  std::vector<int64_t> begins(n), ends(n);  // byte range of each input within a row of out
  std::vector<const char*> sources(n);
  std::vector<bool> fast(n);
  int64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    begins[i] = at;
    at += inputs[i].sizes()[dim] * inner * es;
    ends[i] = at;
    fast[i] = out.is_contiguous() && inputs[i].is_contiguous();
    sources[i] = static_cast<const char*>(inputs[i].data_ptr());
  }
  const int64_t row_bytes = at;
  char* base = static_cast<char*>(out.data_ptr());
  parallel_for(0, rows * row_bytes, kParallelGrain * 8, [&](int64_t b, int64_t e) {
    int64_t pos = b;
    while (pos < e) {
      const int64_t r = pos / row_bytes, q = pos % row_bytes;
      const size_t i = static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), q) - ends.begin());
      const int64_t len = std::min(ends[i] - q, e - pos);
      if (fast[i])
        std::memcpy(base + pos, sources[i] + r * (ends[i] - begins[i]) + (q - begins[i]),
                    static_cast<size_t>(len));
      pos += len;
    }
  });
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t len = inputs[i].sizes()[dim];
    if (!fast[i] && inputs[i].numel() > 0) {
      DimVector sizes(out.sizes());
      sizes[dim] = len;
      strided_copy(restride(out, sizes, out.strides(), offset * out.strides()[dim]), inputs[i]);
    }
    offset += len;
  }
}

// ---- index_select and gather -------------------------------------------------------------------

// out[i] = src[i + index[i] * step] over three operands of one shape (out, src restrided with
// stride 0 along the indexed dim, index).
void indexed_copy(const Tensor& out, const Tensor& src, const Tensor& index, int64_t step) {
  visit_element_size(out.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    for_each_run<3>({&out, &src, &index}, kParallelGrain,
                    [step](char* const* p, const int64_t* s, int64_t n) {
                      U* __restrict o = reinterpret_cast<U*>(p[0]);
                      const U* __restrict a = reinterpret_cast<const U*>(p[1]);
                      const int64_t* __restrict ix = reinterpret_cast<const int64_t*>(p[2]);
                      constexpr int64_t e = sizeof(U), ei = sizeof(int64_t);
                      const int64_t so = s[0] / e, sa = s[1] / e, si = s[2] / ei;
                      if (si == 0) {  // the whole run reads one indexed slice
                        const U* from = a + ix[0] * step;
                        if (so == 1 && sa == 1) {
                          std::memcpy(o, from, static_cast<size_t>(n * e));
                        } else {
                          for (int64_t i = 0; i < n; ++i) o[i * so] = from[i * sa];
                        }
                      } else if (so == 1 && sa == 0 && si == 1) {  // the indexed dim is innermost
                        for (int64_t i = 0; i < n; ++i) o[i] = a[ix[i] * step];
                      } else {
                        for (int64_t i = 0; i < n; ++i) o[i * so] = a[i * sa + ix[i * si] * step];
                      }
                    });
  });
}

void index_select_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  DimVector in_strides(in.strides());
  in_strides[dim] = 0;
  DimVector index_strides(static_cast<size_t>(out.dim()), 0);
  index_strides[dim] = index.strides()[0];
  indexed_copy(out, restride(in, out.sizes(), in_strides), restride(index, out.sizes(), index_strides),
               in.strides()[dim]);
}

void gather_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  DimVector in_strides(in.strides());
  in_strides[dim] = 0;
  indexed_copy(out, restride(in, index.sizes(), in_strides), index, in.strides()[dim]);
}

// ---- scatter_add and index_add -------------------------------------------------------------------

// out[i + index[i] * step] += src[i] over three operands of one shape (out restrided with
// stride 0 along `dim`, src, index); `dim` runs serially because its elements may collide.
void indexed_add(const Tensor& out, const Tensor& src, const Tensor& index, int64_t dim, int64_t step) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    for_each_run_serial_dim<3>(
        {&out, &src, &index}, dim, 1, [step](char* const* p, const int64_t* s, int64_t n) {
          T* o = reinterpret_cast<T*>(p[0]);
          const T* __restrict a = reinterpret_cast<const T*>(p[1]);
          const int64_t* __restrict ix = reinterpret_cast<const int64_t*>(p[2]);
          constexpr int64_t e = sizeof(T), ei = sizeof(int64_t);
          const int64_t so = s[0] / e, sa = s[1] / e, si = s[2] / ei;
          if (si == 0) {  // one destination slice for the whole run: no collisions within it
            T* __restrict to = o + ix[0] * step;
            if (so == 1 && sa == 1) {
              for (int64_t i = 0; i < n; ++i)
                to[i] = static_cast<T>(static_cast<M>(to[i]) + static_cast<M>(a[i]));
            } else {
              for (int64_t i = 0; i < n; ++i)
                to[i * so] = static_cast<T>(static_cast<M>(to[i * so]) + static_cast<M>(a[i * sa]));
            }
          } else {
            for (int64_t i = 0; i < n; ++i) {
              T& d = o[i * so + ix[i * si] * step];
              d = static_cast<T>(static_cast<M>(d) + static_cast<M>(a[i * sa]));
            }
          }
        });
  });
}

void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (index.numel() == 0) return;
  DimVector out_strides(out.strides());
  out_strides[dim] = 0;
  indexed_add(restride(out, index.sizes(), out_strides), restride(src, index.sizes(), src.strides()), index,
              dim, out.strides()[dim]);
}

void index_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (src.numel() == 0) return;
  DimVector out_strides(out.strides());
  out_strides[dim] = 0;
  DimVector index_strides(static_cast<size_t>(src.dim()), 0);
  index_strides[dim] = index.strides()[0];
  indexed_add(restride(out, src.sizes(), out_strides), src, restride(index, src.sizes(), index_strides), dim,
              out.strides()[dim]);
}

// ---- tril / triu ------------------------------------------------------------------------------

// Copies each row's kept columns (a prefix for tril, a suffix for triu) and zeroes the rest.
template <bool kLower>
void triangle_kernel(const Tensor& out, const Tensor& in, int64_t diagonal) {
  const int64_t nd = in.dim(), rows_per_matrix = in.sizes()[nd - 2], cols = in.sizes()[nd - 1];
  if (in.numel() == 0) return;
  // Beyond [-rows, cols] every diagonal gives the same result; clamping avoids overflow below.
  diagonal = std::clamp(diagonal, -rows_per_matrix, cols);
  const int64_t rows = in.numel() / cols;
  const int64_t sc = in.strides()[nd - 1], dc = out.strides()[nd - 1];
  visit_element_size(in.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src_base = static_cast<const U*>(in.data_ptr());
    U* dst_base = static_cast<U*>(out.data_ptr());
    parallel_for(0, rows, grain_for(cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const U* __restrict src = src_base + row_offset(in, r);
        U* __restrict dst = dst_base + row_offset(out, r);
        const int64_t row = r % rows_per_matrix;
        // tril keeps columns c <= row + diagonal, triu keeps c >= row + diagonal.
        const int64_t keep_begin = kLower ? 0 : std::clamp<int64_t>(row + diagonal, 0, cols);
        const int64_t keep_end = kLower ? std::clamp<int64_t>(row + diagonal + 1, 0, cols) : cols;
        if (sc == 1 && dc == 1) {
          std::fill(dst, dst + keep_begin, U{0});
          std::memcpy(dst + keep_begin, src + keep_begin,
                      static_cast<size_t>(keep_end - keep_begin) * sizeof(U));
          std::fill(dst + keep_end, dst + cols, U{0});
        } else {
          for (int64_t c = 0; c < keep_begin; ++c) dst[c * dc] = U{0};
          for (int64_t c = keep_begin; c < keep_end; ++c) dst[c * dc] = src[c * sc];
          for (int64_t c = keep_end; c < cols; ++c) dst[c * dc] = U{0};
        }
      }
    });
  });
}

// ---- flip -------------------------------------------------------------------------------------

// A view of `in` that walks the flipped dims backwards (negative strides), copied into out.
void flip_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims) {
  DimVector strides(in.strides());
  int64_t offset = 0;
  for (int64_t d : dims) {
    const int64_t size = in.sizes()[d];
    if (size == 0) continue;
    offset += (size - 1) * strides[d];
    strides[d] = -strides[d];
  }
  strided_copy(out, restride(in, in.sizes(), strides, offset));
}

// ---- pad and its gradient ---------------------------------------------------------------------

// Works row by row over out (all dims but the last): each padded outer dim maps the row to
// an input row (or to the fill), then the last dim is copied with its own padding.
void pad_kernel(const Tensor& out, const Tensor& in, IntArrayRef pads, PadMode mode, double value) {
  if (out.numel() == 0) return;
  const int64_t nd = out.dim();
  if (nd == 0) {
    strided_copy(out, in);
    return;
  }
  DimVector left(static_cast<size_t>(nd), 0);
  for (size_t i = 0; i < pads.size() / 2; ++i) left[static_cast<size_t>(nd) - 1 - i] = pads[2 * i];
  const int64_t out_cols = out.sizes()[nd - 1], in_cols = in.sizes()[nd - 1], lead = left[nd - 1];
  const int64_t rows = out.numel() / out_cols;
  const int64_t sc = in.strides()[nd - 1], dc = out.strides()[nd - 1];
  // Output columns [lo, hi) copy input columns [lo - lead, hi - lead); the rest is padding.
  const int64_t lo = std::clamp<int64_t>(lead, 0, out_cols),
                hi = std::clamp<int64_t>(lead + in_cols, lo, out_cols);
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T fill = static_cast<T>(value);
    const T* src_base = static_cast<const T*>(in.data_ptr());
    T* dst_base = static_cast<T*>(out.data_ptr());
    parallel_for(0, rows, grain_for(out_cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t rest = r, src_offset = 0, dst_offset = 0;
        bool fill_row = false;
        for (int64_t d = nd - 2; d >= 0; --d) {
          const int64_t j = rest % out.sizes()[d];
          rest /= out.sizes()[d];
          dst_offset += j * out.strides()[d];
          const int64_t i = pad_source(j, left[d], in.sizes()[d], static_cast<int>(mode));
          if (i < 0)
            fill_row = true;
          else
            src_offset += i * in.strides()[d];
        }
        T* __restrict dst = dst_base + dst_offset;
        if (fill_row) {
          for (int64_t c = 0; c < out_cols; ++c) dst[c * dc] = fill;
          continue;
        }
        const T* __restrict src = src_base + src_offset;
        auto edge = [&](int64_t c) {
          dst[c * dc] =
              mode == PadMode::Constant ? fill : src[pad_source(c, lead, in_cols, static_cast<int>(mode)) * sc];
        };
        for (int64_t c = 0; c < lo; ++c) edge(c);
        if (sc == 1 && dc == 1) {
          std::memcpy(dst + lo, src + (lo - lead), static_cast<size_t>(hi - lo) * sizeof(T));
        } else {
          for (int64_t c = lo; c < hi; ++c) dst[c * dc] = src[(c - lead) * sc];
        }
        for (int64_t c = hi; c < out_cols; ++c) edge(c);
      }
    });
  });
}

// Gradient of reflect padding along one dim of contiguous tensors viewed as
// [outer, size, inner] (dst, the input's size) and [outer, padded, inner] (src). Input
// position i collects the output positions that read it: itself (i + left), the left mirror
// left - i (for 1 <= i <= left) and the right mirror left + 2 (size - 1) - i (for
// size - 1 - right <= i <= size - 2). Each block copies the first and adds the mirrors.
void reflect_backward_dim(const Tensor& dst, const Tensor& src, int64_t dim, int64_t left, int64_t right) {
  const int64_t size = dst.sizes()[dim], padded = src.sizes()[dim];
  const DimGeometry g = geometry_around(dst, dim);
  const int64_t outer = g.outer, inner = g.inner;
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const T* src_base = static_cast<const T*>(src.data_ptr());
    T* dst_base = static_cast<T*>(dst.data_ptr());
    auto accumulate = [inner](T* __restrict to, const T* __restrict from) {
      for (int64_t k = 0; k < inner; ++k)
        to[k] = static_cast<T>(static_cast<M>(to[k]) + static_cast<M>(from[k]));
    };
    // Rows [first, last) of dst have an identity source; negative pads crop the others.
    const int64_t first = std::clamp<int64_t>(-left, 0, size),
                  last = std::clamp<int64_t>(padded - left, first, size);
    parallel_for(0, outer, grain_for(size * inner),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o) {
                     const T* from = src_base + o * padded * inner;
                     T* to = dst_base + o * size * inner;
                     std::fill(to, to + first * inner, T{});
                     std::memcpy(to + first * inner, from + (first + left) * inner,
                                 static_cast<size_t>((last - first) * inner) * sizeof(T));
                     std::fill(to + last * inner, to + size * inner, T{});
                     for (int64_t i = 1; i <= left; ++i)
                       accumulate(to + i * inner, from + (left - i) * inner);
                     for (int64_t i = std::max<int64_t>(size - 1 - right, 0); i <= size - 2; ++i)
                       accumulate(to + i * inner, from + (left + 2 * (size - 1) - i) * inner);
                   }
                 });
  });
}

void pad_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, IntArrayRef pads, PadMode mode) {
  if (grad_input.numel() == 0) return;
  if (mode == PadMode::Constant) {
    // Each input element was copied once (or cropped away): the gradient is grad_out with
    // the padding removed, i.e. a constant pad by the negated pads with zeros.
    DimVector negated(pads);
    for (int64_t& p : negated) p = -p;
    pad_kernel(grad_input, grad_out, negated, PadMode::Constant, 0.0);
    return;
  }
  LOOM_CHECK(mode == PadMode::Reflect, "pad_backward kernel: ", pad_mode_name(mode),
             " padding's gradient is composed of index_add (ops/shape_ops.cpp), not computed here");
  // Reflect padding is separable: undo it one padded dim at a time, last dim first.
  Tensor g = grad_out;
  if (!g.is_contiguous()) {
    g = empty(grad_out.sizes(), grad_out.options());
    strided_copy(g, grad_out);
  }
  const int64_t nd = grad_input.dim(), pairs = static_cast<int64_t>(pads.size() / 2);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t dim = nd - 1 - p;
    DimVector sizes(g.sizes());
    sizes[dim] = grad_input.sizes()[dim];
    const bool last = p == pairs - 1;
    Tensor next = last && grad_input.is_contiguous() ? grad_input : empty(sizes, g.options());
    reflect_backward_dim(next, g, dim, pads[2 * p], pads[2 * p + 1]);
    g = next;
  }
  if (!g.is_same(grad_input)) strided_copy(grad_input, g);
}

}  // namespace

void register_shape_kernels() {
  register_kernel<Op::cat>(DeviceType::CPU, cat_kernel);
  register_kernel<Op::index_select>(DeviceType::CPU, index_select_kernel);
  register_kernel<Op::index_add>(DeviceType::CPU, index_add_kernel);
  register_kernel<Op::gather>(DeviceType::CPU, gather_kernel);
  register_kernel<Op::scatter_add>(DeviceType::CPU, scatter_add_kernel);
  register_kernel<Op::tril>(DeviceType::CPU, triangle_kernel<true>);
  register_kernel<Op::triu>(DeviceType::CPU, triangle_kernel<false>);
  register_kernel<Op::flip>(DeviceType::CPU, flip_kernel);
  register_kernel<Op::pad>(DeviceType::CPU, pad_kernel);
  register_kernel<Op::pad_backward>(DeviceType::CPU, pad_backward_kernel);
}

}  // namespace loom::cpu
