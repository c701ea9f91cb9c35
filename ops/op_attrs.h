/*
 * The non-tensor arguments of each primitive op, as autograd needs them to compute the
 * gradient (the third column of op_list.def). The ops layer fills one in when it records an
 * op; the formula in autograd/formulas/ reads it back with its static type. Input shapes,
 * dtypes and devices are recorded separately for every op, so they are not repeated here.
 */
#pragma once

#include <optional>

#include "core/scalar.h"
#include "core/shape.h"
#include "ops/kernel_types.h"

namespace loom {

struct NoAttrs {};

// One dim (softmax family, cat, index ops), normalised to [0, rank).
struct DimAttrs {
  int64_t dim = 0;
};

// A permutation (permute) or a set of dims (flip), normalised.
struct DimsAttrs {
  DimVector dims;
};

// as_strided: the view's geometry and the input's, both in storage elements.
struct AsStridedAttrs {
  DimVector sizes, strides;
  int64_t storage_offset = 0;
  DimVector input_strides;
  int64_t input_storage_offset = 0;
};

// slice(dim, start, end, step) with start/end clamped to [0, size].
struct SliceAttrs {
  int64_t dim = 0, start = 0, end = 0, step = 1;
};

struct SelectAttrs {
  int64_t dim = 0, index = 0;  // index normalised to [0, size)
};

struct GeluAttrs {
  bool tanh_approximation = false;
};

struct ThresholdAttrs {
  double threshold = 0;
};

struct ClampAttrs {
  std::optional<Scalar> min, max;
};

// sum/prod/amax/amin: dims sorted and normalised (empty = all dims).
struct ReduceAttrs {
  DimVector dims;
  bool keepdim = false;
};

struct VarAttrs {
  DimVector dims;
  int64_t correction = 1;
  bool keepdim = false;
};

// max/min along one dim (values, indices).
struct ArgReduceAttrs {
  int64_t dim = 0;
  bool keepdim = false;
};

// matmul: inputs (a, b), out = a @ b with torch.matmul's broadcasting; linear: inputs
// (x, weight, bias), out = x @ weight^T + bias.
struct MatmulAttrs {
  bool linear = false;
};

struct LinearActivationAttrs {
  Activation activation = Activation::Relu;
};

struct BatchNormAttrs {
  bool training = true;
  double eps = 1e-5;
};

struct LayerNormAttrs {
  DimVector normalized_shape;
  double eps = 1e-5;
};

struct NllLossAttrs {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
};

struct TriangleAttrs {
  int64_t diagonal = 0;
};

struct PadAttrs {
  DimVector pads;
  PadMode mode = PadMode::Constant;
  double value = 0;
};

// sort: the dim (normalised) and the direction.
struct SortAttrs {
  int64_t dim = 0;
  bool descending = false;
};

// flash_attention and its backward: the scale of the scores and whether the mask is causal.
struct AttentionAttrs {
  double scale = 1.0;
  bool is_causal = false;
};

}  // namespace loom
