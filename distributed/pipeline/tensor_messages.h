/*
 * Tensors whose shape the receiver does not know yet, between pipeline stages: each goes as two
 * messages on one tag, its shape (a header of kMaxTensorRank + 1 int64: the rank, then the
 * sizes), then its float32 data. Messages of one tag between two ranks arrive in the order they
 * were sent, so the receiver waits for the header, allocates, then waits for the data. Both
 * messages live on the group's device (NCCL sends only CUDA tensors); the header is written and
 * read on the host. Used by PipelineStageRunner and by `train --pp`'s evaluation.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group.h"

namespace loom::distributed::pipeline {

inline constexpr int64_t kMaxTensorRank = 8;

// Posts the shape header and the data of `t` (float32, contiguous, rank <= kMaxTensorRank, on
// group.device()) to `peer`; the returned works, and `t`, must live until they complete.
std::vector<WorkPtr> send_tensor(ProcessGroup& group, const Tensor& t, int peer, int tag);

// Receives a tensor sent by send_tensor from `peer` on `tag`: waits for its header, then its data.
Tensor recv_tensor(ProcessGroup& group, int peer, int tag);

}  // namespace loom::distributed::pipeline
