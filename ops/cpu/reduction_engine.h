/*
 * The engine of the CPU reductions (reduction_kernels.cpp holds the reducers and kernels).
 *
 * The input's dims split into two groups: kept dims (one output element per index) and reduced
 * dims. Size-1 dims are dropped and neighbours that are contiguous with each other are merged
 * (ops/reduction_plan.h), so "rows of a contiguous matrix", "columns of a contiguous matrix" and
 * "everything" each become a one- or two-dim problem whatever the rank. Then one of two loops runs:
 *
 *   rows     for each output, walk its reduced elements in runs of the innermost reduced dim
 *            and fold each run with a vectorised multi-accumulator loop (the reduced dims
 *            are innermost in memory, or the layout is irregular);
 *   columns  when the innermost kept dim is the unit-stride one (reducing the outer dim of a
 *            contiguous tensor), keep a block of up to kColumns outputs in registers/L1 and
 *            add whole unit-stride rows into it, so memory is read once, in order.
 *
 * Work is split over outputs. When there are few outputs (a full reduction, or [2, 10^7]
 * reduced over dim 1) the reduced range is also cut into chunks whose partial results are
 * combined pairwise afterwards; the chunking depends only on the shapes, so results do not
 * depend on the number of threads. Columns fold rows in a two-level cascade (kCascade).
 * Each thread's share runs through with_vector_isa (AVX2 in portable builds); the folds'
 * fixed lanes keep the order of the additions, so the results do not depend on the ISA either.
 *
 * A reducer tells the engine what to do:
 *   Acc identity();                                              empty accumulator
 *   void row(Acc&, const V* p, int64_t n, int64_t out, int64_t pos);   fold p[0..n)
 *   void columns(Acc* acc, const V* p, int64_t n, int64_t out, int64_t pos);  acc[j] op= p[j]
 *   Acc combine(const Acc& a, const Acc& b);                     a covers earlier elements
 *   void write(int64_t out, const Acc&);                         store output `out`
 * where V = opmath_t<T> (16-bit floats are converted to float, kBuffer at a time, before a
 * reducer sees them), `out` is the row-major index of the output (out tensors are contiguous)
 * and `pos` the index of p[0] in the row-major order of the reduced dims (its position along
 * dim for max/min).
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "core/dtype.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "ops/cpu/block_conversion.h"
#include "ops/cpu/parallel_grain.h"
#include "ops/cpu/vector_isa.h"
#include "ops/reduction_plan.h"

namespace loom::cpu::reduction {

// 1,024 outputs (4 KB of floats) per block: with 256 each row of a 16 KB-wide input started a new
// page every 1 KB and the hardware prefetcher never got going (column sums ran at half
// PyTorch's speed, docs/cpu-threads.md).
constexpr int64_t kColumns = 1024;   // outputs per block in the columns loop
constexpr int64_t kCascade = 512;    // rows per inner block of the columns cascade
constexpr int64_t kBuffer = 512;     // elements converted per step for 16-bit/strided runs
constexpr int64_t kChunk = 32768;    // least elements per chunk when the reduced range is split
constexpr int64_t kFewOutputs = 64;  // below this many work units, split the reduced range

// ---- geometry -------------------------------------------------------------------------------

// A group of dims of the input (ops/reduction_plan.h) with the walks the CPU loops need.
struct Group : DimGroup {

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  int64_t inner_size() const { return sizes.empty() ? 1 : sizes[sizes.size() - 1]; }
  int64_t inner_stride() const { return sizes.empty() ? 0 : strides[strides.size() - 1]; }

  // Element offset of the element with row-major index `linear`.
  int64_t offset_of(int64_t linear) const {
    int64_t off = 0;
    for (size_t i = sizes.size(); i-- > 0;) {
      off += (linear % sizes[i]) * strides[i];
      linear /= sizes[i];
    }
    return off;
  }

  // Calls f(offset, n, pos) for runs of the innermost dim that cover the row-major indices
  // [begin, end) once: elements offset + k * inner_stride() for k < n, the first at index pos.
  template <class F>
  void for_each_run(int64_t begin, int64_t end, const F& f) const {
    if (begin >= end) return;
    if (sizes.empty()) {
      f(int64_t{0}, int64_t{1}, int64_t{0});
      return;
    }
    const size_t nd = sizes.size();
    if (nd == 1) {  // the common case, without the index bookkeeping
      f(begin * strides[0], end - begin, begin);
      return;
    }
    DimVector index(nd, 0);
    int64_t rest = begin, off = 0;
    for (size_t i = nd; i-- > 0 && rest > 0;) {
      index[i] = rest % sizes[i];
      rest /= sizes[i];
      off += index[i] * strides[i];
    }
    int64_t pos = begin;
    while (pos < end) {
      const int64_t n = std::min(sizes[nd - 1] - index[nd - 1], end - pos);
      f(off, n, pos);
      pos += n;
      if (pos >= end) break;
      index[nd - 1] += n;
      off += n * strides[nd - 1];
      for (size_t i = nd - 1; i > 0 && index[i] == sizes[i]; --i) {
        index[i] = 0;
        ++index[i - 1];
        off += strides[i - 1] - sizes[i] * strides[i];
      }
    }
  }
};

struct Plan {
  Group kept;     // in the input's dim order: row-major index = output index
  Group reduced;  // stride-0 dims first, then by decreasing stride: the innermost is the densest
};

Plan make_plan(const Tensor& in, IntArrayRef dims) {
  ReductionPlan p = plan_reduction(in, dims);
  return {{std::move(p.kept)}, {std::move(p.reduced)}};
}

// The columns loop runs when the unit-stride dim is a kept one, wide enough to vectorise over.
bool columns_layout(const Plan& p) {
  return !p.kept.sizes.empty() && p.kept.inner_stride() == 1 && p.kept.inner_size() >= 8 &&
         (p.reduced.sizes.empty() || p.reduced.inner_stride() != 1);
}

// Calls fn(v, m, pos) on pieces of the run p[k * stride], k < n, as unit-stride arrays of V;
// a unit-stride run that needs no conversion is passed as it is.
template <class T, class V, class F>
void for_each_piece(const T* p, int64_t n, int64_t stride, int64_t pos, const F& fn) {
  if constexpr (std::is_same_v<T, V>) {
    if (stride == 1) {
      fn(p, n, pos);
      return;
    }
  }
  V buf[kBuffer];
  for (int64_t k = 0; k < n; k += kBuffer) {
    const int64_t m = std::min(kBuffer, n - k);
    widen_block(p + k * stride, stride, buf, m);
    fn(static_cast<const V*>(buf), m, pos + k);
  }
}

// ---- the engine -------------------------------------------------------------------------------

template <class T, class R>
void reduce(const Tensor& in, IntArrayRef dims, const R& r) {
  using V = opmath_t<T>;
  using Acc = typename R::Acc;
  const Plan plan = make_plan(in, dims);
  const Group& kept = plan.kept;
  const Group& red = plan.reduced;
  const int64_t n_out = kept.numel(), n_red = red.numel();
  if (n_out == 0) return;
  if (n_red == 0) {
    for (int64_t o = 0; o < n_out; ++o) r.write(o, r.identity());
    return;
  }
  const T* data = static_cast<const T*>(in.data_ptr());
  const int64_t red_stride = red.inner_stride();

  const bool columns = columns_layout(plan);
  const int64_t inner = columns ? kept.inner_size() : 1;
  const int64_t blocks_per_line = (inner + kColumns - 1) / kColumns;
  const int64_t units = columns ? (n_out / inner) * blocks_per_line : n_out;
  const int64_t width = columns ? std::min(inner, kColumns) : 1;  // outputs per unit (at most)

  // Work unit u covers outputs [first, first + count): one output for rows, a block of up to
  // kColumns neighbours along the innermost kept dim for columns.
  auto unit_outputs = [&](int64_t u, int64_t& first, int64_t& count) {
    if (!columns) {
      first = u;
      count = 1;
    } else {
      const int64_t line = u / blocks_per_line, j0 = (u % blocks_per_line) * kColumns;
      first = line * inner + j0;
      count = std::min(kColumns, inner - j0);
    }
  };

  // Rows: folds reduced indices [rb, re) of output o, whose first element is base[0], into acc.
  auto fold_rows = [&](const T* base, int64_t o, int64_t rb, int64_t re, Acc& acc) {
    red.for_each_run(rb, re, [&](int64_t off, int64_t n, int64_t pos) {
      for_each_piece<T, V>(base + off, n, red_stride, pos,
                           [&](const V* v, int64_t m, int64_t at) { r.row(acc, v, m, o, at); });
    });
  };

  // Folds reduced indices [rb, re) of unit u into acc[0..count).
  auto run_unit = [&](int64_t u, int64_t rb, int64_t re, Acc* acc) {
    int64_t first = 0, count = 0;
    unit_outputs(u, first, count);
    const T* base = data + kept.offset_of(first);
    if (!columns) {
      fold_rows(base, first, rb, re, acc[0]);
      return;
    }
    // Two-level cascade: rows go into `block`, which is folded into acc every kCascade rows.
    Acc block[kColumns];
    V buf[kColumns];
    int64_t in_block = 0;
    std::fill(block, block + count, r.identity());
    red.for_each_run(rb, re, [&](int64_t off, int64_t n, int64_t pos) {
      for (int64_t k = 0; k < n; ++k) {
        const T* row = base + off + k * red_stride;
        const V* v;
        if constexpr (std::is_same_v<T, V>) {
          v = row;
        } else {
          widen_block(row, 1, buf, count);
          v = buf;
        }
        r.columns(block, v, count, first, pos + k);
        if (++in_block == kCascade) {
          for (int64_t j = 0; j < count; ++j) acc[j] = r.combine(acc[j], block[j]);
          std::fill(block, block + count, r.identity());
          in_block = 0;
        }
      }
    });
    for (int64_t j = 0; j < count; ++j) acc[j] = r.combine(acc[j], block[j]);
  };

  // Split the reduced range only when there are too few units to share out: into enough
  // chunks for about kFewOutputs work items, each of at least kChunk elements.
  int64_t chunks = 1;
  if (units < kFewOutputs) {
    const int64_t by_items = (kFewOutputs + units - 1) / units;
    const int64_t by_size = std::max<int64_t>(1, n_red * width / kChunk);
    chunks = std::min(by_items, by_size);
  }
  const int64_t chunk_len = (n_red + chunks - 1) / chunks;

  if (chunks <= 1) {
    parallel_for(0, units, grain_for(n_red * width), [&](int64_t ub, int64_t ue) {
      with_vector_isa([&] {
        if (!columns) {  // outputs in order, their offsets stepped rather than recomputed
          const int64_t kept_stride = kept.inner_stride();
          kept.for_each_run(ub, ue, [&](int64_t off, int64_t n, int64_t pos) {
            for (int64_t k = 0; k < n; ++k) {
              Acc acc = r.identity();
              fold_rows(data + off + k * kept_stride, pos + k, 0, n_red, acc);
              r.write(pos + k, acc);
            }
          });
          return;
        }
        Acc acc[kColumns];
        for (int64_t u = ub; u < ue; ++u) {
          int64_t first = 0, count = 0;
          unit_outputs(u, first, count);
          std::fill(acc, acc + count, r.identity());
          run_unit(u, 0, n_red, acc);
          for (int64_t j = 0; j < count; ++j) r.write(first + j, acc[j]);
        }
      });
    });
    return;
  }

  // partial[(u * chunks + c) * width + j]: chunk c of output j of unit u.
  // (std::unique_ptr rather than std::vector, which packs bool.)
  const int64_t n_partial = units * chunks * width;
  std::unique_ptr<Acc[]> partial(new Acc[static_cast<size_t>(n_partial)]);
  std::fill(partial.get(), partial.get() + n_partial, r.identity());
  parallel_for(0, units * chunks, 1, [&](int64_t b, int64_t e) {
    with_vector_isa([&] {
      for (int64_t item = b; item < e; ++item) {
        const int64_t u = item / chunks, c = item % chunks;
        run_unit(u, c * chunk_len, std::min(n_red, (c + 1) * chunk_len), partial.get() + item * width);
      }
    });
  });
  // Pairwise combination of the chunk partials, in order (a covers earlier elements than b).
  for (int64_t u = 0; u < units; ++u) {
    int64_t first = 0, count = 0;
    unit_outputs(u, first, count);
    Acc* p = partial.get() + u * chunks * width;
    for (int64_t step = 1; step < chunks; step *= 2)
      for (int64_t c = 0; c + step < chunks; c += 2 * step)
        for (int64_t j = 0; j < count; ++j)
          p[c * width + j] = r.combine(p[c * width + j], p[(c + step) * width + j]);
    for (int64_t j = 0; j < count; ++j) r.write(first + j, p[j]);
  }
}

}  // namespace loom::cpu::reduction
