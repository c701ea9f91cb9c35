/*
 * CPU kernels for 2-D pooling (max, average, adaptive average) and their gradients.
 *
 * Written as direct loops over (n, c) planes, in parallel: PyTorch's exact window, padding,
 * ceil_mode and divisor rules, and its max-pool indices (flat h * W + w per plane; a oneDNN
 * workspace holds window-local offsets instead). The loops accept any strides.
 */
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel_grain.h"
#include "ops/cpu/vector_isa.h"
#include "ops/dispatch.h"

namespace loom::cpu {

namespace {

// One [H, W] plane of a 4-D tensor: base pointer and element strides.
template <class T>
struct Plane {
  T* data;
  int64_t sh, sw;
  T& at(int64_t h, int64_t w) const { return data[h * sh + w * sw]; }
};

template <class T>
Plane<T> plane(const Tensor& t, int64_t index) {
  const int64_t c = t.size(1);
  const int64_t n = index / c, ch = index % c;
  T* base = static_cast<T*>(t.data_ptr()) + n * t.stride(0) + ch * t.stride(1);
  return {base, t.stride(2), t.stride(3)};
}

// Sum of in[h0:h1, w0:w1] in opmath. Rows of unit stride are summed in 8 independent lanes, which
// the compiler vectorises (a single running sum would be a serial chain of adds).
template <class T>
opmath_t<T> window_sum(const Plane<const T>& in, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
  using M = opmath_t<T>;
  M lanes[8] = {};
  M sum = 0;
  for (int64_t h = h0; h < h1; ++h) {
    const T* row = &in.at(h, 0);
    if (in.sw == 1 && w1 - w0 >= 16) {
      int64_t w = w0;
      for (; w + 8 <= w1; w += 8)
        for (int k = 0; k < 8; ++k) lanes[k] += static_cast<M>(row[w + k]);
      for (; w < w1; ++w) sum += static_cast<M>(row[w]);
    } else {
      for (int64_t w = w0; w < w1; ++w) sum += static_cast<M>(row[w * in.sw]);
    }
  }
  for (int k = 0; k < 8; ++k) sum += lanes[k];
  return sum;
}

// Runs body(first_plane, last_plane) over the N*C planes in parallel chunks sized by `work`
// (elementary steps per plane). Each chunk runs through with_vector_isa, so that a portable build
// runs the plane loops as the CPU's AVX2 or AVX-512 code.
template <class Body>
void for_planes(int64_t planes, int64_t work, const Body& body) {
  parallel_for(0, planes, grain_for(work),
               [&](int64_t begin, int64_t end) { with_vector_isa([&] { body(begin, end); }); });
}

// The most common pooling (2x2, stride 2, no padding, contiguous planes): each output reads two
// pairs of neighbours, a pattern the compiler vectorises with even/odd shuffles.
// Every window must lie inside the input: ceil_mode can add a last, partial window. The strides
// checked are the same for every plane.
inline bool is_plain_2x2(const Pool2dParams& p, const Tensor& x, const Tensor& out, const Tensor& indices) {
  const int64_t H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  return p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 && p.stride[1] == 2 && p.padding[0] == 0 &&
         p.padding[1] == 0 && p.dilation[0] == 1 && p.dilation[1] == 1 && 2 * Ho <= H && 2 * Wo <= W &&
         x.stride(3) == 1 && x.stride(2) == W && out.stride(3) == 1 && indices.stride(3) == 1;
}

template <class T>
void max_pool_2x2(const T* __restrict in, T* __restrict out, int64_t* __restrict index, int64_t W, int64_t Ho,
                  int64_t Wo) {
  using M = opmath_t<T>;
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const T* r0 = in + 2 * oh * W;
    const T* r1 = r0 + W;
    T* o = out + oh * Wo;
    int64_t* ix = index + oh * Wo;
    const int64_t base = 2 * oh * W;
    for (int64_t ow = 0; ow < Wo; ++ow) {
      // Window order (0,0), (0,1), (1,0), (1,1): the first maximum wins ties, a NaN wins.
      M best = static_cast<M>(r0[2 * ow]);
      int64_t at = base + 2 * ow;
      const M b = static_cast<M>(r0[2 * ow + 1]);
      bool take = b > best || b != b;
      best = take ? b : best;
      at = take ? base + 2 * ow + 1 : at;
      const M c = static_cast<M>(r1[2 * ow]);
      take = c > best || c != c;
      best = take ? c : best;
      at = take ? base + W + 2 * ow : at;
      const M d = static_cast<M>(r1[2 * ow + 1]);
      take = d > best || d != d;
      best = take ? d : best;
      at = take ? base + W + 2 * ow + 1 : at;
      o[ow] = static_cast<T>(best);
      ix[ow] = at;
    }
  }
}

// The window is walked offset by offset, (i, j) in row-major order, and for each offset the
// whole output row is updated: the inner loop runs over ow with a fixed input stride, which
// vectorises, where a loop over each output's tiny window (2x2) would not. The visiting order
// per output is the same as a window scan, so ties keep the first maximum and a NaN wins, as in
// PyTorch.
template <class T>
void max_pool_forward(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  using M = opmath_t<T>;
  const int64_t H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1], dh = p.dilation[0], dw = p.dilation[1];
  // Output columns [lo, hi) whose window column j lies inside the input.
  auto valid_columns = [&](int64_t j) {
    const int64_t offset = j * dw - pw;  // input column = ow * sw + offset
    const int64_t lo = offset >= 0 ? 0 : (-offset + sw - 1) / sw;
    const int64_t hi = W - 1 - offset < 0 ? 0 : std::min(Wo, (W - 1 - offset) / sw + 1);
    return std::pair{lo, std::max(lo, hi)};
  };
  const int64_t planes = x.size(0) * x.size(1);
  // Its own parallel region: inside the general loop below, GCC 12 left the 2x2 loop scalar in the
  // AVX2 and AVX-512 copies of a portable build (it judged the loop cold there).
  if (is_plain_2x2(p, x, out, indices)) {
    for_planes(planes, Ho * Wo * 4, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl)
        max_pool_2x2(plane<const T>(x, pl).data, plane<T>(out, pl).data, plane<int64_t>(indices, pl).data, W,
                     Ho, Wo);
    });
    return;
  }
  for_planes(planes, Ho * Wo * kh * kw, [&](int64_t begin, int64_t end) {
    std::vector<M> best(static_cast<size_t>(Wo));
    std::vector<int64_t> best_index(static_cast<size_t>(Wo));
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<const T> in = plane<const T>(x, pl);
      Plane<T> o = plane<T>(out, pl);
      Plane<int64_t> idx = plane<int64_t>(indices, pl);
      for (int64_t oh = 0; oh < Ho; ++oh) {
        int64_t h_first = oh * sh - ph;
        while (h_first < 0) h_first += dh;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          int64_t w_first = ow * sw - pw;
          while (w_first < 0) w_first += dw;
          best[ow] = -std::numeric_limits<M>::infinity();
          best_index[ow] = h_first * W + w_first;
        }
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t h = oh * sh - ph + i * dh;
          if (h < 0 || h >= H) continue;
          const T* row = &in.at(h, 0);
          const int64_t row_stride = in.sw, row_base = h * W, step = sw;
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t offset = j * dw - pw;
            const auto [lo, hi] = valid_columns(j);
            // Locals, not captures: the stores below could alias captured int64s otherwise.
            M* __restrict b = best.data();
            int64_t* __restrict bi = best_index.data();
            for (int64_t ow = lo; ow < hi; ++ow) {
              const int64_t w = ow * step + offset;
              const M v = static_cast<M>(row[w * row_stride]);
              const bool take = v > b[ow] || v != v;  // v != v: NaN
              b[ow] = take ? v : b[ow];
              bi[ow] = take ? row_base + w : bi[ow];
            }
          }
        }
        for (int64_t ow = 0; ow < Wo; ++ow) {
          o.at(oh, ow) = static_cast<T>(best[ow]);
          idx.at(oh, ow) = best_index[ow];
        }
      }
    }
  });
}

template <class T>
void max_pool_backward(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices) {
  using M = opmath_t<T>;
  const int64_t H = grad_input.size(2), W = grad_input.size(3), Ho = grad_out.size(2), Wo = grad_out.size(3);
  for_planes(grad_input.size(0) * grad_input.size(1), Ho * Wo + H * W, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<T> gx = plane<T>(grad_input, pl);
      Plane<const T> gy = plane<const T>(grad_out, pl);
      Plane<const int64_t> idx = plane<const int64_t>(indices, pl);
      if (gx.sw == 1 && gx.sh == W) {
        std::fill(gx.data, gx.data + H * W, T(0));
      } else {
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) gx.at(h, w) = T(0);
      }
      if (gx.sw == 1 && gx.sh == W) {
        // Contiguous plane: the index is the offset. One range check per plane, not per element.
        int64_t bad = -1;
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t i = idx.at(oh, ow);
            if (i < 0 || i >= H * W) {
              bad = i;
              continue;
            }
            gx.data[i] = static_cast<T>(static_cast<M>(gx.data[i]) + static_cast<M>(gy.at(oh, ow)));
          }
        LOOM_CHECK(bad < 0, "max_pool2d_backward: index ", bad, " out of range for an input plane of ", H,
                   "x", W);
        continue;
      }
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t i = idx.at(oh, ow);
          LOOM_CHECK(i >= 0 && i < H * W, "max_pool2d_backward: index ", i,
                     " out of range for an input plane of ", H, "x", W);
          T& dst = gx.at(i / W, i % W);
          dst = static_cast<T>(static_cast<M>(dst) + static_cast<M>(gy.at(oh, ow)));
        }
    }
  });
}

// PyTorch's average-pool window for output (oh, ow): the clipped input range and the divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};

inline AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const Pool2dParams& p) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]),
          w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
  const int64_t padded_size = (h1 - h0) * (w1 - w0);  // padding counts, ceil_mode overhang does not
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H);
  w1 = std::min(w1, W);
  return {h0, h1, w0, w1, p.count_include_pad ? padded_size : (h1 - h0) * (w1 - w0)};
}

template <class T>
void avg_pool_forward(const Tensor& out, const Tensor& x, const Pool2dParams& p) {
  using M = opmath_t<T>;
  const int64_t H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  for_planes(x.size(0) * x.size(1), Ho * Wo * p.kernel[0] * p.kernel[1], [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<const T> in = plane<const T>(x, pl);
      Plane<T> o = plane<T>(out, pl);
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const AvgWindow win = avg_window(oh, ow, H, W, p);
          M sum = window_sum<T>(in, win.h0, win.h1, win.w0, win.w1);
          o.at(oh, ow) =
              static_cast<T>(win.h0 >= win.h1 || win.w0 >= win.w1 ? M(0) : sum / static_cast<M>(win.divisor));
        }
    }
  });
}

template <class T>
void avg_pool_backward(const Tensor& grad_input, const Tensor& grad_out, const Pool2dParams& p) {
  using M = opmath_t<T>;
  const int64_t H = grad_input.size(2), W = grad_input.size(3), Ho = grad_out.size(2), Wo = grad_out.size(3);
  for_planes(grad_input.size(0) * grad_input.size(1), Ho * Wo * p.kernel[0] * p.kernel[1] + H * W,
             [&](int64_t begin, int64_t end) {
               std::vector<M> acc(static_cast<size_t>(H * W));
               for (int64_t pl = begin; pl < end; ++pl) {
                 Plane<T> gx = plane<T>(grad_input, pl);
                 Plane<const T> gy = plane<const T>(grad_out, pl);
                 std::fill(acc.begin(), acc.end(), M(0));
                 for (int64_t oh = 0; oh < Ho; ++oh)
                   for (int64_t ow = 0; ow < Wo; ++ow) {
                     const AvgWindow win = avg_window(oh, ow, H, W, p);
                     if (win.h0 >= win.h1 || win.w0 >= win.w1) continue;
                     const M g = static_cast<M>(gy.at(oh, ow)) / static_cast<M>(win.divisor);
                     for (int64_t h = win.h0; h < win.h1; ++h)
                       for (int64_t w = win.w0; w < win.w1; ++w) acc[h * W + w] += g;
                   }
                 for (int64_t h = 0; h < H; ++h)
                   for (int64_t w = 0; w < W; ++w) gx.at(h, w) = static_cast<T>(acc[h * W + w]);
               }
             });
}

// PyTorch's adaptive bins: [floor(i * in / out), ceil((i + 1) * in / out)).
inline int64_t bin_start(int64_t i, int64_t in, int64_t out) {
  return (i * in) / out;
}
inline int64_t bin_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

template <class T>
void adaptive_avg_forward(const Tensor& out, const Tensor& x) {
  using M = opmath_t<T>;
  const int64_t H = x.size(2), W = x.size(3), Ho = out.size(2), Wo = out.size(3);
  for_planes(x.size(0) * x.size(1), H * W + Ho * Wo, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<const T> in = plane<const T>(x, pl);
      Plane<T> o = plane<T>(out, pl);
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t h0 = bin_start(oh, H, Ho), h1 = bin_end(oh, H, Ho);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t w0 = bin_start(ow, W, Wo), w1 = bin_end(ow, W, Wo);
          M sum = window_sum<T>(in, h0, h1, w0, w1);
          o.at(oh, ow) = static_cast<T>(sum / static_cast<M>((h1 - h0) * (w1 - w0)));
        }
      }
    }
  });
}

template <class T>
void adaptive_avg_backward(const Tensor& grad_input, const Tensor& grad_out) {
  using M = opmath_t<T>;
  const int64_t H = grad_input.size(2), W = grad_input.size(3), Ho = grad_out.size(2), Wo = grad_out.size(3);
  for_planes(grad_input.size(0) * grad_input.size(1), 2 * H * W + Ho * Wo, [&](int64_t begin, int64_t end) {
    std::vector<M> acc(static_cast<size_t>(H * W));
    for (int64_t pl = begin; pl < end; ++pl) {
      Plane<T> gx = plane<T>(grad_input, pl);
      Plane<const T> gy = plane<const T>(grad_out, pl);
      std::fill(acc.begin(), acc.end(), M(0));
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t h0 = bin_start(oh, H, Ho), h1 = bin_end(oh, H, Ho);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t w0 = bin_start(ow, W, Wo), w1 = bin_end(ow, W, Wo);
          const M g = static_cast<M>(gy.at(oh, ow)) / static_cast<M>((h1 - h0) * (w1 - w0));
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) acc[h * W + w] += g;
        }
      }
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) gx.at(h, w) = static_cast<T>(acc[h * W + w]);
    }
  });
}

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  if (out.numel() == 0) return;
  visit_floating_dtype(x.dtype(), "max_pool2d",
                       [&](auto tag) { max_pool_forward<typename decltype(tag)::type>(out, indices, x, p); });
}

void max_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices,
                                const Pool2dParams&) {
  if (grad_input.numel() == 0) return;
  visit_floating_dtype(grad_out.dtype(), "max_pool2d_backward", [&](auto tag) {
    max_pool_backward<typename decltype(tag)::type>(grad_input, grad_out, indices);
  });
}

void avg_pool2d_kernel(const Tensor& out, const Tensor&, const Tensor& x, const Pool2dParams& p) {
  if (out.numel() == 0) return;
  visit_floating_dtype(x.dtype(), "avg_pool2d",
                       [&](auto tag) { avg_pool_forward<typename decltype(tag)::type>(out, x, p); });
}

void avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor&,
                                const Pool2dParams& p) {
  if (grad_input.numel() == 0) return;
  visit_floating_dtype(grad_out.dtype(), "avg_pool2d_backward", [&](auto tag) {
    avg_pool_backward<typename decltype(tag)::type>(grad_input, grad_out, p);
  });
}

void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& x) {
  if (out.numel() == 0) return;
  visit_floating_dtype(x.dtype(), "adaptive_avg_pool2d",
                       [&](auto tag) { adaptive_avg_forward<typename decltype(tag)::type>(out, x); });
}

void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out) {
  if (grad_input.numel() == 0) return;
  visit_floating_dtype(grad_out.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    adaptive_avg_backward<typename decltype(tag)::type>(grad_input, grad_out);
  });
}

}  // namespace

void register_pool_kernels() {
  register_kernel<Op::max_pool2d>(DeviceType::CPU, max_pool2d_kernel);
  register_kernel<Op::max_pool2d_backward>(DeviceType::CPU, max_pool2d_backward_kernel);
  register_kernel<Op::avg_pool2d>(DeviceType::CPU, avg_pool2d_kernel);
  register_kernel<Op::avg_pool2d_backward>(DeviceType::CPU, avg_pool2d_backward_kernel);
  register_kernel<Op::adaptive_avg_pool2d>(DeviceType::CPU, adaptive_avg_pool2d_kernel);
  register_kernel<Op::adaptive_avg_pool2d_backward>(DeviceType::CPU, adaptive_avg_pool2d_backward_kernel);
}

}  // namespace loom::cpu
