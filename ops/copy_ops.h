/*
 * Copies, casts and fills. copy_ is the one kernel behind contiguous(), clone(), to(dtype)
 * and to(device): it reads any strides and any dtype and writes any strides and dtype.
 */
#pragma once

#include "core/tensor.h"

namespace loom {

// dst <- src (src broadcast to dst's shape, converted to dst's dtype). Returns dst.
const Tensor& copy_(const Tensor& dst, const Tensor& src);
const Tensor& fill_(const Tensor& dst, Scalar value);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, DType dtype);
Tensor to(const Tensor& x, Device device);

}  // namespace loom
