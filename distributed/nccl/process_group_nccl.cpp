/* The NCCL process group (see process_group_nccl.h). */
#include "distributed/nccl/process_group_nccl.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/cuda.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "distributed/nccl/nccl_check.h"
#include "ops/ops.h"

namespace loom::distributed {
namespace {

ncclDataType_t nccl_dtype(DType dtype, const char* op) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int8: return ncclInt8;
    case DType::UInt8: return ncclUint8;
    case DType::Bool: return ncclUint8;  // one byte, 0 or 1; Max and Min are logical or and and
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
  }
  LOOM_FAIL(op, ": dtype ", dtype, " is not supported by NCCL");
}

ncclRedOp_t nccl_op(ReduceOp op, DType dtype, const char* name) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Avg:
      // ncclAvg divides in the tensor's type; an integer mean would be truncated silently.
      LOOM_CHECK(is_floating(dtype), name, ": ReduceOp::Avg needs a floating-point tensor, got ", dtype,
                 "; reduce with Sum and divide");
      return ncclAvg;
  }
  LOOM_FAIL(name, ": unknown reduce op");
}

int local_rank(int world_rank) {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return local ? std::atoi(local) : world_rank;
}

// One enqueued NCCL operation: its completion event and the tensors it uses. Shared by its Work
// and by the group's list of operations in flight (which holds no reference back to the group).
struct InFlight {
  cudaEvent_t done = nullptr;
  std::vector<Tensor> tensors;  // alive until the operation completed
  bool completed = false;

  explicit InFlight(std::vector<Tensor> t) : tensors(std::move(t)) {
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  ~InFlight() { (void)cudaEventDestroy(done); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  bool poll() {
    if (!completed && cudaEventQuery(done) == cudaSuccess) mark_completed();
    return completed;
  }
  void mark_completed() {
    completed = true;
    tensors.clear();
  }
};

class ProcessGroupNccl;

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<ProcessGroupNccl> group, std::string what, std::shared_ptr<InFlight> op)
      : group_(std::move(group)), what_(std::move(what)), op_(std::move(op)) {}
  void wait() override;
  bool is_completed() override { return op_->poll(); }

 private:
  std::shared_ptr<ProcessGroupNccl> group_;
  std::string what_;
  std::shared_ptr<InFlight> op_;
};

class ProcessGroupNccl final : public ProcessGroup {
 public:
  ProcessGroupNccl(int rank, int size, std::vector<int> world_ranks, int device, ncclComm_t comm)
      : ProcessGroup(rank, size, std::move(world_ranks)), device_(device), comm_(comm) {
    LOOM_CUDA_CHECK(cudaSetDevice(device_));
    // Non-blocking: the communication stream must not serialise with the default stream
    // implicitly; the ordering we need is made explicit with events (header comment).
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~ProcessGroupNccl() override {
    if (!aborted_) (void)ncclCommDestroy(comm_);
    (void)cudaStreamDestroy(stream_);
  }

  std::string backend_name() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }

  WorkPtr native_broadcast_async(const Tensor& t, int root) override {
    check_tensor(t, "broadcast");
    check_root(root, "broadcast");
    return launch("broadcast", {t}, [&] {
      LOOM_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_dtype(t.dtype(), "broadcast"), root,
                                    comm_, stream_));
    });
  }

  WorkPtr native_reduce_async(const Tensor& t, int root, ReduceOp op) override {
    check_tensor(t, "reduce");
    check_root(root, "reduce");
    return launch("reduce", {t}, [&] {
      LOOM_NCCL_CHECK(ncclReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_dtype(t.dtype(), "reduce"),
                                 nccl_op(op, t.dtype(), "reduce"), root, comm_, stream_));
    });
  }

  WorkPtr native_scatter_async(const Tensor& input, const Tensor& output, int root) override {
    check_tensor(output, "scatter");
    check_root(root, "scatter");
    if (rank() == root) check_blocks(input, output, "scatter", "input");
    const size_t bytes = output.nbytes();
    return launch("scatter", {input, output}, [&] {
      // NCCL has no scatter: the root sends block i to rank i inside one group call.
      LOOM_NCCL_CHECK(ncclGroupStart());
      if (rank() == root) {
        for (int peer = 0; peer < size(); ++peer) {
          const char* block = static_cast<const char*>(input.data_ptr()) + peer * bytes;
          if (peer == root) {
            LOOM_CUDA_CHECK(cudaMemcpyAsync(output.data_ptr(), block, bytes, cudaMemcpyDeviceToDevice, stream_));
          } else {
            LOOM_NCCL_CHECK(ncclSend(block, bytes, ncclUint8, peer, comm_, stream_));
          }
        }
      } else {
        LOOM_NCCL_CHECK(ncclRecv(output.data_ptr(), bytes, ncclUint8, root, comm_, stream_));
      }
      LOOM_NCCL_CHECK(ncclGroupEnd());
    });
  }

  WorkPtr native_gather_async(const Tensor& input, const Tensor& output, int root) override {
    check_tensor(input, "gather");
    check_root(root, "gather");
    if (rank() == root) check_blocks(output, input, "gather", "output");
    const size_t bytes = input.nbytes();
    return launch("gather", {input, output}, [&] {
      LOOM_NCCL_CHECK(ncclGroupStart());
      if (rank() == root) {
        for (int peer = 0; peer < size(); ++peer) {
          char* block = static_cast<char*>(output.data_ptr()) + peer * bytes;
          if (peer == root) {
            LOOM_CUDA_CHECK(cudaMemcpyAsync(block, input.data_ptr(), bytes, cudaMemcpyDeviceToDevice, stream_));
          } else {
            LOOM_NCCL_CHECK(ncclRecv(block, bytes, ncclUint8, peer, comm_, stream_));
          }
        }
      } else {
        LOOM_NCCL_CHECK(ncclSend(input.data_ptr(), bytes, ncclUint8, root, comm_, stream_));
      }
      LOOM_NCCL_CHECK(ncclGroupEnd());
    });
  }

  WorkPtr native_all_to_all_async(const Tensor& input, const Tensor& output) override {
    check_tensor(input, "all_to_all");
    check_tensor(output, "all_to_all");
    LOOM_CHECK(input.sizes() == output.sizes() && input.dtype() == output.dtype() && input.numel() % size() == 0,
               "all_to_all: expected input and output of one shape and dtype, with dim 0 divisible by the group size ",
               size(), ", got ", input.sizes(), " ", input.dtype(), " and ", output.sizes(), " ", output.dtype(), " on ",
               describe());
    const size_t bytes = input.nbytes() / static_cast<size_t>(size());
    return launch("all_to_all", {input, output}, [&] {
      // Every pair exchanges one block; inside one group call NCCL schedules them without deadlock.
      LOOM_NCCL_CHECK(ncclGroupStart());
      for (int peer = 0; peer < size(); ++peer) {
        const char* send = static_cast<const char*>(input.data_ptr()) + peer * bytes;
        char* recv = static_cast<char*>(output.data_ptr()) + peer * bytes;
        LOOM_NCCL_CHECK(ncclSend(send, bytes, ncclUint8, peer, comm_, stream_));
        LOOM_NCCL_CHECK(ncclRecv(recv, bytes, ncclUint8, peer, comm_, stream_));
      }
      LOOM_NCCL_CHECK(ncclGroupEnd());
    });
  }

  // NCCL matches point-to-point operations between a pair in the order they are issued; it has
  // no tags, so `tag` is accepted for the API's sake and the order must match on both sides.
  WorkPtr native_send_async(const Tensor& t, int dst, int /*tag*/) override {
    check_tensor(t, "send");
    check_peer(dst, "send");
    count_sent(t.nbytes());
    return launch("send", {t}, [&] {
      LOOM_NCCL_CHECK(ncclSend(t.data_ptr(), t.nbytes(), ncclUint8, dst, comm_, stream_));
    });
  }

  WorkPtr native_recv_async(const Tensor& t, int src, int /*tag*/) override {
    check_tensor(t, "recv");
    check_peer(src, "recv");
    return launch("recv", {t}, [&] {
      LOOM_NCCL_CHECK(ncclRecv(t.data_ptr(), t.nbytes(), ncclUint8, src, comm_, stream_));
    });
  }

  // A one-element all-reduce: it completes on a rank only when every rank has entered it.
  WorkPtr barrier_async() override {
    Tensor token = zeros({1}, TensorOptions(DType::Float32).device(device()));
    return launch("barrier", {token}, [&] {
      LOOM_NCCL_CHECK(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, comm_, stream_));
    });
  }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    std::vector<char> seen(static_cast<size_t>(size()), 0);
    int my_index = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const int r = ranks[i];
      LOOM_CHECK(r >= 0 && r < size() && !seen[static_cast<size_t>(r)], "new_group: rank ", r,
                 " is out of range or repeated for ", describe());
      seen[static_cast<size_t>(r)] = 1;
      if (r == rank()) my_index = static_cast<int>(i);
    }
    // Collective over this communicator: members get color 0 and their position as key, so the
    // new ranks follow the order of `ranks`; the others opt out and get no communicator.
    ncclComm_t sub = nullptr;
    LOOM_NCCL_CHECK(ncclCommSplit(comm_, my_index >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, std::max(my_index, 0), &sub,
                                  nullptr));
    if (my_index < 0) return nullptr;
    std::vector<int> world;
    for (int r : ranks) world.push_back(world_ranks()[static_cast<size_t>(r)]);
    auto group = std::make_shared<ProcessGroupNccl>(my_index, static_cast<int>(ranks.size()), std::move(world),
                                                    device_, sub);
    group->set_timeout(timeout());
    return group;
  }

  // Waits (with the group's timeout) for one operation; aborts the communicator on timeout.
  void wait_for(cudaEvent_t done, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    while (true) {
      cudaError_t status = cudaEventQuery(done);
      if (status == cudaSuccess) return;
      LOOM_CHECK(status == cudaErrorNotReady, what, " failed on ", describe(), ": CUDA ", cudaGetErrorString(status));
      ncclResult_t async_error = ncclSuccess;
      LOOM_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
      LOOM_CHECK(async_error == ncclSuccess || async_error == ncclInProgress, what, " failed on ", describe(),
                 ": NCCL ", ncclGetErrorString(async_error));
      if (std::chrono::steady_clock::now() > deadline) {
        abort();
        LOOM_FAIL(what, " timed out after ", timeout().count(), " ms on ", describe(),
                  ": a rank may have skipped it or died; the communicator was aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void forget_completed() {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!pending_.empty() && pending_.front()->poll()) pending_.pop_front();
  }

 protected:
  WorkPtr native_all_reduce_async(const Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce");
    return launch("all_reduce", {t}, [&] {
      LOOM_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_dtype(t.dtype(), "all_reduce"),
                                    nccl_op(op, t.dtype(), "all_reduce"), comm_, stream_));
    });
  }

  WorkPtr native_all_gather_async(const Tensor& input, const Tensor& output) override {
    check_tensor(input, "all_gather");
    check_blocks(output, input, "all_gather", "output");
    return launch("all_gather", {input, output}, [&] {
      LOOM_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(),
                                    nccl_dtype(input.dtype(), "all_gather"), comm_, stream_));
    });
  }

  WorkPtr native_reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op) override {
    check_tensor(output, "reduce_scatter");
    check_blocks(input, output, "reduce_scatter", "input");
    return launch("reduce_scatter", {input, output}, [&] {
      LOOM_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                                        nccl_dtype(input.dtype(), "reduce_scatter"),
                                        nccl_op(op, input.dtype(), "reduce_scatter"), comm_, stream_));
    });
  }

 private:
  template <class Enqueue>
  WorkPtr launch(const char* what, std::vector<Tensor> tensors, const Enqueue& enqueue) {
    LOOM_CHECK(!aborted_, what, ": the communicator of ", describe(), " was aborted after an earlier timeout");
    forget_completed();
    LOOM_CUDA_CHECK(cudaSetDevice(device_));
    // Step 1-2 of the header: the communication stream waits for the kernels queued so far on
    // the current stream, which produce the tensors this operation reads.
    cudaEvent_t ready = nullptr;
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    LOOM_CUDA_CHECK(cudaEventRecord(ready, cuda::current_stream().handle()));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    LOOM_CUDA_CHECK(cudaEventDestroy(ready));  // released once the wait it feeds has been enqueued
    enqueue();
    auto op = std::make_shared<InFlight>(std::move(tensors));
    // Step 2: `done` marks the end of the NCCL call on the communication stream.
    LOOM_CUDA_CHECK(cudaEventRecord(op->done, stream_));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(op);
    }
    return std::make_shared<NcclWork>(std::static_pointer_cast<ProcessGroupNccl>(shared_from_this()),
                                      std::string(what), std::move(op));
  }

  void abort() {
    if (aborted_) return;
    aborted_ = true;
    (void)ncclCommAbort(comm_);
  }

  void check_tensor(const Tensor& t, const char* op) const {
    LOOM_CHECK(t.defined(), op, ": undefined tensor on ", describe());
    LOOM_CHECK(t.is_cuda(), op, ": the NCCL backend takes CUDA tensors, got one on ", t.device(), " (", describe(),
               "; use the MPI group for CPU tensors)");
    LOOM_CHECK(t.device() == device(), op, ": the NCCL backend takes CUDA tensors on this rank's GPU ", device(),
               ", got one on ", t.device(), " (", describe(), ")");
    LOOM_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor, got sizes ", t.sizes(), " strides ",
               t.strides(), " on ", describe());
    (void)nccl_dtype(t.dtype(), op);
  }
  // `whole` holds size() blocks of `block`'s shape, concatenated along dim 0.
  void check_blocks(const Tensor& whole, const Tensor& block, const char* op, const char* which) const {
    check_tensor(whole, op);
    check_tensor(block, op);
    LOOM_CHECK(whole.dtype() == block.dtype() && whole.numel() == block.numel() * size(), op, ": expected the ",
               which, " to hold ", size(), " blocks of ", block.sizes(), " ", block.dtype(), ", got ", whole.sizes(),
               " ", whole.dtype(), " on ", describe());
  }
  void check_root(int root, const char* op) const {
    LOOM_CHECK(root >= 0 && root < size(), op, ": root ", root, " out of range for ", describe());
  }
  void check_peer(int peer, const char* op) const {
    LOOM_CHECK(peer >= 0 && peer < size() && peer != rank(), op, ": peer ", peer, " must be another rank of ",
               describe());
  }

  int device_;
  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
  bool aborted_ = false;
  std::mutex mutex_;
  std::deque<std::shared_ptr<InFlight>> pending_;  // keeps operations' tensors alive until done
};

void NcclWork::wait() {
  if (op_->completed) return;
  group_->wait_for(op_->done, what_);
  op_->mark_completed();
}

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap) {
  const int devices = cuda::device_count();
  LOOM_CHECK(devices > 0, "NCCL process group: no CUDA device on world rank ",
             bootstrap.world_ranks()[static_cast<size_t>(bootstrap.rank())], " (the NCCL backend needs one GPU per rank)");
  const int world_rank = bootstrap.world_ranks()[static_cast<size_t>(bootstrap.rank())];
  const int device = local_rank(world_rank) % devices;
  LOOM_CUDA_CHECK(cudaSetDevice(device));
  // The unique id travels from rank 0 to everyone over the MPI group: a broadcast of its bytes.
  ncclUniqueId id;
  Tensor id_bytes = zeros({static_cast<int64_t>(sizeof(id))}, TensorOptions(DType::UInt8));
  if (bootstrap.rank() == 0) {
    LOOM_NCCL_CHECK(ncclGetUniqueId(&id));
    std::memcpy(id_bytes.data_ptr(), &id, sizeof(id));
  }
  bootstrap.broadcast(id_bytes, 0);  // waits until every member holds rank 0's id
  std::memcpy(&id, id_bytes.data_ptr(), sizeof(id));
  ncclComm_t comm = nullptr;
  LOOM_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  auto group =
      std::make_shared<ProcessGroupNccl>(bootstrap.rank(), bootstrap.size(), bootstrap.world_ranks(), device, comm);
  group->set_timeout(bootstrap.timeout());
  return group;
}

}  // namespace loom::distributed
