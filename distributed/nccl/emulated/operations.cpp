/*
 * The NCCL stand-in's operations (nccl.h): collectives and send/recv over the communicator's MPI
 * communicator, and ncclGroupStart/End.
 *
 * Every operation is a PendingOp. A call checks its arguments at once (NCCL reports bad
 * arguments from the call, even inside a group) and queues the operation on this thread's
 * group. When the outermost group ends, or at once outside a group, the queued operations are
 * issued together: each copies its device input to host staging memory, posts non-blocking MPI
 * operations, and only then are all of them waited for. Posting all before waiting is what
 * makes a group of sends and receives complete in any order, as NCCL's group semantics promise.
 * Staging keeps MPI away from device memory, which the emulator maps only while device work
 * runs (core/cuda/emulated/device_memory.h).
 *
 * 16-bit floats have no MPI type: they travel as MPI_UINT16_T, and their reductions are MPI
 * operations that convert to float and round back after each step, as NCCL's half and bfloat16
 * reductions do. ncclAvg is the sum divided by the rank count.
 */
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/half.h"
#include "device_memory.h"
#include "emulated_nccl.h"

namespace loom::emulated_nccl {
namespace {

// One queued operation; see the header comment.
struct PendingOp {
  ncclComm_t comm = nullptr;
  std::string what;                               // "ncclAllReduce(10 x float32) on the communicator ..."
  const void* device_in = nullptr;                // copied to `in` when the operation is issued
  void* device_out = nullptr;                     // where `out` is copied when complete
  std::vector<unsigned char> in, out;             // host staging of the input and the output
  std::function<int(PendingOp&, MPI_Request&)> post;  // posts the MPI operation, once `in` holds the input
  std::function<void(PendingOp&)> after;          // on the host output once complete (ncclAvg)
};

thread_local int g_group_depth = 0;
thread_local std::vector<std::shared_ptr<PendingOp>> g_group;
thread_local ncclResult_t g_group_error = ncclSuccess;  // the first failed call of the open group

size_t element_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* type_name(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "float16";
    case ncclFloat32: return "float32";
    case ncclFloat64: return "float64";
    case ncclBfloat16: return "bfloat16";
    default: return "an fp8 type";
  }
}

MPI_Datatype mpi_type(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_UINT16_T;  // float16, bfloat16: bits only (see the header comment)
  }
}

template <class Narrow, class Combine>
void reduce_16bit(const void* in, void* inout, int length, Combine combine) {
  const auto* a = static_cast<const Narrow*>(in);
  auto* b = static_cast<Narrow*>(inout);
  for (int i = 0; i < length; ++i) b[i] = Narrow(combine(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

template <class Narrow>
struct SixteenBitOps {
  static void sum(void* in, void* inout, int* n, MPI_Datatype*) {
    reduce_16bit<Narrow>(in, inout, *n, [](float a, float b) { return a + b; });
  }
  static void prod(void* in, void* inout, int* n, MPI_Datatype*) {
    reduce_16bit<Narrow>(in, inout, *n, [](float a, float b) { return a * b; });
  }
  static void max(void* in, void* inout, int* n, MPI_Datatype*) {
    reduce_16bit<Narrow>(in, inout, *n, [](float a, float b) { return a > b || a != a ? a : b; });
  }
  static void min(void* in, void* inout, int* n, MPI_Datatype*) {
    reduce_16bit<Narrow>(in, inout, *n, [](float a, float b) { return a < b || a != a ? a : b; });
  }
  static MPI_Op op(ncclRedOp_t red) {
    // Made once, on first use (after MPI_Init); never freed, like MPI's own operations.
    static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
    static std::once_flag once;
    std::call_once(once, [] {
      MPI_Op_create(&sum, 1, &ops[0]);
      MPI_Op_create(&prod, 1, &ops[1]);
      MPI_Op_create(&max, 1, &ops[2]);
      MPI_Op_create(&min, 1, &ops[3]);
    });
    return red == ncclProd ? ops[1] : red == ncclMax ? ops[2] : red == ncclMin ? ops[3] : ops[0];
  }
};

MPI_Op mpi_op(ncclRedOp_t op, ncclDataType_t type) {
  if (type == ncclFloat16) return SixteenBitOps<Half>::op(op);
  if (type == ncclBfloat16) return SixteenBitOps<BFloat16>::op(op);
  switch (op) {
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_SUM;  // ncclSum, and ncclAvg before its division
  }
}

// Each element divided by n in Compute (the element type, or float for the 16-bit floats).
template <class T, class Compute = T>
void divide_all(std::vector<unsigned char>& bytes, int n) {
  auto* v = reinterpret_cast<T*>(bytes.data());
  for (size_t i = 0; i < bytes.size() / sizeof(T); ++i)
    v[i] = T(static_cast<Compute>(v[i]) / static_cast<Compute>(n));
}

// ncclAvg: the summed output divided by the rank count, in the element type (integers truncate).
void divide_by_ranks(std::vector<unsigned char>& bytes, ncclDataType_t type, int n) {
  switch (type) {
    case ncclInt8: divide_all<int8_t>(bytes, n); break;
    case ncclUint8: divide_all<uint8_t>(bytes, n); break;
    case ncclInt32: divide_all<int32_t>(bytes, n); break;
    case ncclUint32: divide_all<uint32_t>(bytes, n); break;
    case ncclInt64: divide_all<int64_t>(bytes, n); break;
    case ncclUint64: divide_all<uint64_t>(bytes, n); break;
    case ncclFloat32: divide_all<float>(bytes, n); break;
    case ncclFloat64: divide_all<double>(bytes, n); break;
    case ncclFloat16: divide_all<Half, float>(bytes, n); break;
    default: divide_all<BFloat16, float>(bytes, n); break;
  }
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// The checks NCCL makes at call time; ncclSuccess or the failure, recorded for ncclGetLastError.
struct Call {
  const char* name;
  ncclComm_t comm;
  ncclResult_t status = ncclSuccess;

  Call(const char* call, ncclComm_t c, cudaStream_t stream)
      : name(call), comm(c), status(check_comm(c, call)) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (ok() && cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
        capture != cudaStreamCaptureStatusNone)
      reject(ncclInvalidUsage,
             "the stream is being captured into a CUDA graph; the emulated NCCL runs each operation over MPI "
             "when "
             "it is issued and cannot capture it (an emulator limit: NCCL on GPUs can)");
  }

  bool ok() const { return status == ncclSuccess; }
  std::string prefix() const { return std::string(name) + " on the " + describe(comm) + ": "; }
  void reject(ncclResult_t result, const std::string& why) {
    if (ok()) status = fail(result, prefix() + why);
  }
  void type(ncclDataType_t t) {
    if (element_size(t) == 0) reject(ncclInvalidArgument, "datatype " + std::to_string(t) + " is not an NCCL type");
    else if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2)
      reject(ncclInvalidArgument, std::string(type_name(t)) + " is not emulated");
  }
  void op(ncclRedOp_t o) {
    if (o < ncclSum || o >= ncclNumOps) reject(ncclInvalidArgument, "reduction op " + std::to_string(o) + " is invalid");
  }
  void rank(int r, const char* which) {
    if (r < 0 || r >= comm->size)
      reject(ncclInvalidArgument, std::string(which) + " " + std::to_string(r) + " is not a rank of the communicator");
  }
  // NCCL's pointer check: the buffer must be device memory (here: inside a live device allocation).
  void device(const void* p, size_t bytes, const char* which) {
    if (!ok() || bytes == 0) return;
    if (bytes > static_cast<size_t>(INT_MAX))
      return reject(ncclInvalidArgument, std::string(which) + ": " + std::to_string(bytes) +
                                             " bytes; the emulation counts in MPI's int, up to 2^31 - 1");
    if (p == nullptr) reject(ncclInvalidArgument, std::string(which) + " is null");
    else if (!loom_emu::is_device_range(p, bytes))
      reject(ncclInvalidArgument, std::string(which) + " " + hex(p) + " (" + std::to_string(bytes) +
                                      " bytes) is not device memory");
  }
};

// Copies device memory to host staging (or back); false with the CUDA error recorded on failure.
bool copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, PendingOp& op, ncclResult_t& status) {
  if (bytes == 0) return true;
  const cudaError_t error = cudaMemcpy(dst, src, bytes, kind);
  if (error == cudaSuccess) return true;
  status = fail(ncclUnhandledCudaError, op.what + ": cudaMemcpy failed: " + cudaGetErrorString(error));
  return false;
}

// Issues the operations of a finished group (see the header comment) and waits for them.
ncclResult_t run(std::vector<std::shared_ptr<PendingOp>> ops) {
  std::vector<MPI_Request> requests;
  std::vector<ncclComm_t> comms;
  std::string what;
  ncclResult_t status = ncclSuccess;
  for (auto& op : ops) {
    // The input is read when the operation is issued, which is when NCCL's kernel would read it.
    if (!copy(op->in.data(), op->device_in, op->in.size(), cudaMemcpyDeviceToHost, *op, status)) break;
    requests.emplace_back();
    const int code = op->post(*op, requests.back());
    if (code != MPI_SUCCESS) {
      status = fail(ncclSystemError, op->what + ": " + mpi_error(code));
      break;
    }
    comms.push_back(op->comm);
    what += (what.empty() ? "" : ", ") + op->what;
  }
  if (status == ncclSuccess) status = wait_all(requests, comms, what);
  if (status != ncclSuccess) {
    for (auto& op : ops) keep_forever(op);  // MPI may still write their staging buffers
    return status;
  }
  for (auto& op : ops) {
    if (op->after) op->after(*op);
    if (!copy(op->device_out, op->out.data(), op->out.size(), cudaMemcpyHostToDevice, *op, status)) return status;
  }
  return ncclSuccess;
}

// Queues `op` on the open group, or runs it at once outside a group.
ncclResult_t issue(Call& call, std::shared_ptr<PendingOp> op) {
  if (!call.ok()) {
    if (g_group_depth > 0 && g_group_error == ncclSuccess) g_group_error = call.status;
    return call.status;
  }
  op->comm = call.comm;
  g_group.push_back(std::move(op));
  if (g_group_depth > 0) return ncclSuccess;
  return run(std::exchange(g_group, {}));
}

std::shared_ptr<PendingOp> staged(Call& call, const void* input, size_t in_bytes, void* output, size_t out_bytes,
                                  const std::string& shape) {
  auto op = std::make_shared<PendingOp>();
  op->what = std::string(call.name) + "(" + shape + ") on the " + (call.ok() ? describe(call.comm) : "communicator");
  op->device_in = input;
  op->device_out = output;
  op->in.resize(in_bytes);
  op->out.resize(out_bytes);
  return op;
}

std::string shape(size_t count, ncclDataType_t type) { return std::to_string(count) + " x " + type_name(type); }

}  // namespace
}  // namespace loom::emulated_nccl

using namespace loom::emulated_nccl;

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Call call("ncclAllReduce", comm, stream);
  call.type(datatype);
  call.op(op);
  const size_t bytes = count * element_size(datatype);
  call.device(sendbuff, bytes, "sendbuff");
  call.device(recvbuff, bytes, "recvbuff");
  auto pending = staged(call, sendbuff, bytes, recvbuff, bytes, shape(count, datatype));
  pending->post = [=](PendingOp& self, MPI_Request& request) {
    return MPI_Iallreduce(self.in.data(), self.out.data(), static_cast<int>(count), mpi_type(datatype),
                          mpi_op(op, datatype), self.comm->mpi, &request);
  };
  if (op == ncclAvg) pending->after = [=](PendingOp& self) { divide_by_ranks(self.out, datatype, self.comm->size); };
  return issue(call, pending);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  Call call("ncclBroadcast", comm, stream);
  call.type(datatype);
  if (call.ok()) call.rank(root, "root");
  const size_t bytes = count * element_size(datatype);
  const bool is_root = call.ok() && comm->rank == root;
  if (is_root) call.device(sendbuff, bytes, "sendbuff");
  call.device(recvbuff, bytes, "recvbuff");
  // Only the root's input is read; everyone's output is written (the root's too).
  auto pending = staged(call, is_root ? sendbuff : nullptr, is_root ? bytes : 0, recvbuff, bytes, shape(count, datatype));
  pending->post = [=](PendingOp& self, MPI_Request& request) {
    if (is_root) self.out = self.in;
    return MPI_Ibcast(self.out.data(), static_cast<int>(count), mpi_type(datatype), root, self.comm->mpi, &request);
  };
  return issue(call, pending);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  Call call("ncclReduce", comm, stream);
  call.type(datatype);
  call.op(op);
  if (call.ok()) call.rank(root, "root");
  const size_t bytes = count * element_size(datatype);
  const bool is_root = call.ok() && comm->rank == root;
  call.device(sendbuff, bytes, "sendbuff");
  if (is_root) call.device(recvbuff, bytes, "recvbuff");  // only the root's output is written
  auto pending = staged(call, sendbuff, bytes, is_root ? recvbuff : nullptr, is_root ? bytes : 0,
                        shape(count, datatype));
  pending->post = [=](PendingOp& self, MPI_Request& request) {
    return MPI_Ireduce(self.in.data(), is_root ? self.out.data() : nullptr, static_cast<int>(count),
                       mpi_type(datatype), mpi_op(op, datatype), root, self.comm->mpi, &request);
  };
  if (op == ncclAvg && is_root)
    pending->after = [=](PendingOp& self) { divide_by_ranks(self.out, datatype, self.comm->size); };
  return issue(call, pending);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  Call call("ncclAllGather", comm, stream);
  call.type(datatype);
  const size_t bytes = sendcount * element_size(datatype);
  const size_t ranks = call.ok() ? static_cast<size_t>(comm->size) : 0;
  call.device(sendbuff, bytes, "sendbuff");
  call.device(recvbuff, bytes * ranks, "recvbuff");
  auto pending = staged(call, sendbuff, bytes, recvbuff, bytes * ranks, shape(sendcount, datatype) + " per rank");
  pending->post = [=](PendingOp& self, MPI_Request& request) {
    return MPI_Iallgather(self.in.data(), static_cast<int>(sendcount), mpi_type(datatype), self.out.data(),
                          static_cast<int>(sendcount), mpi_type(datatype), self.comm->mpi, &request);
  };
  return issue(call, pending);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  Call call("ncclReduceScatter", comm, stream);
  call.type(datatype);
  call.op(op);
  const size_t bytes = recvcount * element_size(datatype);
  const size_t ranks = call.ok() ? static_cast<size_t>(comm->size) : 0;
  call.device(sendbuff, bytes * ranks, "sendbuff");
  call.device(recvbuff, bytes, "recvbuff");
  auto pending = staged(call, sendbuff, bytes * ranks, recvbuff, bytes, shape(recvcount, datatype) + " per rank");
  pending->post = [=](PendingOp& self, MPI_Request& request) {
    return MPI_Ireduce_scatter_block(self.in.data(), self.out.data(), static_cast<int>(recvcount),
                                     mpi_type(datatype), mpi_op(op, datatype), self.comm->mpi, &request);
  };
  if (op == ncclAvg) pending->after = [=](PendingOp& self) { divide_by_ranks(self.out, datatype, self.comm->size); };
  return issue(call, pending);
}

// Point-to-point: one MPI tag for all, so that the messages of a pair match in issue order (MPI
// does not let messages of one tag overtake each other), which is NCCL's matching rule.
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  Call call("ncclSend", comm, stream);
  call.type(datatype);
  if (call.ok()) call.rank(peer, "peer");
  const size_t bytes = count * element_size(datatype);
  call.device(sendbuff, bytes, "sendbuff");
  auto pending = staged(call, sendbuff, bytes, nullptr, 0, shape(count, datatype) + " to rank " + std::to_string(peer));
  pending->post = [=](PendingOp& self, MPI_Request& request) {
    return MPI_Isend(self.in.data(), static_cast<int>(bytes), MPI_BYTE, peer, 0, self.comm->mpi, &request);
  };
  return issue(call, pending);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  Call call("ncclRecv", comm, stream);
  call.type(datatype);
  if (call.ok()) call.rank(peer, "peer");
  const size_t bytes = count * element_size(datatype);
  call.device(recvbuff, bytes, "recvbuff");
  auto pending =
      staged(call, nullptr, 0, recvbuff, bytes, shape(count, datatype) + " from rank " + std::to_string(peer));
  pending->post = [=](PendingOp& self, MPI_Request& request) {
    return MPI_Irecv(self.out.data(), static_cast<int>(bytes), MPI_BYTE, peer, 0, self.comm->mpi, &request);
  };
  return issue(call, pending);
}

ncclResult_t ncclGroupStart() {
  if (g_group_depth++ == 0) g_group_error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: no group was started (ncclGroupStart)");
  if (--g_group_depth > 0) return ncclSuccess;  // nested: the outermost End issues the group
  auto ops = std::exchange(g_group, {});
  // NCCL drops a group in which a call failed, and reports the failure again here.
  if (g_group_error != ncclSuccess) return g_group_error;
  return run(std::move(ops));
}
