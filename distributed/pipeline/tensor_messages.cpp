/* Tensors of unknown shape between pipeline stages (see tensor_messages.h). */
#include "distributed/pipeline/tensor_messages.h"

#include "core/error.h"
#include "ops/ops.h"

namespace loom::distributed::pipeline {

std::vector<WorkPtr> send_tensor(ProcessGroup& group, const Tensor& t, int peer, int tag) {
  LOOM_CHECK(t.dim() <= kMaxTensorRank, "pipeline: cannot send a tensor of rank ", t.dim());
  // The receiver allocates float32 (the header carries the shape only).
  LOOM_CHECK(t.dtype() == kFloat32, "pipeline: stages exchange float32 activations and gradients, got ", t.dtype());
  LOOM_CHECK(t.device() == group.device(), "pipeline: a stage on ", t.device(), " sends over a ", group.backend_name(),
             " group, whose tensors live on ", group.device(), "; move the stage to ", group.device());
  Tensor header = zeros({kMaxTensorRank + 1}, TensorOptions(kInt64));
  auto* h = header.data_ptr<int64_t>();
  h[0] = t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) h[i + 1] = t.size(i);
  return {group.send_async(header.to(group.device()), peer, tag), group.send_async(t, peer, tag)};
}

Tensor recv_tensor(ProcessGroup& group, int peer, int tag) {
  Tensor received = zeros({kMaxTensorRank + 1}, TensorOptions(kInt64).device(group.device()));
  group.recv(received, peer, tag);  // waits for the shape: the payload's buffer is allocated from it
  const Tensor header = received.to(kCPU);
  const auto* h = header.data_ptr<int64_t>();
  LOOM_CHECK(h[0] >= 0 && h[0] <= kMaxTensorRank, "pipeline: received a bad shape header from rank ", peer);
  DimVector sizes;
  for (int64_t i = 0; i < h[0]; ++i) sizes.push_back(h[i + 1]);
  Tensor t = empty(sizes, TensorOptions(kFloat32).device(group.device()));
  group.recv(t, peer, tag);  // waits for the payload, posted right after the header
  return t;
}

}  // namespace loom::distributed::pipeline
