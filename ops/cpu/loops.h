/*
 * The one strided-iteration engine behind every CPU elementwise kernel (ggml's unary-ops
 * apply, PyTorch's TensorIterator, reduced to what Loom needs).
 *
 * All operands have the same shape (the ops layer expands broadcast inputs into stride-0
 * views). Dims are coalesced where every operand is contiguous across them, so a
 * contiguous or simply-broadcast tensor of any rank becomes a 1-D loop. The remaining
 * index space is split into chunks for the OpenMP pool; each chunk calls the typed inner
 * loop on runs of the innermost dim. The typed loops give the compiler unit-stride and
 * scalar-operand versions to vectorise.
 */
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/numeric_cast.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "ops/cpu/vector_isa.h"

namespace loom::cpu {

// Geometry of N operands after coalescing: sizes (innermost last) and byte strides.
template <size_t N>
struct StridedGeometry {
  DimVector sizes;
  std::array<DimVector, N> byte_strides;
  std::array<char*, N> base;

  // The multi-index of row-major position `pos` and each operand's pointer to that element.
  void locate(int64_t pos, DimVector& index, std::array<char*, N>& ptrs) const {
    const size_t nd = sizes.size();
    index.assign(nd, 0);
    for (size_t i = nd; i-- > 0;) {
      index[i] = pos % sizes[i];
      pos /= sizes[i];
    }
    for (size_t k = 0; k < N; ++k) {
      ptrs[k] = base[k];
      for (size_t i = 0; i < nd; ++i) ptrs[k] += index[i] * byte_strides[k][i];
    }
  }

  // Calls visit(ptrs, n) on the runs of the innermost dim that cover positions [begin, end),
  // given the index and pointers of `begin` (from locate).
  template <class Visit>
  void walk(int64_t begin, int64_t end, DimVector index, std::array<char*, N> ptrs, const Visit& visit) const {
    const size_t nd = sizes.size();
    const int64_t inner = sizes[nd - 1];
    int64_t pos = begin;
    while (pos < end) {
      const int64_t n = std::min(inner - index[nd - 1], end - pos);
      visit(ptrs, n);
      pos += n;
      if (pos >= end) break;
      // Advance to the start of the next run: carry through the outer dims.
      index[nd - 1] += n;
      for (size_t k = 0; k < N; ++k) ptrs[k] += n * byte_strides[k][nd - 1];
      for (size_t i = nd - 1; i > 0 && index[i] == sizes[i]; --i) {
        index[i] = 0;
        ++index[i - 1];
        for (size_t k = 0; k < N; ++k) ptrs[k] += byte_strides[k][i - 1] - sizes[i] * byte_strides[k][i];
      }
    }
  }
};

template <size_t N>
StridedGeometry<N> coalesce(const std::array<const Tensor*, N>& operands) {
  StridedGeometry<N> g;
  const Tensor& ref = *operands[0];
  int64_t ndim = ref.dim();
  for (size_t k = 0; k < N; ++k) g.base[k] = static_cast<char*>(operands[k]->data_ptr());
  // Walk dims from innermost out, dropping size-1 dims and merging dim d into the run when
  // every operand's stride at d equals (its stride at the inner dim) * (inner size).
  DimVector sizes_rev;
  std::array<DimVector, N> strides_rev;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    int64_t size = ref.sizes()[d];
    if (size == 1) continue;
    bool merge = !sizes_rev.empty();
    for (size_t k = 0; k < N && merge; ++k) {
      int64_t inner_stride = strides_rev[k].back();
      int64_t stride = operands[k]->strides()[d] * static_cast<int64_t>(operands[k]->element_size());
      merge = stride == inner_stride * sizes_rev.back();
    }
    if (merge) {
      sizes_rev.back() *= size;
    } else {
      sizes_rev.push_back(size);
      for (size_t k = 0; k < N; ++k)
        strides_rev[k].push_back(operands[k]->strides()[d] * static_cast<int64_t>(operands[k]->element_size()));
    }
  }
  if (sizes_rev.empty()) {  // 0-dim or all-ones: one element
    sizes_rev.push_back(1);
    for (size_t k = 0; k < N; ++k) strides_rev[k].push_back(0);
  }
  size_t nd = sizes_rev.size();
  g.sizes.resize(nd);
  for (size_t k = 0; k < N; ++k) g.byte_strides[k].resize(nd);
  for (size_t i = 0; i < nd; ++i) {
    g.sizes[i] = sizes_rev[nd - 1 - i];
    for (size_t k = 0; k < N; ++k) g.byte_strides[k][i] = strides_rev[k][nd - 1 - i];
  }
  return g;
}

// Calls loop(ptrs, inner_byte_strides, n) over runs of the innermost dim covering every
// element once, in parallel chunks when numel exceeds `grain`.
// loop: void(char* const* ptrs, const int64_t* strides, int64_t n)
template <size_t N, class Loop>
void for_each_run(const std::array<const Tensor*, N>& operands, int64_t grain, const Loop& loop) {
  int64_t numel = operands[0]->numel();
  if (numel == 0) return;
  StridedGeometry<N> g = coalesce<N>(operands);
  const size_t nd = g.sizes.size();
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = g.byte_strides[k][nd - 1];

  parallel_for(0, numel, grain, [&](int64_t begin, int64_t end) {
    DimVector index;
    std::array<char*, N> ptrs;
    g.locate(begin, index, ptrs);
    with_vector_isa([&] {
      g.walk(begin, end, std::move(index), ptrs,
             [&](const std::array<char*, N>& p, int64_t n) { loop(p.data(), inner_strides.data(), n); });
    });
  });
}

// out[i] = f(in[i]). Out and In are storage types; f maps opmath values.
template <class Out, class In, class F>
void unary_loop(const Tensor& out, const Tensor& in, const F& f, int64_t grain = kParallelGrain) {
  for_each_run<2>({&out, &in}, grain, [&](char* const* p, const int64_t* s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const In* a = reinterpret_cast<const In*>(p[1]);
    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
      for (int64_t i = 0; i < n; ++i) o[i] = numeric_cast<Out>(f(static_cast<opmath_t<In>>(a[i])));
    } else {
      const int64_t so = s[0] / static_cast<int64_t>(sizeof(Out)), sa = s[1] / static_cast<int64_t>(sizeof(In));
      for (int64_t i = 0; i < n; ++i) o[i * so] = numeric_cast<Out>(f(static_cast<opmath_t<In>>(a[i * sa])));
    }
  });
}

// out[i] = f(a[i], b[i]), with unit-stride and scalar-operand fast paths.
template <class Out, class In, class F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, const F& f, int64_t grain = kParallelGrain) {
  using M = opmath_t<In>;
  for_each_run<3>({&out, &a, &b}, grain, [&](char* const* p, const int64_t* s, int64_t n) {
    Out* __restrict o = reinterpret_cast<Out*>(p[0]);
    const In* __restrict x = reinterpret_cast<const In*>(p[1]);
    const In* __restrict y = reinterpret_cast<const In*>(p[2]);
    constexpr int64_t so1 = sizeof(Out), si1 = sizeof(In);
    if (s[0] == so1 && s[1] == si1 && s[2] == si1) {
      for (int64_t i = 0; i < n; ++i) o[i] = numeric_cast<Out>(f(static_cast<M>(x[i]), static_cast<M>(y[i])));
    } else if (s[0] == so1 && s[1] == si1 && s[2] == 0) {
      const M yv = static_cast<M>(*y);
      for (int64_t i = 0; i < n; ++i) o[i] = numeric_cast<Out>(f(static_cast<M>(x[i]), yv));
    } else if (s[0] == so1 && s[1] == 0 && s[2] == si1) {
      const M xv = static_cast<M>(*x);
      for (int64_t i = 0; i < n; ++i) o[i] = numeric_cast<Out>(f(xv, static_cast<M>(y[i])));
    } else {
      const int64_t so = s[0] / so1, sx = s[1] / si1, sy = s[2] / si1;
      for (int64_t i = 0; i < n; ++i)
        o[i * so] = numeric_cast<Out>(f(static_cast<M>(x[i * sx]), static_cast<M>(y[i * sy])));
    }
  });
}

}  // namespace loom::cpu
