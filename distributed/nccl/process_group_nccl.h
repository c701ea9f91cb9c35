/*
 * The NCCL process group: collectives on CUDA tensors, one GPU per rank.
 *
 * Bootstrap: NCCL needs every member to hold the same ncclUniqueId before ncclCommInitRank.
 * Rank 0 creates it and the MPI group broadcasts it (a 128-byte tensor): that is the only use
 * of MPI here, after which NCCL talks over NVLink/PCIe/network by itself.
 *
 * Streams: each group owns a non-blocking CUDA stream for its communication.
 *   1. `ready` is recorded on the calling thread's current stream, where Loom's ops run
 *      (ops/cuda/op_stream.h): the collective must not read a tensor before the kernel that
 *      writes it has finished.
 *   2. the communication stream waits for `ready`, then runs the NCCL call, then records `done`.
 *   3. Work::wait() polls `done` (and ncclCommGetAsyncError) until it completes or the group's
 *      timeout passes; on timeout the communicator is aborted (ncclCommAbort), so that no
 *      kernel keeps spinning on a peer that will never answer, and loom::Error is thrown.
 * The tensors of an operation are kept alive by its Work, and by the group until the
 * operation completed, so dropping a Work never frees memory NCCL is still using.
 */
#pragma once

#include <memory>

#include "distributed/process_group.h"

namespace loom::distributed {

// An NCCL group with the same members as `bootstrap` (an MPI group; collective over it). Rank r
// uses CUDA device (local rank) % device_count, where the local rank is Open MPI's
// OMPI_COMM_WORLD_LOCAL_RANK (the world rank when unset). Throws loom::Error when there is no GPU.
std::shared_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap);

}  // namespace loom::distributed
