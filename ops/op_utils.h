/*
 * Validation helpers shared by the op families, so that every op reports problems the same
 * way: "<op>: <what was expected>, got <what was found>".
 */
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace loom {

inline void check_defined(const Tensor& t, std::string_view op, std::string_view what = "input") {
  LOOM_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

inline void check_same_device(const Tensor& a, const Tensor& b, std::string_view op) {
  LOOM_CHECK(a.device() == b.device(), op, ": expected all tensors on the same device, got ", a.device(), " and ",
             b.device());
}

inline void check_floating(const Tensor& t, std::string_view op) {
  LOOM_CHECK(t.is_floating_point(), op, ": expected a floating-point tensor, got ", t.dtype());
}

inline void check_dim(const Tensor& t, int64_t dim, std::string_view op, std::string_view what = "input") {
  LOOM_CHECK(t.dim() == dim, op, ": expected ", what, " to be ", dim, "-D, got shape ", t.sizes());
}

// Writing into a tensor with stride-0 (expanded) dims would write one element several times,
// in an order that differs between backends: refused, as PyTorch refuses it.
void check_writable(const Tensor& self, std::string_view op);

// `input` itself, or a copy of it when it shares memory with `self` other than as the very same
// elements: an op writing into self would otherwise read some of input after overwriting it.
Tensor unaliased(const Tensor& input, const Tensor& self);

// Sorted, unique, wrapped dims; empty `dims` means all dims.
DimVector normalize_dims(IntArrayRef dims, int64_t ndim, std::string_view op);

// Shape with `dims` (sorted, unique) removed, or set to 1 when keepdim.
DimVector reduced_shape(IntArrayRef sizes, IntArrayRef dims, bool keepdim);

}  // namespace loom
