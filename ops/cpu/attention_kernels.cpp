/*
 * CPU kernels of flash_attention and its backward (ops/attention_ops.h): the exact per-row
 * computation, in float (double for float64) whatever the storage dtype. They are the
 * reference the CUDA kernels are tested against, and make the fused op usable on the CPU
 * (scaled_dot_product_attention itself takes the written-out path there).
 *
 *   forward, per query row i:  s_j = scale q_i.k_j + mask_ij (-inf where causal hides j > i)
 *                              m = max_j s_j, l = sum_j exp(s_j - m)
 *                              out_i = sum_j exp(s_j - m) v_j / l,  logsumexp_i = m + log l
 *   backward, per (batch, head): P_ij = exp(s_ij - logsumexp_i), D_i = grad_out_i . out_i
 *                              dv_j = sum_i P_ij grad_out_i,  dS_ij = P_ij (grad_out_i . v_j - D_i)
 *                              dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i
 */
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/dispatch.h"

namespace loom::cpu {

namespace {

// The scores of one query row into s[0, S), with the mask and causality applied; returns their max,
// NaN when a score is NaN (so that the row's output and logsumexp are NaN, as softmax's are).
template <class T, class A>
A row_scores(std::vector<A>& s, const T* qi, const T* k, const A* mask_row, int64_t mask_col_stride, int64_t i,
             int64_t n_keys, int64_t e, A scale, bool is_causal) {
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t j = 0; j < n_keys; ++j) {
    if (is_causal && j > i) {
      s[j] = -std::numeric_limits<A>::infinity();
      continue;
    }
    A dot = 0;
    for (int64_t d = 0; d < e; ++d) dot += static_cast<A>(qi[d]) * static_cast<A>(k[j * e + d]);
    s[j] = dot * scale + (mask_row ? mask_row[j * mask_col_stride] : A(0));
    m = (s[j] > m || std::isnan(s[j])) && !std::isnan(m) ? s[j] : m;
  }
  return m;
}

struct Dims {
  int64_t n, l, s, e, ev;
};

Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return {q.size(0), q.size(1), k.size(1), q.size(2), v.size(2)};
}

// The mask's row i of batch b (nullptr without a mask) and its column stride.
template <class A>
const A* mask_row(const Tensor& mask, int64_t b, int64_t i) {
  if (!mask.defined()) return nullptr;
  return mask.data_ptr<A>() + b * mask.stride(0) + i * mask.stride(1);
}

template <class T>
void forward_typed(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& mask, double scale, bool is_causal) {
  using A = opmath_t<T>;
  const Dims d = dims_of(q, k, v);
  const int64_t mask_cs = mask.defined() ? mask.stride(2) : 0;
  // One row costs S (E + Ev) multiply-adds: a few rows a task already pay for the pool.
  parallel_for(0, d.n * d.l, 4, [&](int64_t begin, int64_t end) {
    std::vector<A> s(static_cast<size_t>(d.s)), acc(static_cast<size_t>(d.ev));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / d.l, i = row % d.l;
      const T* kb = k.data_ptr<T>() + b * d.s * d.e;
      const T* vb = v.data_ptr<T>() + b * d.s * d.ev;
      const A m = row_scores<T, A>(s, q.data_ptr<T>() + row * d.e, kb, mask_row<A>(mask, b, i), mask_cs, i, d.s,
                                   d.e, static_cast<A>(scale), is_causal);
      std::fill(acc.begin(), acc.end(), A(0));
      A l = 0;
      if (m != -std::numeric_limits<A>::infinity()) {
        for (int64_t j = 0; j < d.s; ++j) {
          if (s[j] == -std::numeric_limits<A>::infinity()) continue;  // masked: no part, even in a NaN row
          const A p = std::exp(s[j] - m);
          if (p == A(0)) continue;
          l += p;
          for (int64_t c = 0; c < d.ev; ++c) acc[c] += p * static_cast<A>(vb[j * d.ev + c]);
        }
      }
      T* o = out.data_ptr<T>() + row * d.ev;
      // l is 0 only when every key is masked (l >= 1 otherwise: the maximum's term is 1), and NaN
      // when a score is, which the output and logsumexp keep.
      for (int64_t c = 0; c < d.ev; ++c) o[c] = static_cast<T>(l == 0 ? A(0) : acc[c] / l);
      logsumexp.data_ptr<A>()[row] = l == 0 ? -std::numeric_limits<A>::infinity() : m + std::log(l);
    }
  });
}

template <class T>
void backward_typed(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v, const Tensor& grad_out,
                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& logsumexp,
                    const Tensor& mask, double scale, bool is_causal) {
  using A = opmath_t<T>;
  const Dims d = dims_of(q, k, v);
  const int64_t mask_cs = mask.defined() ? mask.stride(2) : 0;
  const A sc = static_cast<A>(scale);
  // dk and dv sum over every query row of a head, so a task owns whole heads.
  parallel_for(0, d.n, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> s(static_cast<size_t>(d.s)), dq(static_cast<size_t>(d.e)),
        dk(static_cast<size_t>(d.s * d.e)), dv(static_cast<size_t>(d.s * d.ev));
    for (int64_t b = begin; b < end; ++b) {
      const T* qb = q.data_ptr<T>() + b * d.l * d.e;
      const T* kb = k.data_ptr<T>() + b * d.s * d.e;
      const T* vb = v.data_ptr<T>() + b * d.s * d.ev;
      std::fill(dk.begin(), dk.end(), A(0));
      std::fill(dv.begin(), dv.end(), A(0));
      for (int64_t i = 0; i < d.l; ++i) {
        const T* qi = qb + i * d.e;
        const T* go = grad_out.data_ptr<T>() + (b * d.l + i) * d.ev;
        const T* oi = out.data_ptr<T>() + (b * d.l + i) * d.ev;
        const A lse = logsumexp.data_ptr<A>()[b * d.l + i];
        std::fill(dq.begin(), dq.end(), A(0));
        if (lse != -std::numeric_limits<A>::infinity()) {  // an all-masked row has no gradient
          row_scores<T, A>(s, qi, kb, mask_row<A>(mask, b, i), mask_cs, i, d.s, d.e, sc, is_causal);
          A D = 0;
          for (int64_t c = 0; c < d.ev; ++c) D += static_cast<A>(go[c]) * static_cast<A>(oi[c]);
          for (int64_t j = 0; j < d.s; ++j) {
            if (s[j] == -std::numeric_limits<A>::infinity()) continue;  // masked: no gradient, even in a NaN row
            const A p = std::exp(s[j] - lse);
            if (p == A(0)) continue;
            A dp = 0;
            for (int64_t c = 0; c < d.ev; ++c) {
              dp += static_cast<A>(go[c]) * static_cast<A>(vb[j * d.ev + c]);
              dv[j * d.ev + c] += p * static_cast<A>(go[c]);
            }
            const A ds = p * (dp - D) * sc;
            for (int64_t c = 0; c < d.e; ++c) {
              dq[c] += ds * static_cast<A>(kb[j * d.e + c]);
              dk[j * d.e + c] += ds * static_cast<A>(qi[c]);
            }
          }
        }
        T* gq = grad_q.data_ptr<T>() + (b * d.l + i) * d.e;
        for (int64_t c = 0; c < d.e; ++c) gq[c] = static_cast<T>(dq[c]);
      }
      T* gk = grad_k.data_ptr<T>() + b * d.s * d.e;
      T* gv = grad_v.data_ptr<T>() + b * d.s * d.ev;
      for (int64_t x = 0; x < d.s * d.e; ++x) gk[x] = static_cast<T>(dk[x]);
      for (int64_t x = 0; x < d.s * d.ev; ++x) gv[x] = static_cast<T>(dv[x]);
    }
  });
}

void flash_attention_kernel(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& mask, double scale, bool is_causal) {
  visit_floating_dtype(q.dtype(), "flash_attention", [&](auto tag) {
    forward_typed<typename decltype(tag)::type>(out, logsumexp, q, k, v, mask, scale, is_causal);
  });
}

void flash_attention_backward_kernel(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                                     const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& logsumexp, const Tensor& mask, double scale,
                                     bool is_causal) {
  visit_floating_dtype(q.dtype(), "flash_attention_backward", [&](auto tag) {
    backward_typed<typename decltype(tag)::type>(grad_q, grad_k, grad_v, grad_out, q, k, v, out, logsumexp, mask,
                                                 scale, is_causal);
  });
}

}  // namespace

void register_attention_kernels() {
  register_kernel<Op::flash_attention>(DeviceType::CPU, flash_attention_kernel);
  register_kernel<Op::flash_attention_backward>(DeviceType::CPU, flash_attention_backward_kernel);
}

}  // namespace loom::cpu
