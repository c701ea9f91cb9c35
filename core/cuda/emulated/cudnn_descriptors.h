/*
 * Internal to the emulated cuDNN (cudnn_descriptors.cpp, cudnn_convolution.cpp): what each
 * backend descriptor holds. A descriptor given as an attribute is copied, as its value at that
 * moment, so that later changes to (or the destruction of) the original do not reach a finalized
 * graph or plan; cuDNN documents the same for finalized descriptors.
 */
#pragma once

#include <cublas_v2.h>  // cudaDataType, the element types of element_io.h
#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <vector>

namespace loom_emu::cudnn {

// Marks a live descriptor, so that a stray pointer is CUDNN_STATUS_BAD_PARAM, not a crash.
constexpr uint32_t kLiveMagic = 0x4c6f6f6d;

struct TensorDesc {
  int32_t data_type = -1;  // cudnnDataType_t; -1: unset
  std::vector<int64_t> dims, strides;
  int64_t uid = 0;
  bool uid_set = false;
  int64_t alignment = 0;  // bytes; 0: unset
  bool is_virtual = false;
  bool by_value = false;  // a host scalar (epsilon, momentum): the variant pack points at host memory
};

struct ConvDesc {
  int32_t comp_type = -1;
  int32_t mode = -1;  // cudnnConvolutionMode_t
  int64_t spatial_dims = 0;
  std::vector<int64_t> dilations, strides, pre_paddings, post_paddings;
};

enum class ConvKind { kForward, kBackwardData, kBackwardFilter };

// One convolution node. Whatever its kind, x is the [N, C, H, W] input (dx for backward data),
// w the [K, C / groups, R, S] filter (dw for backward filter) and y the [N, K, P, Q] output (dy
// for both backward kinds).
struct ConvOp {
  ConvKind kind = ConvKind::kForward;
  double alpha = 1.0, beta = 0.0;
  bool has_conv = false, has_x = false, has_w = false, has_y = false;
  ConvDesc conv;
  TensorDesc x, w, y;
  int64_t groups = 1;  // set by finalize: C / w's C
};

// The tensors of a normalization node, by role. Forward: x, scale, bias, epsilon -> y, and in
// training mean, inv_variance (written) and, optionally, exp_avg_factor with the input and output
// running statistics; in inference mean and inv_variance are read. Backward: x, dy, scale, mean,
// inv_variance -> dx, dscale, dbias (epsilon optional: the saved statistics already hold it).
enum NormRole {
  kNormX,
  kNormY,
  kNormMean,
  kNormInvVariance,
  kNormScale,
  kNormBias,
  kNormEpsilon,
  kNormExpAvgFactor,
  kNormInRunningMean,
  kNormInRunningVar,
  kNormOutRunningMean,
  kNormOutRunningVar,
  kNormDy,
  kNormDx,
  kNormDscale,
  kNormDbias,
  kNormRoles
};

struct NormOp {
  bool backward = false;
  int32_t mode = -1;   // cudnnBackendNormMode_t
  int32_t phase = -1;  // cudnnBackendNormFwdPhase_t (forward only)
  std::array<TensorDesc, kNormRoles> tensors;
  std::array<bool, kNormRoles> has{};
};

// One operation: a convolution or a normalization node.
struct Graph {
  bool has_handle = false;
  std::vector<ConvOp> ops;
  std::vector<NormOp> norms;
};

// The emulator has one engine, global index 0: the reference convolution.
struct Engine {
  bool has_graph = false;
  Graph graph;
  int64_t index = -1;
};

struct Descriptor {
  uint32_t magic = kLiveMagic;
  cudnnBackendDescriptorType_t type;
  bool finalized = false;

  TensorDesc tensor;                            // TENSOR
  ConvDesc conv;                                // CONVOLUTION
  ConvOp op;                                    // OPERATION_CONVOLUTION_*
  NormOp norm;                                  // OPERATION_NORM_*
  Graph graph;                                  // OPERATIONGRAPH
  int32_t heur_mode = CUDNN_HEUR_MODE_INSTANT;  // ENGINEHEUR (with graph, has_graph)
  bool has_graph = false;
  Engine engine;  // ENGINE; ENGINECFG and EXECUTION_PLAN: the chosen engine
  bool has_engine = false;
  int64_t workspace_bytes = 0;     // ENGINECFG, EXECUTION_PLAN
  cudnnHandle_t handle = nullptr;  // EXECUTION_PLAN
  std::vector<int64_t> uids;       // VARIANT_PACK
  std::vector<void*> pointers;
  void* workspace = nullptr;

  explicit Descriptor(cudnnBackendDescriptorType_t t) : type(t) {}
};

// Records `message` as this thread's last error (cudnnGetLastErrorString) and returns `status`.
cudnnStatus_t fail(cudnnStatus_t status, const char* message);

// Whether the reference engines run `g` (one 2-D convolution whose tensors share a type of
// FLOAT, HALF, BFLOAT16 with FLOAT compute, or DOUBLE with DOUBLE compute; or one batch norm, see
// norm_engine_supports); SUCCESS or why not.
cudnnStatus_t engine_supports(const Graph& g);

// Whether the reference batch norm runs `op` (cudnn_normalization.cpp); SUCCESS or why not.
cudnnStatus_t norm_engine_supports(const NormOp& op);

// Runs the plan's batch norm with one pointer per role (null for an absent role; by-value
// tensors point at host scalars) and the plan's workspace (per channel, two double sums).
// Checked by the caller.
cudnnStatus_t run_batch_norm(const NormOp& op, const std::array<void*, kNormRoles>& pointers,
                             void* workspace);

// The element type of a cudnnDataType_t (FLOAT, DOUBLE, HALF, BFLOAT16).
cudaDataType element_type(int32_t cudnn_type);

// Elements of a tensor and one past the largest offset its strides reach.
int64_t numel(const TensorDesc& t);
int64_t extent(const TensorDesc& t);

// Bytes of workspace the reference engine asks for: the output in the compute type.
int64_t engine_workspace_bytes(const Graph& g);

// Runs the plan's convolution with the variant pack's pointers (checked by the caller).
cudnnStatus_t run_convolution(const ConvOp& op, void* x, void* w, void* y, void* workspace);

}  // namespace loom_emu::cudnn
