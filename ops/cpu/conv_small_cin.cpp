/*
 * The input gradient of a convolution with few input channels (first layers), as a GEMM + col2im.
 *
 * oneDNN's convolution kernels pad the input channels to a block of 16, so with 3 input channels the
 * input gradient costs 5x its arithmetic there (1.8 ms for 3->64, batch 32, 32x32, against 0.7 ms
 * here). Over (tap, channel) = (i, j, c) it is one matmul that oneDNN runs well,
 *   col[pixel, (i, j, c)] = sum_o grad_out[pixel, o] * w[o, c, i, j],
 * and a col2im pass in which each input pixel gathers the col entries of the taps that read it.
 * NCHW tensors use the transposed ("planar") form, so that no operand needs a transpose copy.
 * (The weight gradient as a GEMM was measured too: no faster than oneDNN's kernel, so it stays.)
 */
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "ops/copy_ops.h"
#include "ops/cpu/conv_paths.h"
#include "ops/linalg.h"
#include "ops/view_ops.h"

namespace loom::cpu::conv {

namespace {

struct SmallCin {
  int64_t n, cin, h, w, cout, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw;
  int64_t taps() const { return cin * kh * kw; }
  int64_t pixels() const { return ho * wo; }
};

SmallCin small_cin_geometry(IntArrayRef x, IntArrayRef w, IntArrayRef y, const Conv2dParams& p) {
  return {x[0], x[1],        x[2],        x[3],         w[0],         w[2],          w[3],         y[2],
          y[3], p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1]};
}

// col2im for one NCHW image: g[c, ih, iw] += col[(c, i, j), (oh, ow)], a row at a time.
void col2im_planar(const float* __restrict col, float* __restrict g, const SmallCin& d) {
  const int64_t pixels = d.pixels();
  for (int64_t c = 0; c < d.cin; ++c)
    for (int64_t i = 0; i < d.kh; ++i)
      for (int64_t j = 0; j < d.kw; ++j) {
        // Output columns whose tap lands inside the input: iw = ow * sw + off_w in [0, W).
        const int64_t off_w = j * d.dw - d.pw;
        const int64_t ow_lo = off_w >= 0 ? 0 : (-off_w + d.sw - 1) / d.sw;
        const int64_t ow_hi = std::min(d.wo, d.w - off_w <= 0 ? 0 : (d.w - off_w - 1) / d.sw + 1);
        const float* plane = col + ((c * d.kh + i) * d.kw + j) * pixels;
        for (int64_t oh = 0; oh < d.ho; ++oh) {
          const int64_t ih = oh * d.sh - d.ph + i * d.dh;
          if (ih < 0 || ih >= d.h) continue;
          const float* __restrict src = plane + oh * d.wo;
          float* __restrict row = g + (c * d.h + ih) * d.w;
          if (d.sw == 1) {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) row[ow + off_w] += src[ow];
          } else {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) row[ow * d.sw + off_w] += src[ow];
          }
        }
      }
}

// col2im for one NHWC image: g[ih, iw, c] = the sum of col[(oh, ow), (i, j, c)] over the taps that read
// (ih, iw). CIN is the channel count when known at compile time (0: d.cin). With stride 1 the valid
// taps of each input row and column are ranges; the sums of an input row build up in `acc` [W, cin].
template <int CIN>
void col2im_rows(const float* __restrict col, float* __restrict g, const SmallCin& d, float* __restrict acc) {
  const int64_t cin = CIN ? CIN : d.cin, r = d.taps();
  if (d.sh == 1 && d.sw == 1) {
    std::vector<int64_t> j_lo(static_cast<size_t>(d.w)), j_hi(static_cast<size_t>(d.w));
    for (int64_t iw = 0; iw < d.w; ++iw) {  // tap j reads iw from output column iw + pw - j * dw
      int64_t lo = 0, hi = d.kw;
      while (lo < d.kw && iw + d.pw - lo * d.dw >= d.wo) ++lo;
      while (hi > lo && iw + d.pw - (hi - 1) * d.dw < 0) --hi;
      j_lo[iw] = lo;
      j_hi[iw] = hi;
    }
    for (int64_t ih = 0; ih < d.h; ++ih) {
      std::fill(acc, acc + d.w * cin, 0.0f);
      for (int64_t i = 0; i < d.kh; ++i) {
        const int64_t oh = ih + d.ph - i * d.dh;
        if (oh < 0 || oh >= d.ho) continue;
        const float* row = col + oh * d.wo * r + i * d.kw * cin;
        for (int64_t iw = 0; iw < d.w; ++iw) {
          const float* base = row + (iw + d.pw) * r;
          float* a = acc + iw * cin;
          for (int64_t j = j_lo[iw]; j < j_hi[iw]; ++j) {
            const float* src = base - j * d.dw * r + j * cin;
            for (int64_t c = 0; c < cin; ++c) a[c] += src[c];
          }
        }
      }
      std::memcpy(g + ih * d.w * cin, acc, sizeof(float) * static_cast<size_t>(d.w * cin));
    }
    return;
  }
  for (int64_t ih = 0; ih < d.h; ++ih)
    for (int64_t iw = 0; iw < d.w; ++iw) {
      float sum[8] = {};
      for (int64_t i = 0; i < d.kh; ++i) {
        const int64_t t = ih + d.ph - i * d.dh;  // = oh * sh
        if (t < 0 || t % d.sh != 0 || t / d.sh >= d.ho) continue;
        for (int64_t j = 0; j < d.kw; ++j) {
          const int64_t u = iw + d.pw - j * d.dw;  // = ow * sw
          if (u < 0 || u % d.sw != 0 || u / d.sw >= d.wo) continue;
          const float* src = col + ((t / d.sh) * d.wo + u / d.sw) * r + (i * d.kw + j) * cin;
          for (int64_t c = 0; c < cin; ++c) sum[c] += src[c];
        }
      }
      std::memcpy(g + (ih * d.w + iw) * cin, sum, sizeof(float) * static_cast<size_t>(cin));
    }
}

}  // namespace

// The ops layer arranges the plain formats.
bool use_small_cin(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p) {
  if (x.dtype() != DType::Float32 || p.groups != 1 || x.size(1) > 8) return false;
  const Layout a = layout_of(x), b = layout_of(grad_out);
  return a == b && a != Layout::Strided;
}

void small_cin_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                             const Conv2dParams& p) {
  const SmallCin d = small_cin_geometry(grad_input.sizes(), w.sizes(), grad_out.sizes(), p);
  const int64_t r = d.taps(), pixels = d.pixels();
  const bool nhwc = layout_of(grad_out) == Layout::Nhwc;
  // NHWC: col [images * Ho * Wo, (i, j, c)] = grad_out rows [images*Ho*Wo, Cout] x w as [Cout, (i, j, c)].
  // NCHW: col [images, (c, i, j), Ho * Wo] = w^T as [(c, i, j), Cout] x grad_out [images, Cout, Ho * Wo].
  Tensor w_matrix = nhwc ? contiguous(permute(w, {0, 2, 3, 1})).view({d.cout, r})
                         : make_view(contiguous(w), {r, d.cout}, {1, r}, 0);
  // Images go in chunks whose col (about 512 KiB) stays in cache between the matmul and col2im.
  const int64_t col_image = r * pixels, image = d.cin * d.h * d.w;
  const int64_t chunk = std::clamp<int64_t>((int64_t{1} << 17) / std::max<int64_t>(col_image, 1), 1, d.n);
  float* gx = grad_input.data_ptr<float>();
  for (int64_t first = 0; first < d.n; first += chunk) {
    const int64_t count = std::min(chunk, d.n - first);
    const int64_t offset = grad_out.storage_offset() + first * grad_out.stride(0);
    Tensor col = nhwc ? matmul(make_view(grad_out, {count * pixels, d.cout}, {d.cout, 1}, offset), w_matrix)
                      : matmul(w_matrix, make_view(grad_out, {count, d.cout, pixels},
                                                   {d.cout * pixels, pixels, 1}, offset));
    const float* cp = col.data_ptr<float>();
    parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> acc(static_cast<size_t>(d.w * d.cin));
      for (int64_t b = begin; b < end; ++b) {
        const float* c = cp + b * col_image;
        float* g = gx + (first + b) * image;
        if (!nhwc) {
          std::fill(g, g + image, 0.0f);
          col2im_planar(c, g, d);
        } else if (d.cin == 3) {
          col2im_rows<3>(c, g, d, acc.data());
        } else if (d.cin == 1) {
          col2im_rows<1>(c, g, d, acc.data());
        } else {
          col2im_rows<0>(c, g, d, acc.data());
        }
      }
    });
  }
}


}  // namespace loom::cpu::conv
