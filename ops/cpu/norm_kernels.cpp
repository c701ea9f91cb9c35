/*
 * CPU kernels for batch and layer normalisation and their backward functions.
 *
 *   y = (x - mean) * invstd * weight + bias,   invstd = 1 / sqrt(var + eps)
 *
 * Statistics are computed in two passes (mean, then the mean of squared deviations), which
 * is exact enough in float for large inputs, unlike E[x^2] - E[x]^2. Each contiguous run of
 * values is reduced in vector lanes; runs are added up in double.
 *  - batch_norm: x [N, C, S] contiguous, parallel over channels, vectorised over S; or x
 *    channels_last (ops/memory_format.h), [M, C] rows: sums over chunks of rows, vectorised over C.
 *    Its loops are batch_norm_loops.h's, AVX2 code in portable builds on a CPU that has it.
 *  - layer_norm: x [M, D] contiguous; parallel over rows, vectorised over D (its row loops are
 *    array_kernels.h's, compiled for the CPU's vector instructions).
 * Stats, weight and bias are float32 (float64 when x is float64): the ops layer converts
 * weight and bias to that type, so 16-bit inputs can have float32 parameters.
 */
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/array_kernels.h"
#include "ops/cpu/batch_norm_loops.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel_grain.h"
#include "ops/cpu/row_buffers.h"
#include "ops/dim_geometry.h"
#include "ops/dispatch.h"

namespace loom::cpu {

namespace {

namespace loops = batch_norm_loops;

template <class A>
const A* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const A*>(t.data_ptr()) : nullptr;
}

// Reads/writes element c of a 1-D floating tensor of any floating dtype and stride.
double read_stat(const Tensor& t, int64_t c) {
  return visit_floating_dtype(t.dtype(), "batch_norm", [&](auto tag) {
    using S = typename decltype(tag)::type;
    return static_cast<double>(static_cast<const S*>(t.data_ptr())[c * t.strides()[0]]);
  });
}
void write_stat(const Tensor& t, int64_t c, double v) {
  visit_floating_dtype(t.dtype(), "batch_norm", [&](auto tag) {
    using S = typename decltype(tag)::type;
    static_cast<S*>(t.data_ptr())[c * t.strides()[0]] = static_cast<S>(v);
  });
}

// ---- batch_norm ---------------------------------------------------------------------------

// Evaluation: the running statistics are the statistics.
template <class A>
void statistics_from_running(A* mean, A* invstd, const Tensor& running_mean, const Tensor& running_var,
                             int64_t channels, double eps) {
  for (int64_t c = 0; c < channels; ++c) {
    mean[c] = static_cast<A>(read_stat(running_mean, c));
    invstd[c] = static_cast<A>(1.0 / std::sqrt(read_stat(running_var, c) + eps));
  }
}

// Training: running = (1 - momentum) * running + momentum * the batch's statistic (the unbiased
// variance), for each running statistic that is defined.
template <class A>
void update_running(const Tensor& running_mean, const Tensor& running_var, const A* mean,
                    const std::vector<double>& unbiased_var, double momentum) {
  const auto channels = static_cast<int64_t>(unbiased_var.size());
  for (int64_t c = 0; running_mean.defined() && c < channels; ++c)
    write_stat(running_mean, c,
               (1 - momentum) * read_stat(running_mean, c) + momentum * static_cast<double>(mean[c]));
  for (int64_t c = 0; running_var.defined() && c < channels; ++c)
    write_stat(running_var, c,
               (1 - momentum) * read_stat(running_var, c) + momentum * unbiased_var[static_cast<size_t>(c)]);
}

// out, x contiguous [N, C, *]; weight/bias/save_* contiguous [C] in the stats dtype A.
void batch_norm_nchw(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                     const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                     const Tensor& running_var, bool training, double momentum, double eps) {
  visit_floating_dtype(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    // x as [N, C, S]: named variables, not a structured binding, because lambdas below capture
    // them, which clang accepts only from version 16 (the fuzz build uses clang 14).
    const DimGeometry g = geometry_around(x, 1);
    const int64_t n = g.outer, channels = g.size, s = g.inner, count = n * s;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    A* mean_out = static_cast<A*>(save_mean.data_ptr());
    A* invstd_out = static_cast<A*>(save_invstd.data_ptr());
    const A* w = ptr_or_null<A>(weight);
    const A* b = ptr_or_null<A>(bias);
    std::vector<double> unbiased_var(static_cast<size_t>(channels));

    if (!training) statistics_from_running(mean_out, invstd_out, running_mean, running_var, channels, eps);

    parallel_for(0, channels, grain_for(count), [&](int64_t begin, int64_t end) {
      std::vector<A> in_buf, out_buf;
      for (int64_t c = begin; c < end; ++c) {
        if (training) {
          double sum = 0;
          for (int64_t i = 0; i < n; ++i)
            sum += loops::sum(load<A>(xp + (i * channels + c) * s, s, in_buf), s);
          const A mean = static_cast<A>(sum / static_cast<double>(count));
          double sq = 0;
          for (int64_t i = 0; i < n; ++i)
            sq += loops::centered_squares(load<A>(xp + (i * channels + c) * s, s, in_buf), mean, s);
          mean_out[c] = mean;
          invstd_out[c] = static_cast<A>(1.0 / std::sqrt(sq / static_cast<double>(count) + eps));
          unbiased_var[c] = count > 1 ? sq / static_cast<double>(count - 1) : 0.0;
        }
        // y = x * scale + shift
        const A scale = invstd_out[c] * (w ? w[c] : A(1));
        const A shift = (b ? b[c] : A(0)) - mean_out[c] * scale;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t off = (i * channels + c) * s;
          A* o = scratch<A>(op + off, s, out_buf);
          loops::scale_shift(load<A>(xp + off, s, in_buf), o, scale, shift, s);
          store(op + off, o, s);
        }
      }
    });

    if (training) update_running(running_mean, running_var, mean_out, unbiased_var, momentum);
  });
}

// Training-mode gradient, per channel over its M = N * S values:
//   xhat = (x - mean) * invstd
//   grad_bias = sum(gy), grad_weight = sum(gy * xhat)
//   gx = weight * invstd * (gy - grad_bias / M - xhat * grad_weight / M)
// grad_input, grad_out, x contiguous [N, C, *]; weight, save_*, grad_weight/bias [C] in A.
void batch_norm_backward_nchw(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                              const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                              const Tensor& save_mean, const Tensor& save_invstd) {
  visit_floating_dtype(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    // x as [N, C, S]: named variables, not a structured binding, because lambdas below capture
    // them, which clang accepts only from version 16 (the fuzz build uses clang 14).
    const DimGeometry g = geometry_around(x, 1);
    const int64_t n = g.outer, channels = g.size, s = g.inner, count = n * s;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* gyp = static_cast<const T*>(grad_out.data_ptr());
    T* gxp = static_cast<T*>(grad_input.data_ptr());
    const A* w = ptr_or_null<A>(weight);
    const A* mean_p = static_cast<const A*>(save_mean.data_ptr());
    const A* invstd_p = static_cast<const A*>(save_invstd.data_ptr());
    A* gw = grad_weight.defined() ? static_cast<A*>(grad_weight.data_ptr()) : nullptr;
    A* gb = grad_bias.defined() ? static_cast<A*>(grad_bias.data_ptr()) : nullptr;

    parallel_for(0, channels, grain_for(2 * count), [&](int64_t begin, int64_t end) {
      std::vector<A> x_buf, gy_buf, out_buf;
      for (int64_t c = begin; c < end; ++c) {
        const A mean = mean_p[c], invstd = invstd_p[c];
        double sum_gy = 0, sum_gy_xhat = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t off = (i * channels + c) * s;
          double run_gy, run_gy_centered;
          loops::gradient_sums(load<A>(gyp + off, s, gy_buf), load<A>(xp + off, s, x_buf), mean, s, run_gy,
                               run_gy_centered);
          sum_gy += run_gy;
          sum_gy_xhat += run_gy_centered;
        }
        sum_gy_xhat *= static_cast<double>(invstd);
        if (gw) gw[c] = static_cast<A>(sum_gy_xhat);
        if (gb) gb[c] = static_cast<A>(sum_gy);
        const A k = invstd * (w ? w[c] : A(1));
        const A mean_gy = static_cast<A>(sum_gy / static_cast<double>(count));
        const A proj =
            static_cast<A>(sum_gy_xhat / static_cast<double>(count)) * invstd;  // per xhat, times invstd
        for (int64_t i = 0; i < n; ++i) {
          const int64_t off = (i * channels + c) * s;
          A* o = scratch<A>(gxp + off, s, out_buf);
          loops::input_gradient(load<A>(gyp + off, s, gy_buf), load<A>(xp + off, s, x_buf), o, k, mean_gy,
                                mean, proj, s);
          store(gxp + off, o, s);
        }
      }
    });
  });
}

// ---- layer_norm ---------------------------------------------------------------------------

// out, x contiguous [M, D]; mean/rstd [M] and weight/bias [D] in the stats dtype A.
void layer_norm_kernel(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, double eps) {
  visit_floating_dtype(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const int64_t rows = mean.numel(), d = rows == 0 ? 0 : x.numel() / rows;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    A* mean_p = static_cast<A*>(mean.data_ptr());
    A* rstd_p = static_cast<A*>(rstd.data_ptr());
    const A* w = ptr_or_null<A>(weight);
    const A* b = ptr_or_null<A>(bias);
    const auto normalize_row = array_kernels<A>().layer_norm_row;
    parallel_for(0, rows, grain_for(d), [&](int64_t begin, int64_t end) {
      std::vector<A> in_buf, out_buf;
      for (int64_t r = begin; r < end; ++r) {
        A* o = scratch<A>(op + r * d, d, out_buf);
        normalize_row(load<A>(xp + r * d, d, in_buf), o, w, b, d, static_cast<A>(eps), mean_p + r,
                      rstd_p + r);
        store(op + r * d, o, d);
      }
    });
  });
}

// Per row, with g = gy * weight and xhat = (x - mean) * rstd:
//   gx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// and over rows: grad_weight = sum(gy * xhat), grad_bias = sum(gy).
// grad_input, grad_out, x contiguous [M, D]; grad_weight/grad_bias undefined or [D] in A.
void layer_norm_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                const Tensor& rstd, const Tensor& weight) {
  visit_floating_dtype(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const int64_t rows = mean.numel(), d = rows == 0 ? 0 : x.numel() / rows;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* gyp = static_cast<const T*>(grad_out.data_ptr());
    T* gxp = static_cast<T*>(grad_input.data_ptr());
    const A* mean_p = static_cast<const A*>(mean.data_ptr());
    const A* rstd_p = static_cast<const A*>(rstd.data_ptr());
    const A* w = ptr_or_null<A>(weight);
    const bool want_params = grad_weight.defined() || grad_bias.defined();
    const ArrayKernels<A>& kernels = array_kernels<A>();
    const auto backward_row = kernels.layer_norm_backward_row;
    const auto parameter_sums = kernels.layer_norm_parameter_sums;

    // Rows split into one task per thread (when there is enough work), each with its own
    // partial sums of grad_weight / grad_bias in double, added up in order afterwards. The
    // partials (2 x D doubles, larger than L1 for wide rows) are updated once per group of
    // kRowGroup rows, from float sums of the group taken over column blocks that stay in L1.
    constexpr int64_t kRowGroup = 16, kColBlock = 256;
    const int64_t tasks = threads_for(x.numel(), kParallelGrain);
    const int64_t rows_per_task = (rows + tasks - 1) / tasks;
    std::vector<std::vector<double>> part_w(static_cast<size_t>(tasks)), part_b(static_cast<size_t>(tasks));
    parallel_for(0, tasks, 1, [&](int64_t task_begin, int64_t task_end) {
      std::vector<A> x_buf, out_buf, xhat_group(static_cast<size_t>(kRowGroup * d));
      std::vector<A> gy_group(std::is_same_v<T, A> ? 0 : static_cast<size_t>(kRowGroup * d));
      const A* gy_rows[kRowGroup];
      for (int64_t task = task_begin; task < task_end; ++task) {
        std::vector<double>& pw = part_w[task];
        std::vector<double>& pb = part_b[task];
        pw.assign(want_params ? static_cast<size_t>(d) : 0, 0.0);
        pb.assign(want_params ? static_cast<size_t>(d) : 0, 0.0);
        const int64_t r_end = std::min(rows, (task + 1) * rows_per_task);
        for (int64_t g0 = task * rows_per_task; g0 < r_end; g0 += kRowGroup) {
          const int64_t group = std::min(kRowGroup, r_end - g0);
          for (int64_t k = 0; k < group; ++k) {
            const int64_t r = g0 + k;
            if constexpr (std::is_same_v<T, A>) {
              gy_rows[k] = gyp + r * d;
            } else {
              widen_block(gyp + r * d, 1, gy_group.data() + k * d, d);
              gy_rows[k] = gy_group.data() + k * d;
            }
            A* o = scratch<A>(gxp + r * d, d, out_buf);
            backward_row(load<A>(xp + r * d, d, x_buf), gy_rows[k], w, mean_p[r], rstd_p[r],
                         xhat_group.data() + k * d, o, d);
            store(gxp + r * d, o, d);
          }
          if (!want_params) continue;
          for (int64_t j0 = 0; j0 < d; j0 += kColBlock) {
            const int64_t width = std::min(kColBlock, d - j0);
            A sw[kColBlock] = {}, sb[kColBlock] = {};
            parameter_sums(gy_rows, xhat_group.data(), d, group, j0, width, sw, sb);
            double* __restrict pwp = pw.data() + j0;
            double* __restrict pbp = pb.data() + j0;
#pragma omp simd
            for (int64_t j = 0; j < width; ++j) {
              pwp[j] += static_cast<double>(sw[j]);
              pbp[j] += static_cast<double>(sb[j]);
            }
          }
        }
      }
    });
    if (!want_params) return;
    A* gw = grad_weight.defined() ? static_cast<A*>(grad_weight.data_ptr()) : nullptr;
    A* gb = grad_bias.defined() ? static_cast<A*>(grad_bias.data_ptr()) : nullptr;
    for (int64_t j = 0; j < d; ++j) {
      double sw = 0, sb = 0;
      for (int64_t task = 0; task < tasks; ++task) {
        sw += part_w[task][j];
        sb += part_b[task][j];
      }
      if (gw) gw[j] = static_cast<A>(sw);
      if (gb) gb[j] = static_cast<A>(sb);
    }
  });
}

// ---- batch_norm on channels_last activations --------------------------------------------------
//
// x is [M, C] rows (M = N * H * W, NHWC memory). Per-channel sums are taken over fixed chunks of
// kChunkRows rows, one double per channel per chunk, then added chunk by chunk in order: the
// same result for any number of threads; the rows are then normalised in parallel.

constexpr int64_t kChunkRows = 256;

// Conversion buffers of one task (16-bit rows are widened into them).
template <class A>
struct TaskBuffers {
  std::vector<A> a, b;
};

// part[k * width + j]: what term(r, part of chunk k, buffers) adds up over the rows r of chunk k.
template <class A, class Term>
std::vector<double> chunk_sums(int64_t m, int64_t width, Term&& term) {
  const int64_t chunks = (m + kChunkRows - 1) / kChunkRows;
  std::vector<double> part(static_cast<size_t>(chunks * width), 0.0);
  parallel_for(0, chunks, grain_for(kChunkRows * width), [&](int64_t begin, int64_t end) {
    TaskBuffers<A> buffers;
    for (int64_t k = begin; k < end; ++k) {
      double* p = part.data() + k * width;
      for (int64_t r = k * kChunkRows; r < std::min(m, (k + 1) * kChunkRows); ++r) term(r, p, buffers);
    }
  });
  return part;
}

// The per-channel totals of chunk_sums' parts, in chunk order.
std::vector<double> channel_totals(const std::vector<double>& part, int64_t c) {
  std::vector<double> total(static_cast<size_t>(c), 0.0);
  for (size_t i = 0; i < part.size(); ++i) total[i % static_cast<size_t>(c)] += part[i];
  return total;
}

void batch_norm_nhwc(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                     const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                     const Tensor& running_var, bool training, double momentum, double eps) {
  visit_floating_dtype(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const int64_t c = x.size(1), m = c == 0 ? 0 : x.numel() / c;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    A* mean_out = static_cast<A*>(save_mean.data_ptr());
    A* invstd_out = static_cast<A*>(save_invstd.data_ptr());
    const A* w = ptr_or_null<A>(weight);
    const A* b = ptr_or_null<A>(bias);
    std::vector<double> unbiased_var(static_cast<size_t>(c));
    if (training) {
      auto add_values = [&](int64_t r, double* p, TaskBuffers<A>& bufs) {
        loops::add_row(p, load<A>(xp + r * c, c, bufs.a), c);
      };
      auto add_squares = [&](int64_t r, double* p, TaskBuffers<A>& bufs) {
        loops::add_centered_squares_row(p, load<A>(xp + r * c, c, bufs.a), mean_out, c);
      };
      const std::vector<double> sums = channel_totals(chunk_sums<A>(m, c, add_values), c);
      for (int64_t j = 0; j < c; ++j)
        mean_out[j] = static_cast<A>(sums[static_cast<size_t>(j)] / static_cast<double>(m));
      const std::vector<double> squares = channel_totals(chunk_sums<A>(m, c, add_squares), c);
      for (int64_t j = 0; j < c; ++j) {
        const double sq = squares[static_cast<size_t>(j)];
        invstd_out[j] = static_cast<A>(1.0 / std::sqrt(sq / static_cast<double>(m) + eps));
        unbiased_var[static_cast<size_t>(j)] = m > 1 ? sq / static_cast<double>(m - 1) : 0.0;
      }
    } else {
      statistics_from_running(mean_out, invstd_out, running_mean, running_var, c, eps);
    }
    // y = x * scale + shift, per channel
    std::vector<A> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
    for (int64_t j = 0; j < c; ++j) {
      const auto i = static_cast<size_t>(j);
      scale[i] = invstd_out[j] * (w ? w[j] : A(1));
      shift[i] = (b ? b[j] : A(0)) - mean_out[j] * scale[i];
    }
    parallel_for(0, m, grain_for(c), [&](int64_t begin, int64_t end) {
      std::vector<A> in_buf, out_buf;
      for (int64_t r = begin; r < end; ++r) {
        A* o = scratch<A>(op + r * c, c, out_buf);
        loops::scale_shift_row(load<A>(xp + r * c, c, in_buf), o, scale.data(), shift.data(), c);
        store(op + r * c, o, c);
      }
    });
    if (training) update_running(running_mean, running_var, mean_out, unbiased_var, momentum);
  });
}

// The backward of batch_norm_backward_nchw over [M, C] rows.
void batch_norm_backward_nhwc(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                              const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                              const Tensor& save_mean, const Tensor& save_invstd) {
  visit_floating_dtype(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = opmath_t<T>;
    const int64_t c = x.size(1), m = c == 0 ? 0 : x.numel() / c;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* gyp = static_cast<const T*>(grad_out.data_ptr());
    T* gxp = static_cast<T*>(grad_input.data_ptr());
    const A* w = ptr_or_null<A>(weight);
    const A* mean_p = static_cast<const A*>(save_mean.data_ptr());
    const A* invstd_p = static_cast<const A*>(save_invstd.data_ptr());
    auto add_gradients = [&](int64_t r, double* p, TaskBuffers<A>& bufs) {
      loops::add_gradient_terms_row(p, p + c, load<A>(gyp + r * c, c, bufs.b), load<A>(xp + r * c, c, bufs.a),
                                    mean_p, c);
    };
    // Per chunk: sum(gy) for each channel, then sum(gy * (x - mean)) for each channel.
    const std::vector<double> part = chunk_sums<A>(m, 2 * c, add_gradients);
    const std::vector<double> totals = channel_totals(part, 2 * c);
    std::vector<A> k(static_cast<size_t>(c)), mean_gy(static_cast<size_t>(c)), proj(static_cast<size_t>(c));
    for (int64_t j = 0; j < c; ++j) {
      const auto i = static_cast<size_t>(j);
      const double sum_gy = totals[i], sum_gy_xhat = totals[static_cast<size_t>(c + j)] * invstd_p[j];
      if (grad_weight.defined()) static_cast<A*>(grad_weight.data_ptr())[j] = static_cast<A>(sum_gy_xhat);
      if (grad_bias.defined()) static_cast<A*>(grad_bias.data_ptr())[j] = static_cast<A>(sum_gy);
      k[i] = invstd_p[j] * (w ? w[j] : A(1));
      mean_gy[i] = static_cast<A>(sum_gy / static_cast<double>(m));
      proj[i] = static_cast<A>(sum_gy_xhat / static_cast<double>(m)) * invstd_p[j];
    }
    parallel_for(0, m, grain_for(2 * c), [&](int64_t begin, int64_t end) {
      std::vector<A> x_buf, gy_buf, out_buf;
      for (int64_t r = begin; r < end; ++r) {
        A* o = scratch<A>(gxp + r * c, c, out_buf);
        loops::input_gradient_row(load<A>(gyp + r * c, c, gy_buf), load<A>(xp + r * c, c, x_buf), o, k.data(),
                                  mean_gy.data(), mean_p, proj.data(), c);
        store(gxp + r * c, o, c);
      }
    });
  });
}

// Contiguous activations go to the NCHW kernels, channels_last ones (ops/memory_format.h) to the
// NHWC ones.
void batch_norm_kernel(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps) {
  (x.is_contiguous() ? batch_norm_nchw : batch_norm_nhwc)(out, save_mean, save_invstd, x, weight, bias,
                                                          running_mean, running_var, training, momentum, eps);
}

void batch_norm_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                const Tensor& save_mean, const Tensor& save_invstd) {
  (x.is_contiguous() ? batch_norm_backward_nchw : batch_norm_backward_nhwc)(
      grad_input, grad_weight, grad_bias, grad_out, x, weight, save_mean, save_invstd);
}

}  // namespace

void register_norm_kernels() {
  register_kernel<Op::batch_norm>(DeviceType::CPU, batch_norm_kernel);
  register_kernel<Op::batch_norm_backward>(DeviceType::CPU, batch_norm_backward_kernel);
  register_kernel<Op::layer_norm>(DeviceType::CPU, layer_norm_kernel);
  register_kernel<Op::layer_norm_backward>(DeviceType::CPU, layer_norm_backward_kernel);
}

}  // namespace loom::cpu
