/*
 * Emulated cuDNN backend descriptors (see cudnn_graph.h): creation, typed attributes, finalize
 * with cuDNN's validation, and the attributes Loom reads back (heuristic results, the engine's
 * notes, workspace sizes).
 *
 * The rules, from the cuDNN 9 backend documentation, each with the status cuDNN returns:
 *  - an attribute of the wrong type (CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE), a wrong element
 *    count, an attribute the descriptor does not have, a change to a finalized descriptor, a
 *    negative or zero size, stride or dilation (CUDNN_STATUS_BAD_PARAM); a null array
 *    (CUDNN_STATUS_BAD_PARAM_NULL_POINTER); a descriptor attribute of the wrong descriptor type
 *    (CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE) or not finalized (CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
 *  - finalize with a required attribute unset (CUDNN_STATUS_BAD_PARAM); a convolution whose
 *    tensors do not have spatial_dims + 2 dims, whose input channels are not a multiple of the
 *    filter's, whose output channels are not divisible by the groups, or whose output shape is
 *    not the convolution's (CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH); two tensors of one graph with
 *    one unique id (CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES);
 *  - a normalization node finalized without its mode, its forward phase or a tensor it needs, or
 *    with running statistics outside training or not all five together (CUDNN_STATUS_BAD_PARAM);
 *    y, dy or dx not of x's dims, a per-channel tensor not [1, C, 1, ...], a scalar not all ones
 *    (CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);
 *  - a graph that no engine runs: the heuristic returns no configuration, and an engine config
 *    built by hand does not finalize (CUDNN_STATUS_NOT_SUPPORTED_*; see engine_supports).
 * Emulator limits, also CUDNN_STATUS_NOT_SUPPORTED: virtual tensors and descriptor types other
 * than those below, which Loom does not use.
 */
#include "core/cuda/emulated/cudnn_descriptors.h"

#include <cudnn_graph.h>

#include <cstring>

using loom_emu::cudnn::ConvKind;
using loom_emu::cudnn::Descriptor;
using loom_emu::cudnn::fail;

namespace {

Descriptor* as_desc(cudnnBackendDescriptor_t d) {
  auto* p = static_cast<Descriptor*>(d);
  return p != nullptr && p->magic == loom_emu::cudnn::kLiveMagic ? p : nullptr;
}

bool is_conv_op(cudnnBackendDescriptorType_t t) {
  return t == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
         t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
         t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
}

bool is_norm_op(cudnnBackendDescriptorType_t t) {
  return t == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR ||
         t == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR;
}

// The checks every setter shares: the attribute's type, a non-null array, the element count.
cudnnStatus_t check_set(cudnnBackendAttributeType_t given, cudnnBackendAttributeType_t expected,
                        int64_t count, int64_t min_count, int64_t max_count, const void* array) {
  if (given != expected) return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "attribute of the wrong type");
  if (array == nullptr && count > 0) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null attribute array");
  if (count < min_count || count > max_count)
    return fail(CUDNN_STATUS_BAD_PARAM, "wrong attribute element count");
  return CUDNN_STATUS_SUCCESS;
}

template <class T>
cudnnStatus_t set_one(T& field, cudnnBackendAttributeType_t given, cudnnBackendAttributeType_t expected,
                      int64_t count, const void* array) {
  if (cudnnStatus_t s = check_set(given, expected, count, 1, 1, array); s != CUDNN_STATUS_SUCCESS) return s;
  std::memcpy(&field, array, sizeof(T));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t set_int64s(std::vector<int64_t>& field, cudnnBackendAttributeType_t given, int64_t count,
                         const void* array, int64_t min_value) {
  if (cudnnStatus_t s = check_set(given, CUDNN_TYPE_INT64, count, 1, CUDNN_DIM_MAX, array);
      s != CUDNN_STATUS_SUCCESS)
    return s;
  const auto* v = static_cast<const int64_t*>(array);
  for (int64_t i = 0; i < count; ++i)
    if (v[i] < min_value) return fail(CUDNN_STATUS_BAD_PARAM, "size, stride or padding out of range");
  field.assign(v, v + count);
  return CUDNN_STATUS_SUCCESS;
}

// alpha and beta: host scalars, FLOAT or DOUBLE.
cudnnStatus_t set_scale(double& field, cudnnBackendAttributeType_t given, int64_t count, const void* array) {
  if (given == CUDNN_TYPE_FLOAT) {
    float f = 0;
    if (cudnnStatus_t s = set_one(f, given, CUDNN_TYPE_FLOAT, count, array); s != CUDNN_STATUS_SUCCESS)
      return s;
    field = f;
    return CUDNN_STATUS_SUCCESS;
  }
  return set_one(field, given, CUDNN_TYPE_DOUBLE, count, array);
}

// A descriptor attribute: one finalized descriptor of type `want`.
cudnnStatus_t get_desc_arg(const Descriptor*& out, cudnnBackendAttributeType_t given, int64_t count,
                           const void* array, cudnnBackendDescriptorType_t want) {
  if (cudnnStatus_t s = check_set(given, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, 1, 1, array);
      s != CUDNN_STATUS_SUCCESS)
    return s;
  const Descriptor* d = as_desc(*static_cast<const cudnnBackendDescriptor_t*>(array));
  if (d == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null descriptor attribute");
  if (d->type != want)
    return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "descriptor attribute of the wrong type");
  if (!d->finalized) return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "descriptor attribute not finalized");
  out = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t set_tensor_attr(Descriptor& d, cudnnBackendAttributeName_t name,
                              cudnnBackendAttributeType_t type, int64_t count, const void* array) {
  auto& t = d.tensor;
  switch (name) {
    case CUDNN_ATTR_TENSOR_DATA_TYPE:
      return set_one(t.data_type, type, CUDNN_TYPE_DATA_TYPE, count, array);
    case CUDNN_ATTR_TENSOR_DIMENSIONS:
      return set_int64s(t.dims, type, count, array, 1);
    case CUDNN_ATTR_TENSOR_STRIDES:
      return set_int64s(t.strides, type, count, array, 1);
    case CUDNN_ATTR_TENSOR_UNIQUE_ID:
      t.uid_set = true;
      return set_one(t.uid, type, CUDNN_TYPE_INT64, count, array);
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
      if (cudnnStatus_t s = set_one(t.alignment, type, CUDNN_TYPE_INT64, count, array);
          s != CUDNN_STATUS_SUCCESS)
        return s;
      if (t.alignment <= 0 || (t.alignment & (t.alignment - 1)) != 0)
        return fail(CUDNN_STATUS_BAD_PARAM, "byte alignment must be a power of two");
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_IS_VIRTUAL: {
      bool v = false;
      if (cudnnStatus_t s = set_one(v, type, CUDNN_TYPE_BOOLEAN, count, array); s != CUDNN_STATUS_SUCCESS)
        return s;
      if (v) return fail(CUDNN_STATUS_NOT_SUPPORTED, "emulated cuDNN: virtual tensors are not emulated");
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_TENSOR_IS_BY_VALUE:
      return set_one(t.by_value, type, CUDNN_TYPE_BOOLEAN, count, array);
    default:
      return fail(CUDNN_STATUS_BAD_PARAM, "not a tensor attribute");
  }
}

cudnnStatus_t set_conv_attr(Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t count, const void* array) {
  auto& c = d.conv;
  switch (name) {
    case CUDNN_ATTR_CONVOLUTION_COMP_TYPE:
      return set_one(c.comp_type, type, CUDNN_TYPE_DATA_TYPE, count, array);
    case CUDNN_ATTR_CONVOLUTION_CONV_MODE:
      return set_one(c.mode, type, CUDNN_TYPE_CONVOLUTION_MODE, count, array);
    case CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS:
      if (cudnnStatus_t s = set_one(c.spatial_dims, type, CUDNN_TYPE_INT64, count, array);
          s != CUDNN_STATUS_SUCCESS)
        return s;
      if (c.spatial_dims < 1 || c.spatial_dims > CUDNN_DIM_MAX - 2)
        return fail(CUDNN_STATUS_BAD_PARAM, "spatial dims out of range");
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_CONVOLUTION_DILATIONS:
      return set_int64s(c.dilations, type, count, array, 1);
    case CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES:
      return set_int64s(c.strides, type, count, array, 1);
    case CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS:
      return set_int64s(c.pre_paddings, type, count, array, 0);
    case CUDNN_ATTR_CONVOLUTION_POST_PADDINGS:
      return set_int64s(c.post_paddings, type, count, array, 0);
    default:
      return fail(CUDNN_STATUS_BAD_PARAM, "not a convolution attribute");
  }
}

// The attribute names of one convolution kind, in the order alpha, beta, conv, x, w, y.
struct ConvOpNames {
  cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
};

ConvOpNames names_of(ConvKind k) {
  switch (k) {
    case ConvKind::kForward:
      return {
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
    case ConvKind::kBackwardData:
      return {
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
    case ConvKind::kBackwardFilter:
      break;
  }
  return {
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
}

cudnnStatus_t set_conv_op_attr(Descriptor& d, cudnnBackendAttributeName_t name,
                               cudnnBackendAttributeType_t type, int64_t count, const void* array) {
  auto& op = d.op;
  const ConvOpNames n = names_of(op.kind);
  if (name == n.alpha) return set_scale(op.alpha, type, count, array);
  if (name == n.beta) return set_scale(op.beta, type, count, array);
  const Descriptor* arg = nullptr;
  if (name == n.conv) {
    if (cudnnStatus_t s = get_desc_arg(arg, type, count, array, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
        s != CUDNN_STATUS_SUCCESS)
      return s;
    op.conv = arg->conv;
    op.has_conv = true;
    return CUDNN_STATUS_SUCCESS;
  }
  if (name != n.x && name != n.w && name != n.y)
    return fail(CUDNN_STATUS_BAD_PARAM, "not an attribute of this operation");
  if (cudnnStatus_t s = get_desc_arg(arg, type, count, array, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
      s != CUDNN_STATUS_SUCCESS)
    return s;
  (name == n.x ? op.x : name == n.w ? op.w : op.y) = arg->tensor;
  (name == n.x ? op.has_x : name == n.w ? op.has_w : op.has_y) = true;
  return CUDNN_STATUS_SUCCESS;
}

// The role of a normalization attribute that names a tensor, or kNormRoles for none.
loom_emu::cudnn::NormRole norm_role(bool backward, cudnnBackendAttributeName_t name) {
  using namespace loom_emu::cudnn;
  if (backward) {
    switch (name) {
      case CUDNN_ATTR_OPERATION_NORM_BWD_XDESC:
        return kNormX;
      case CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC:
        return kNormMean;
      case CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC:
        return kNormInvVariance;
      case CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC:
        return kNormDy;
      case CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC:
        return kNormScale;
      case CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC:
        return kNormEpsilon;
      case CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC:
        return kNormDscale;
      case CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC:
        return kNormDbias;
      case CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC:
        return kNormDx;
      default:
        return kNormRoles;
    }
  }
  switch (name) {
    case CUDNN_ATTR_OPERATION_NORM_FWD_XDESC:
      return kNormX;
    case CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC:
      return kNormMean;
    case CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC:
      return kNormInvVariance;
    case CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC:
      return kNormScale;
    case CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC:
      return kNormBias;
    case CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC:
      return kNormEpsilon;
    case CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC:
      return kNormExpAvgFactor;
    case CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC:
      return kNormInRunningMean;
    case CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC:
      return kNormInRunningVar;
    case CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC:
      return kNormOutRunningMean;
    case CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC:
      return kNormOutRunningVar;
    case CUDNN_ATTR_OPERATION_NORM_FWD_YDESC:
      return kNormY;
    default:
      return kNormRoles;
  }
}

cudnnStatus_t set_norm_op_attr(Descriptor& d, cudnnBackendAttributeName_t name,
                               cudnnBackendAttributeType_t type, int64_t count, const void* array) {
  auto& op = d.norm;
  if (name == (op.backward ? CUDNN_ATTR_OPERATION_NORM_BWD_MODE : CUDNN_ATTR_OPERATION_NORM_FWD_MODE)) {
    if (cudnnStatus_t s = set_one(op.mode, type, CUDNN_TYPE_NORM_MODE, count, array);
        s != CUDNN_STATUS_SUCCESS)
      return s;
    return op.mode >= CUDNN_LAYER_NORM && op.mode <= CUDNN_ADA_LAYER_NORM
               ? CUDNN_STATUS_SUCCESS
               : fail(CUDNN_STATUS_BAD_PARAM, "unknown normalization mode");
  }
  if (!op.backward && name == CUDNN_ATTR_OPERATION_NORM_FWD_PHASE) {
    if (cudnnStatus_t s = set_one(op.phase, type, CUDNN_TYPE_NORM_FWD_PHASE, count, array);
        s != CUDNN_STATUS_SUCCESS)
      return s;
    return op.phase == CUDNN_NORM_FWD_INFERENCE || op.phase == CUDNN_NORM_FWD_TRAINING
               ? CUDNN_STATUS_SUCCESS
               : fail(CUDNN_STATUS_BAD_PARAM, "unknown normalization phase");
  }
  if (name == CUDNN_ATTR_OPERATION_NORM_FWD_PEER_STAT_DESCS ||
      name == CUDNN_ATTR_OPERATION_NORM_BWD_PEER_STAT_DESCS)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                "emulated cuDNN: peer statistics (multi-GPU batch norm) are not emulated");
  const loom_emu::cudnn::NormRole role = norm_role(op.backward, name);
  if (role == loom_emu::cudnn::kNormRoles)
    return fail(CUDNN_STATUS_BAD_PARAM, "not an attribute of this operation");
  const Descriptor* arg = nullptr;
  if (cudnnStatus_t s = get_desc_arg(arg, type, count, array, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
      s != CUDNN_STATUS_SUCCESS)
    return s;
  op.tensors[role] = arg->tensor;
  op.has[role] = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t set_attr(Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                       int64_t count, const void* array) {
  const Descriptor* arg = nullptr;
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      return set_tensor_attr(d, name, type, count, array);
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
      return set_conv_attr(d, name, type, count, array);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      if (name == CUDNN_ATTR_OPERATIONGRAPH_HANDLE) {
        cudnnHandle_t h = nullptr;
        if (cudnnStatus_t s = set_one(h, type, CUDNN_TYPE_HANDLE, count, array); s != CUDNN_STATUS_SUCCESS)
          return s;
        if (h == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null handle");
        d.graph.has_handle = true;
        return CUDNN_STATUS_SUCCESS;
      }
      if (name == CUDNN_ATTR_OPERATIONGRAPH_OPS) {
        if (cudnnStatus_t s = check_set(type, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, 1, 64, array);
            s != CUDNN_STATUS_SUCCESS)
          return s;
        d.graph.ops.clear();
        d.graph.norms.clear();
        for (int64_t i = 0; i < count; ++i) {
          const Descriptor* op = as_desc(static_cast<const cudnnBackendDescriptor_t*>(array)[i]);
          if (op == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null operation");
          if (!is_conv_op(op->type) && !is_norm_op(op->type))
            return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                        "emulated cuDNN: only convolution and normalization operations");
          if (!op->finalized) return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "operation not finalized");
          if (is_norm_op(op->type))
            d.graph.norms.push_back(op->norm);
          else
            d.graph.ops.push_back(op->op);
        }
        return CUDNN_STATUS_SUCCESS;
      }
      return fail(CUDNN_STATUS_BAD_PARAM, "not an operation graph attribute");
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      if (name == CUDNN_ATTR_ENGINEHEUR_MODE) {
        int32_t mode = 0;
        if (cudnnStatus_t s = set_one(mode, type, CUDNN_TYPE_HEUR_MODE, count, array);
            s != CUDNN_STATUS_SUCCESS)
          return s;
        if (mode < 0 || mode >= CUDNN_HEUR_MODES_COUNT)
          return fail(CUDNN_STATUS_BAD_PARAM, "unknown heuristic mode");
        d.heur_mode = mode;
        return CUDNN_STATUS_SUCCESS;
      }
      if (name != CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH)
        return fail(CUDNN_STATUS_BAD_PARAM, "not a heuristic attribute");
      if (cudnnStatus_t s = get_desc_arg(arg, type, count, array, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
          s != CUDNN_STATUS_SUCCESS)
        return s;
      d.graph = arg->graph;
      d.has_graph = true;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      if (name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX)
        return set_one(d.engine.index, type, CUDNN_TYPE_INT64, count, array);
      if (name != CUDNN_ATTR_ENGINE_OPERATION_GRAPH)
        return fail(CUDNN_STATUS_BAD_PARAM, "not an engine attribute");
      if (cudnnStatus_t s = get_desc_arg(arg, type, count, array, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
          s != CUDNN_STATUS_SUCCESS)
        return s;
      d.engine.graph = arg->graph;
      d.engine.has_graph = true;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      if (name == CUDNN_ATTR_ENGINECFG_KNOB_CHOICES)  // the reference engine has no knobs to choose
        return count == 0 ? CUDNN_STATUS_SUCCESS : fail(CUDNN_STATUS_BAD_PARAM, "the engine has no knobs");
      if (name != CUDNN_ATTR_ENGINECFG_ENGINE)
        return fail(CUDNN_STATUS_BAD_PARAM, "not an engine config attribute");
      if (cudnnStatus_t s = get_desc_arg(arg, type, count, array, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
          s != CUDNN_STATUS_SUCCESS)
        return s;
      d.engine = arg->engine;
      d.has_engine = true;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      if (name == CUDNN_ATTR_EXECUTION_PLAN_HANDLE) {
        if (cudnnStatus_t s = set_one(d.handle, type, CUDNN_TYPE_HANDLE, count, array);
            s != CUDNN_STATUS_SUCCESS)
          return s;
        return d.handle != nullptr ? CUDNN_STATUS_SUCCESS
                                   : fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null handle");
      }
      if (name != CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)
        return fail(CUDNN_STATUS_BAD_PARAM, "not a plan attribute");
      if (cudnnStatus_t s = get_desc_arg(arg, type, count, array, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
          s != CUDNN_STATUS_SUCCESS)
        return s;
      d.engine = arg->engine;
      d.workspace_bytes = arg->workspace_bytes;
      d.has_engine = true;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      if (name == CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS) {
        if (cudnnStatus_t s = check_set(type, CUDNN_TYPE_INT64, count, 0, 1 << 16, array);
            s != CUDNN_STATUS_SUCCESS)
          return s;
        const auto* v = static_cast<const int64_t*>(array);
        d.uids.assign(v, v + count);
        return CUDNN_STATUS_SUCCESS;
      }
      if (name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS) {
        if (cudnnStatus_t s = check_set(type, CUDNN_TYPE_VOID_PTR, count, 0, 1 << 16, array);
            s != CUDNN_STATUS_SUCCESS)
          return s;
        auto* const* v = static_cast<void* const*>(array);
        d.pointers.assign(v, v + count);
        return CUDNN_STATUS_SUCCESS;
      }
      if (name == CUDNN_ATTR_VARIANT_PACK_WORKSPACE)
        return set_one(d.workspace, type, CUDNN_TYPE_VOID_PTR, count, array);
      return fail(CUDNN_STATUS_BAD_PARAM, "not a variant pack attribute");
    default:
      if (is_conv_op(d.type)) return set_conv_op_attr(d, name, type, count, array);
      if (is_norm_op(d.type)) return set_norm_op_attr(d, name, type, count, array);
      return fail(CUDNN_STATUS_NOT_SUPPORTED, "emulated cuDNN: descriptor type not emulated");
  }
}

// ---- finalize ---------------------------------------------------------------------------------

cudnnStatus_t finalize_tensor(const loom_emu::cudnn::TensorDesc& t) {
  if (t.data_type < 0 || t.dims.empty() || !t.uid_set || t.alignment == 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                "tensor: data type, dimensions, strides, unique id and alignment are required");
  if (t.strides.size() != t.dims.size())
    return fail(CUDNN_STATUS_BAD_PARAM, "tensor: strides and dimensions differ in count");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_conv(const loom_emu::cudnn::ConvDesc& c) {
  const auto n = static_cast<size_t>(c.spatial_dims);
  if (c.comp_type < 0 || c.mode < 0 || n == 0)
    return fail(CUDNN_STATUS_BAD_PARAM, "convolution: compute type, mode and spatial dims are required");
  if (c.dilations.size() != n || c.strides.size() != n || c.pre_paddings.size() != n ||
      c.post_paddings.size() != n)
    return fail(CUDNN_STATUS_BAD_PARAM,
                "convolution: dilations, strides and paddings need spatial-dims values");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_conv_op(loom_emu::cudnn::ConvOp& op) {
  if (!op.has_conv || !op.has_x || !op.has_w || !op.has_y)
    return fail(CUDNN_STATUS_BAD_PARAM,
                "convolution operation: the convolution and its three tensors are required");
  const auto& c = op.conv;
  const size_t nd = static_cast<size_t>(c.spatial_dims) + 2;
  if (op.x.dims.size() != nd || op.w.dims.size() != nd || op.y.dims.size() != nd)
    return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "convolution operation: tensors need spatial dims + 2 dims");
  const int64_t cx = op.x.dims[1], cw = op.w.dims[1];
  if (cx % cw != 0)
    return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "convolution operation: input channels not a multiple of the filter's");
  op.groups = cx / cw;
  if (op.w.dims[0] % op.groups != 0)
    return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "convolution operation: output channels not divisible by the groups");
  if (op.y.dims[0] != op.x.dims[0] || op.y.dims[1] != op.w.dims[0])
    return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "convolution operation: output batch or channels mismatch");
  for (size_t i = 2; i < nd; ++i) {
    const size_t s = i - 2;
    const int64_t span = c.dilations[s] * (op.w.dims[i] - 1) + 1;
    const int64_t padded = op.x.dims[i] + c.pre_paddings[s] + c.post_paddings[s];
    if (padded < span || (padded - span) / c.strides[s] + 1 != op.y.dims[i])
      return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                  "convolution operation: output spatial size mismatch");
  }
  return CUDNN_STATUS_SUCCESS;
}

// The roles a normalization node must have, and those that come all together or not at all.
cudnnStatus_t finalize_norm_op(const loom_emu::cudnn::NormOp& op) {
  using namespace loom_emu::cudnn;
  if (op.mode < 0 || (!op.backward && op.phase < 0))
    return fail(CUDNN_STATUS_BAD_PARAM, "normalization operation: mode (and forward phase) required");
  auto all = [&](std::initializer_list<NormRole> roles) {
    for (NormRole r : roles)
      if (!op.has[r]) return false;
    return true;
  };
  auto any = [&](std::initializer_list<NormRole> roles) {
    for (NormRole r : roles)
      if (op.has[r]) return true;
    return false;
  };
  const bool training = !op.backward && op.phase == CUDNN_NORM_FWD_TRAINING;
  if (op.backward
          ? !all({kNormX, kNormDy, kNormScale, kNormMean, kNormInvVariance, kNormDx, kNormDscale, kNormDbias})
          : !all({kNormX, kNormY, kNormScale, kNormBias, kNormEpsilon, kNormMean, kNormInvVariance}))
    return fail(CUDNN_STATUS_BAD_PARAM, "normalization operation: a required tensor is not set");
  const std::initializer_list<NormRole> running = {kNormExpAvgFactor, kNormInRunningMean, kNormInRunningVar,
                                                   kNormOutRunningMean, kNormOutRunningVar};
  if (any(running) && (!training || !all(running)))
    return fail(CUDNN_STATUS_BAD_PARAM,
                "normalization operation: running statistics need the training phase, the factor and "
                "all four tensors");
  // Shapes: the data tensors share x's dims; per-channel tensors are [1, C, 1, ...]; scalars are
  // all ones.
  const auto& x = op.tensors[kNormX].dims;
  if (x.size() < 2)
    return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "normalization operation: x needs [N, C, ...]");
  for (size_t r = 0; r < op.has.size(); ++r) {
    if (!op.has[r] || r == kNormX) continue;
    const auto& d = op.tensors[r].dims;
    const bool data = r == kNormY || r == kNormDy || r == kNormDx;
    const bool scalar = r == kNormEpsilon || r == kNormExpAvgFactor;
    bool ok = d.size() == x.size();
    for (size_t i = 0; ok && i < d.size(); ++i) ok = d[i] == (data ? x[i] : scalar || i != 1 ? 1 : x[1]);
    if (!ok)
      return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                  scalar ? "normalization operation: epsilon and the factor are [1, 1, ...] scalars"
                  : data ? "normalization operation: y, dy and dx take x's dimensions"
                         : "normalization operation: statistics, scale and bias are [1, C, 1, ...]");
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_graph(const loom_emu::cudnn::Graph& g) {
  if (g.ops.empty() && g.norms.empty()) return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: no operations");
  std::vector<const loom_emu::cudnn::TensorDesc*> seen;
  auto unique = [&](const loom_emu::cudnn::TensorDesc* t) {
    for (const auto* u : seen)
      if (u->uid == t->uid) return false;
    seen.push_back(t);
    return true;
  };
  bool ok = true;
  for (const auto& op : g.ops)
    for (const auto* t : {&op.x, &op.w, &op.y}) ok = ok && unique(t);
  for (const auto& op : g.norms)
    for (size_t r = 0; r < op.has.size(); ++r)
      if (op.has[r]) ok = ok && unique(&op.tensors[r]);
  return ok ? CUDNN_STATUS_SUCCESS
            : fail(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES,
                   "operation graph: two tensors with one unique id");
}

cudnnStatus_t finalize(Descriptor& d) {
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      return finalize_tensor(d.tensor);
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
      return finalize_conv(d.conv);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      return finalize_graph(d.graph);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      return d.has_graph ? CUDNN_STATUS_SUCCESS
                         : fail(CUDNN_STATUS_BAD_PARAM, "heuristic: no operation graph");
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      if (!d.engine.has_graph || d.engine.index < 0)
        return fail(CUDNN_STATUS_BAD_PARAM, "engine: operation graph and global index are required");
      if (d.engine.index != 0)
        return fail(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND, "engine: global index out of range");
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      if (!d.has_engine) return fail(CUDNN_STATUS_BAD_PARAM, "engine config: no engine");
      if (cudnnStatus_t s = loom_emu::cudnn::engine_supports(d.engine.graph); s != CUDNN_STATUS_SUCCESS)
        return s;
      d.workspace_bytes = loom_emu::cudnn::engine_workspace_bytes(d.engine.graph);
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      if (!d.has_engine || d.handle == nullptr)
        return fail(CUDNN_STATUS_BAD_PARAM, "execution plan: handle and engine config are required");
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      if (d.uids.size() != d.pointers.size())
        return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: unique ids and data pointers differ in count");
      return CUDNN_STATUS_SUCCESS;
    default:
      return is_norm_op(d.type) ? finalize_norm_op(d.norm) : finalize_conv_op(d.op);
  }
}

// Writes `count` values of T to a getter's array (as many as requested) and the count.
template <class T>
cudnnStatus_t get_values(const T* values, int64_t count, cudnnBackendAttributeType_t given,
                         cudnnBackendAttributeType_t expected, int64_t requested, int64_t* element_count,
                         void* array) {
  if (given != expected) return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "attribute of the wrong type");
  if (element_count != nullptr) *element_count = count;
  if (array == nullptr)
    return requested == 0 || element_count != nullptr
               ? CUDNN_STATUS_SUCCESS
               : fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null array");
  for (int64_t i = 0; i < count && i < requested; ++i) static_cast<T*>(array)[i] = values[i];
  return CUDNN_STATUS_SUCCESS;
}

// The heuristic's results: the reference engine, configured, if it runs the graph; else none.
cudnnStatus_t get_heuristic_results(const Descriptor& heur, cudnnBackendAttributeType_t type,
                                    int64_t requested, int64_t* element_count, void* array) {
  if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR)
    return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "attribute of the wrong type");
  const int64_t available = loom_emu::cudnn::engine_supports(heur.graph) == CUDNN_STATUS_SUCCESS ? 1 : 0;
  if (element_count != nullptr) *element_count = available;
  if (available == 0 || requested == 0) return CUDNN_STATUS_SUCCESS;
  if (array == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null array");
  Descriptor* cfg = as_desc(static_cast<cudnnBackendDescriptor_t*>(array)[0]);
  if (cfg == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null engine config");
  if (cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
    return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "heuristic results go to engine config descriptors");
  cfg->engine.graph = heur.graph;
  cfg->engine.has_graph = true;
  cfg->engine.index = 0;
  cfg->has_engine = true;
  cfg->workspace_bytes = loom_emu::cudnn::engine_workspace_bytes(heur.graph);
  cfg->finalized = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t get_attr(const Descriptor& d, cudnnBackendAttributeName_t name,
                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* element_count,
                       void* array) {
  if (d.type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS)
    return get_heuristic_results(d, type, requested, element_count, array);
  if (d.type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_ENGINE) {
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR)
      return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "attribute of the wrong type");
    Descriptor* e = array != nullptr ? as_desc(static_cast<cudnnBackendDescriptor_t*>(array)[0]) : nullptr;
    if (e == nullptr || requested < 1)
      return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "no engine descriptor to fill");
    if (e->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
      return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "not an engine");
    e->engine = d.engine;
    e->finalized = true;
    if (element_count != nullptr) *element_count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  if ((d.type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE) ||
      (d.type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE))
    return get_values(&d.workspace_bytes, 1, type, CUDNN_TYPE_INT64, requested, element_count, array);
  if (d.type == CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
    // The reference engine: no tensor cores, no reduced precision, deterministic, no notes.
    if (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE)
      return get_values<int32_t>(nullptr, 0, type, CUDNN_TYPE_NUMERICAL_NOTE, requested, element_count,
                                 array);
    if (name == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE)
      return get_values<int32_t>(nullptr, 0, type, CUDNN_TYPE_BEHAVIOR_NOTE, requested, element_count, array);
    if (name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX)
      return get_values(&d.engine.index, 1, type, CUDNN_TYPE_INT64, requested, element_count, array);
  }
  if (d.type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR &&
      name == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) {
    const int64_t one = 1;
    return get_values(&one, 1, type, CUDNN_TYPE_INT64, requested, element_count, array);
  }
  if (d.type == CUDNN_BACKEND_TENSOR_DESCRIPTOR) {
    if (name == CUDNN_ATTR_TENSOR_DIMENSIONS)
      return get_values(d.tensor.dims.data(), static_cast<int64_t>(d.tensor.dims.size()), type,
                        CUDNN_TYPE_INT64, requested, element_count, array);
    if (name == CUDNN_ATTR_TENSOR_STRIDES)
      return get_values(d.tensor.strides.data(), static_cast<int64_t>(d.tensor.strides.size()), type,
                        CUDNN_TYPE_INT64, requested, element_count, array);
    if (name == CUDNN_ATTR_TENSOR_UNIQUE_ID)
      return get_values(&d.tensor.uid, 1, type, CUDNN_TYPE_INT64, requested, element_count, array);
  }
  return fail(CUDNN_STATUS_NOT_SUPPORTED, "emulated cuDNN: attribute not readable here");
}

}  // namespace

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t* descriptor) {
  if (descriptor == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null descriptor pointer");
  switch (type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR:
      break;
    default:
      return fail(CUDNN_STATUS_NOT_SUPPORTED, "emulated cuDNN: descriptor type not emulated");
  }
  auto* d = new Descriptor(type);
  d->op.kind = type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ? ConvKind::kBackwardData
               : type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR
                   ? ConvKind::kBackwardFilter
                   : ConvKind::kForward;
  d->norm.backward = type == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR;
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  Descriptor* d = as_desc(descriptor);
  if (d == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "not a live descriptor");
  d->magic = 0;
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* array) {
  Descriptor* d = as_desc(descriptor);
  if (d == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "not a live descriptor");
  if (d->finalized) return fail(CUDNN_STATUS_BAD_PARAM, "descriptor already finalized");
  return set_attr(*d, name, type, count, array);
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  Descriptor* d = as_desc(descriptor);
  if (d == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "not a live descriptor");
  if (d->finalized) return fail(CUDNN_STATUS_BAD_PARAM, "descriptor already finalized");
  const cudnnStatus_t s = finalize(*d);
  d->finalized = s == CUDNN_STATUS_SUCCESS;
  return s;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                       int64_t requested, int64_t* element_count, void* array) {
  const Descriptor* d = as_desc(descriptor);
  if (d == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "not a live descriptor");
  if (!d->finalized) return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "descriptor not finalized");
  return get_attr(*d, name, type, requested, element_count, array);
}
