/*
 * What the two halves of the NCCL stand-in share (nccl.h says what the stand-in is):
 * communicators.cpp makes and ends communicators, operations.cpp runs the collectives and
 * point-to-point operations. Not included outside this folder.
 */
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "nccl.h"

// An emulated communicator: an MPI communicator whose ranks are the NCCL ranks.
struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int device = 0;                          // the CUDA device current when it was made
  ncclResult_t async_error = ncclSuccess;  // set when an operation did not complete in time
  bool aborted = false;
};

namespace loom::emulated_nccl {

// Records `message` for ncclGetLastError and returns `result`: every failing call returns
// through it, so the process group's error names the cause and not only the code.
ncclResult_t fail(ncclResult_t result, const std::string& message);

// ncclSuccess, or why `comm` cannot be used by `call` (null, aborted).
ncclResult_t check_comm(ncclComm_t comm, const char* call);

// "communicator (rank 1 of 4, device 0)": for messages.
std::string describe(ncclComm_t comm);

// MPI's text for an error code.
std::string mpi_error(int code);

// How long an operation may wait for its peers (LOOM_EMULATED_NCCL_TIMEOUT_S, default 300 s).
std::chrono::milliseconds timeout();

// Waits until every request completed, or the timeout passed. On timeout every communicator in
// `comms` gets ncclRemoteError as its asynchronous error, the requests are left pending (their
// buffers must then never be freed) and ncclRemoteError is returned, naming `what`.
ncclResult_t wait_all(std::vector<MPI_Request>& requests, const std::vector<ncclComm_t>& comms,
                      const std::string& what);

// Keeps `owner` (buffers that pending MPI requests may still write, an aborted communicator)
// alive until the process ends: after a timeout or an abort nothing may free them.
void keep_forever(std::shared_ptr<void> owner);

}  // namespace loom::emulated_nccl
