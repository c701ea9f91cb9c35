/*
 * Internal to ops/cuda: what Loom's cuDNN graph (backend) API wrappers share (cudnn_conv.cpp,
 * cudnn_batch_norm.cpp). A wrapper builds its tensors and its one operation node; this file
 * turns the node into an operation graph, asks the heuristic (mode A) for engine
 * configurations, finalizes the first one whose numerics Loom accepts into a plan, and executes
 * plans with a variant pack and a workspace from the caching allocator. The same code runs on a
 * GPU and in the emulated build (core/cuda/emulated/cudnn_graph.h).
 *
 * Which engine configurations are taken: cuDNN lists, per engine, numerical notes. Engines that
 * reduce in reduced precision, or are not deterministic, are always skipped, because Loom's CUDA
 * kernels give the same bits on every run and sum in float. With `float32_exact` (float32 data
 * and TF32 not allowed: set_allow_tf32, as for matmuls), engines that down-convert the inputs or
 * use tensor cores are skipped too.
 *
 * Plans are cached per problem for the life of the process (cudnn_run_cached) and never
 * destroyed: at exit the runtime may be gone before the descriptors could be freed, and a map
 * destroyed without freeing them would leak them. Call everything else here with cudnn_mutex()
 * held.
 */
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/cuda/cudnn_handle.h"

namespace loom::cuda {

// Whether a status means "cuDNN does not run this" (the caller falls back) rather than a failure.
bool cudnn_unsupported(cudnnStatus_t s);

// cuDNN's type for a Loom dtype; false for dtypes cuDNN has no data type for here.
bool cudnn_type(DType t, cudnnDataType_t& out);

// The largest power of two up to 16 that divides the address: the byte alignment a tensor
// descriptor promises for the pointers it will be given.
int64_t cudnn_alignment(const void* p);

enum class CudnnOrder { kNCHW, kNHWC };

// Whether the 4-D t's strides are the packed ones of `order` (size-1 dims, whose stride is never
// used, ignored), and those packed strides: cuDNN's engines match layouts by strides, so size-1
// dims are given the packed layout's stride.
bool cudnn_packed_as(const Tensor& t, CudnnOrder order, std::array<int64_t, 4>& strides);

// The descriptors of a plan being built: destroyed unless released to a found plan (also when a
// cuDNN call throws half way).
class CudnnDescriptors {
 public:
  CudnnDescriptors() = default;
  CudnnDescriptors(const CudnnDescriptors&) = delete;
  CudnnDescriptors& operator=(const CudnnDescriptors&) = delete;
  ~CudnnDescriptors();
  // Creates a descriptor of `type` owned here.
  cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type);
  std::vector<cudnnBackendDescriptor_t> release() { return std::exchange(owned_, {}); }

 private:
  std::vector<cudnnBackendDescriptor_t> owned_;
};

// cudnnBackendSetAttribute, throwing loom::Error on failure.
void cudnn_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
               int64_t count, const void* values);

// A finalized tensor descriptor. `by_value`: a host scalar, whose variant-pack pointer is host
// memory (epsilon, a momentum).
struct CudnnTensorSpec {
  std::vector<int64_t> sizes, strides;
  int64_t alignment = 16;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  bool by_value = false;
};
cudnnBackendDescriptor_t cudnn_tensor(CudnnDescriptors& owner, const CudnnTensorSpec& spec, int64_t uid);

// Finalizes `op` (a built operation node); false when cuDNN does not run it.
bool cudnn_finalize_op(cudnnBackendDescriptor_t op, const char* what);

struct CudnnPlan {
  bool found = false;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;
  // Every descriptor the plan was built from. cudnn-frontend keeps this chain alive as long as
  // the plan (plan -> engine config -> engine -> graph -> operation -> tensors), so Loom does too.
  std::vector<cudnnBackendDescriptor_t> built_from;
};

// The graph of one finalized operation `op` and the first acceptable plan for it (found ==
// false when no engine runs it). Takes the descriptors of `owner` into the plan when found.
CudnnPlan cudnn_plan_for(cudnnHandle_t handle, CudnnDescriptors& owner, cudnnBackendDescriptor_t op,
                         bool float32_exact);

// Runs a found plan: one pointer per unique id (device memory, or host memory for by-value
// tensors), with a workspace from the caching allocator, on the handle's stream.
void cudnn_execute(cudnnHandle_t handle, const CudnnPlan& plan, const std::vector<int64_t>& uids,
                   const std::vector<void*>& pointers);

// What the wrappers do per call: takes cudnn_mutex(), finds the plan cached for (the current
// device, `problem`) or builds it with `build` on first use, and executes it with `uids` and
// `pointers` on `stream`. False, running nothing, when the problem has no plan. `problem` must
// tell apart everything a plan depends on (the wrapper, shapes, strides, types, alignments).
bool cudnn_run_cached(const std::vector<int64_t>& problem,
                      const std::function<CudnnPlan(cudnnHandle_t)>& build, const std::vector<int64_t>& uids,
                      const std::vector<void*>& pointers, cudaStream_t stream);

}  // namespace loom::cuda
