/*
 * The NCCL stand-in of the emulated-CUDA build (docs/cuda-emulation.md, "NCCL"): the subset of
 * NCCL 2.28's API that Loom calls, with NCCL's types and values, implemented over MPI so that
 * the NCCL process group (distributed/nccl/process_group_nccl.cpp, unchanged) runs the
 * distributed tests on emulated GPUs, one process per GPU, under mpirun.
 *
 * What it keeps of NCCL's contract:
 *   - communicators: ncclGetUniqueId on one rank, the id shared out of band, ncclCommInitRank on
 *     every member (the rank that made the id must be a member, as in every NCCL program);
 *     ncclCommSplit (NCCL_SPLIT_NOCOLOR opts out, key orders the new ranks); Destroy and Abort;
 *   - operations take device buffers only (a host pointer is ncclInvalidArgument, as NCCL's
 *     pointer check makes it), counts in elements, NCCL's in-place rules;
 *   - ordering: operations on a communicator run in the order they are issued on every rank;
 *     send/recv between a pair match in issue order (NCCL has no tags);
 *   - ncclGroupStart/End: operations between them (nested groups count) are only issued at the
 *     outermost End, all at once, so a group of sends and receives that would deadlock one by
 *     one (every rank sending first) completes, as with NCCL;
 *   - errors: NCCL's result codes, ncclGetErrorString, and ncclGetLastError's message naming the
 *     call, the communicator and the argument.
 *
 * What it does not model: asynchrony. The emulator runs stream work when it is enqueued (see
 * cuda_runtime_api.h), and so does this stand-in: a call returns when its operation is complete
 * on this rank. A collective that a peer never joins therefore blocks the calling thread; after
 * LOOM_EMULATED_NCCL_TIMEOUT_S seconds (default 300) it returns ncclRemoteError and sets the
 * communicator's asynchronous error, where real NCCL would leave a kernel spinning for the
 * process group's watchdog to abort.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION_CODE (NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH)

typedef struct ncclComm* ncclComm_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_SPLIT_NOCOLOR -1

// Only blocking communicators are emulated: a config must be nullptr or have blocking != 0.
typedef struct {
  int blocking;
} ncclConfig_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

ncclResult_t ncclGetVersion(int* version);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);

ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
