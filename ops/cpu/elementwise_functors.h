/*
 * Scalar functors of the elementwise ops: the one definition of what each op computes on
 * one element (ggml's unary-ops.cpp op_* functions). They take and return opmath values
 * (float for the 16-bit types, the storage type otherwise) and are applied by the generic
 * strided loops of elementwise_kernels.cpp; the transcendental ones also have vectorised
 * block versions there for float and double. Other CPU kernels may reuse them.
 */
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace loom::cpu::fn {

// ---- unary --------------------------------------------------------------------------------
struct Neg {
  template <class T>
  T operator()(T x) const {
    return static_cast<T>(-x);
  }
};

struct Abs {
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::fabs(x);
    } else if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else {
      return static_cast<T>(x < 0 ? -x : x);
    }
  }
};

// -1, 0 or 1; 0 for NaN (as PyTorch); identity on bool.
struct Sign {
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return x;
    } else if constexpr (std::is_unsigned_v<T>) {
      return static_cast<T>(x != 0);
    } else {
      return static_cast<T>((T(0) < x) - (x < T(0)));
    }
  }
};

// max(x, 0), NaN stays NaN.
struct Relu {
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else {
      return x < T(0) ? T(0) : x;
    }
  }
};

struct Exp {
  template <class T>
  T operator()(T x) const {
    return std::exp(x);
  }
};
struct Log {
  template <class T>
  T operator()(T x) const {
    return std::log(x);
  }
};
struct Log1p {
  template <class T>
  T operator()(T x) const {
    return std::log1p(x);
  }
};
struct Sqrt {
  template <class T>
  T operator()(T x) const {
    return std::sqrt(x);
  }
};
struct Rsqrt {
  template <class T>
  T operator()(T x) const {
    return T(1) / std::sqrt(x);
  }
};
struct Sin {
  template <class T>
  T operator()(T x) const {
    return std::sin(x);
  }
};
struct Cos {
  template <class T>
  T operator()(T x) const {
    return std::cos(x);
  }
};
struct Tanh {
  template <class T>
  T operator()(T x) const {
    return std::tanh(x);
  }
};
struct Sigmoid {
  template <class T>
  T operator()(T x) const {
    return T(1) / (T(1) + std::exp(-x));
  }
};
// x * sigmoid(x)
struct Silu {
  template <class T>
  T operator()(T x) const {
    return x / (T(1) + std::exp(-x));
  }
};
// x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
struct Gelu {
  template <class T>
  T operator()(T x) const {
    return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
  }
};
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
struct GeluTanh {
  template <class T>
  T operator()(T x) const {
    const T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(inner));
  }
};

// ---- binary -------------------------------------------------------------------------------
struct Add {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a + b);
  }
};
struct Sub {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a - b);
  }
};
struct Mul {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a * b);
  }
};
struct Div {
  template <class T>
  T operator()(T a, T b) const {
    return a / b;
  }
};
// NaN-propagating, as torch.maximum / torch.minimum.
struct Maximum {
  template <class T>
  T operator()(T a, T b) const {
    return (a > b || a != a) ? a : b;
  }
};
struct Minimum {
  template <class T>
  T operator()(T a, T b) const {
    return (a < b || a != a) ? a : b;
  }
};

// Integer power by squaring, wrapping on overflow like PyTorch. A negative exponent gives
// 1 / base truncated: 1 for base 1, +-1 for base -1, 0 otherwise.
template <class T>
T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  auto e = static_cast<U>(exp);
  while (e) {
    if (e & 1u) result = static_cast<U>(result * b);
    e = static_cast<U>(e >> 1);
    b = static_cast<U>(b * b);
  }
  return static_cast<T>(result);
}

struct Pow {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(a, b);
    } else {
      return int_pow(a, b);
    }
  }
};

struct Eq {
  template <class T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};
struct Ne {
  template <class T>
  bool operator()(T a, T b) const {
    return a != b;
  }
};
struct Lt {
  template <class T>
  bool operator()(T a, T b) const {
    return a < b;
  }
};
struct Le {
  template <class T>
  bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct Gt {
  template <class T>
  bool operator()(T a, T b) const {
    return a > b;
  }
};
struct Ge {
  template <class T>
  bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct LogicalAnd {
  template <class T>
  bool operator()(T a, T b) const {
    return (a != T(0)) & (b != T(0));
  }
};
struct LogicalOr {
  template <class T>
  bool operator()(T a, T b) const {
    return (a != T(0)) | (b != T(0));
  }
};

}  // namespace loom::cpu::fn
