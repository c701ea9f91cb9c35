/*
 * The reference 2-D convolution for f64 (oneDNN has no f64 convolution): im2col and Eigen GEMM
 * on contiguous NCHW data, one image per parallel task.
 */
#include <Eigen/Core>
#include <vector>

#include "core/parallel.h"
#include "ops/copy_ops.h"
#include "ops/cpu/conv_paths.h"
#include "ops/factories.h"

namespace loom::cpu::conv {

namespace {

struct ConvDims {
  int64_t n, cin, h, w, cout, kh, kw, ho, wo, groups, cg, og;
  int64_t patch() const { return cg * kh * kw; }
};

ConvDims conv_dims(IntArrayRef x, IntArrayRef wt, IntArrayRef y, int64_t groups) {
  return {x[0], x[1], x[2], x[3], wt[0], wt[2], wt[3], y[2], y[3], groups, x[1] / groups, wt[0] / groups};
}

// col [cg*kh*kw, ho*wo] from one group of one image (x: [cg, h, w] contiguous planes).
template <class T>
void im2col(const T* x, T* col, const ConvDims& d, const Conv2dParams& p) {
  for (int64_t c = 0; c < d.cg; ++c)
    for (int64_t i = 0; i < d.kh; ++i)
      for (int64_t j = 0; j < d.kw; ++j) {
        T* row = col + ((c * d.kh + i) * d.kw + j) * d.ho * d.wo;
        for (int64_t oh = 0; oh < d.ho; ++oh) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
          for (int64_t ow = 0; ow < d.wo; ++ow) {
            const int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
            row[oh * d.wo + ow] =
                (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) ? x[(c * d.h + ih) * d.w + iw] : T(0);
          }
        }
      }
}

// x[cg, h, w] += the columns of col, scattered back to the pixels they were read from.
template <class T>
void col2im(const T* col, T* x, const ConvDims& d, const Conv2dParams& p) {
  for (int64_t c = 0; c < d.cg; ++c)
    for (int64_t i = 0; i < d.kh; ++i)
      for (int64_t j = 0; j < d.kw; ++j) {
        const T* row = col + ((c * d.kh + i) * d.kw + j) * d.ho * d.wo;
        for (int64_t oh = 0; oh < d.ho; ++oh) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
          if (ih < 0 || ih >= d.h) continue;
          for (int64_t ow = 0; ow < d.wo; ++ow) {
            const int64_t iw = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
            if (iw >= 0 && iw < d.w) x[(c * d.h + ih) * d.w + iw] += row[oh * d.wo + ow];
          }
        }
      }
}

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatMap = Eigen::Map<RowMat<T>>;
template <class T>
using ConstMatMap = Eigen::Map<const RowMat<T>>;

// Writes into `out` through a contiguous temporary when out is not contiguous.
template <class Body>
void with_contiguous_output(const Tensor& out, const Body& body) {
  if (out.is_contiguous()) {
    body(out);
    return;
  }
  Tensor tmp = empty(out.sizes(), out.options());
  body(tmp);
  copy_(out, tmp);
}

template <class T>
void reference_conv_forward(const Tensor& out_user, const Tensor& x_user, const Tensor& w_user,
                            const Tensor& bias, const Conv2dParams& p) {
  Tensor x = contiguous(x_user), w = contiguous(w_user), b = bias.defined() ? contiguous(bias) : Tensor();
  const ConvDims d = conv_dims(x.sizes(), w.sizes(), out_user.sizes(), p.groups);
  with_contiguous_output(out_user, [&](const Tensor& out) {
    const T* xp = x.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    const T* bp = b.defined() ? b.data_ptr<T>() : nullptr;
    T* yp = out.data_ptr<T>();
    parallel_for(0, d.n, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> col(static_cast<size_t>(d.patch() * d.ho * d.wo));
      for (int64_t n = begin; n < end; ++n)
        for (int64_t g = 0; g < d.groups; ++g) {
          im2col(xp + (n * d.cin + g * d.cg) * d.h * d.w, col.data(), d, p);
          ConstMatMap<T> W(wp + g * d.og * d.patch(), d.og, d.patch());
          ConstMatMap<T> C(col.data(), d.patch(), d.ho * d.wo);
          MatMap<T> Y(yp + (n * d.cout + g * d.og) * d.ho * d.wo, d.og, d.ho * d.wo);
          Y.noalias() = W * C;
          if (bp)
            for (int64_t o = 0; o < d.og; ++o) Y.row(o).array() += bp[g * d.og + o];
        }
    });
  });
}

template <class T>
void reference_conv_backward_data(const Tensor& gx_user, const Tensor& gy_user, const Tensor& w_user,
                                  const Conv2dParams& p) {
  Tensor gy = contiguous(gy_user), w = contiguous(w_user);
  const ConvDims d = conv_dims(gx_user.sizes(), w.sizes(), gy.sizes(), p.groups);
  with_contiguous_output(gx_user, [&](const Tensor& gx) {
    const T* gyp = gy.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    T* gxp = gx.data_ptr<T>();
    parallel_for(0, d.n, 1, [&](int64_t begin, int64_t end) {
      RowMat<T> col(d.patch(), d.ho * d.wo);
      std::fill(gxp + begin * d.cin * d.h * d.w, gxp + end * d.cin * d.h * d.w, T(0));
      for (int64_t n = begin; n < end; ++n)
        for (int64_t g = 0; g < d.groups; ++g) {
          ConstMatMap<T> W(wp + g * d.og * d.patch(), d.og, d.patch());
          ConstMatMap<T> GY(gyp + (n * d.cout + g * d.og) * d.ho * d.wo, d.og, d.ho * d.wo);
          col.noalias() = W.transpose() * GY;
          col2im(col.data(), gxp + (n * d.cin + g * d.cg) * d.h * d.w, d, p);
        }
    });
  });
}

template <class T>
void reference_conv_backward_weights(const Tensor& gw_user, const Tensor& gb_user, const Tensor& gy_user,
                                     const Tensor& x_user, const Conv2dParams& p) {
  Tensor gy = contiguous(gy_user), x = contiguous(x_user);
  const ConvDims d = conv_dims(x.sizes(), gw_user.sizes(), gy.sizes(), p.groups);
  with_contiguous_output(gw_user, [&](const Tensor& gw) {
    const T* gyp = gy.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    T* gwp = gw.data_ptr<T>();
    MatMap<T>(gwp, d.cout, d.patch()).setZero();
    RowMat<T> col(d.patch(), d.ho * d.wo);
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t g = 0; g < d.groups; ++g) {
        im2col(xp + (n * d.cin + g * d.cg) * d.h * d.w, col.data(), d, p);
        ConstMatMap<T> GY(gyp + (n * d.cout + g * d.og) * d.ho * d.wo, d.og, d.ho * d.wo);
        MatMap<T>(gwp + g * d.og * d.patch(), d.og, d.patch()).noalias() += GY * col.transpose();
      }
  });
  if (gb_user.defined()) {
    with_contiguous_output(gb_user, [&](const Tensor& gb) {
      const T* gyp = gy.data_ptr<T>();
      T* gbp = gb.data_ptr<T>();
      for (int64_t o = 0; o < d.cout; ++o) {
        T sum = 0;
        for (int64_t n = 0; n < d.n; ++n)
          sum += ConstMatMap<T>(gyp + (n * d.cout + o) * d.ho * d.wo, 1, d.ho * d.wo).sum();
        gbp[o] = sum;
      }
    });
  }
}

}  // namespace

void reference_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                       const Conv2dParams& p) {
  reference_conv_forward<double>(out, x, w, bias, p);
}

void reference_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                             const Conv2dParams& p) {
  reference_conv_backward_data<double>(grad_input, grad_out, w, p);
}

void reference_backward_weights(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                const Tensor& x, const Conv2dParams& p) {
  reference_conv_backward_weights<double>(grad_weight, grad_bias, grad_out, x, p);
}

}  // namespace loom::cpu::conv
