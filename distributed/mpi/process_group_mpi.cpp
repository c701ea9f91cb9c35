/*
 * The MPI process group (see process_group_mpi.h): each operation checks its arguments in the
 * caller's thread, then queues the MPI call(s) on the process-wide communication thread
 * (comm_thread.h), which runs them in the order the program issued them.
 */
#include "distributed/mpi/process_group_mpi.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "core/half.h"
#include "distributed/mpi/comm_thread.h"
#include "distributed/mpi/mpi_check.h"

namespace loom::distributed {
namespace {

using mpi::CommThread;
using mpi::MpiWork;

// ---- dtypes and reductions ----------------------------------------------------------------------

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Float16:
    case DType::BFloat16:
      return MPI_UINT16_T;  // bits only; reduced by CommThread::half_op's user-defined operations
    case DType::Int8:
      return MPI_INT8_T;
    case DType::UInt8:
      return MPI_UINT8_T;
    case DType::Int32:
      return MPI_INT32_T;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::Bool:
      return MPI_UINT8_T;  // one byte holding 0 or 1
  }
  LOOM_FAIL("mpi: no MPI datatype for ", dtype);
}
static_assert(sizeof(bool) == 1, "bool tensors are sent as one byte per element");

// ---- argument checks (caller's thread) --------------------------------------------------------

// what: "input", "output", or "" for the one tensor of an in-place collective.
void check_tensor(const ProcessGroup& group, const char* op, const char* what, const Tensor& t) {
  const std::string name = *what ? std::string(what) + " tensor" : std::string("tensor");
  LOOM_CHECK(t.defined(), op, ": the ", name, " is undefined (", group.describe(), ")");
  LOOM_CHECK(t.is_cpu(), op, ": the mpi backend works on CPU tensors, but the ", name, " is on ", t.device(),
             " (", group.describe(), "; CUDA tensors need the nccl backend)");
  LOOM_CHECK(t.is_contiguous(), op, ": the ", name, " of shape ", t.sizes(),
             " is not contiguous; pass .contiguous() (", group.describe(), ")");
  LOOM_CHECK(t.numel() <= INT_MAX, op, ": the ", name, " has ", t.numel(),
             " elements, more than MPI's int count allows (", INT_MAX, "); split it (", group.describe(),
             ")");
}

void check_same_dtype(const ProcessGroup& group, const char* op, const Tensor& input, const Tensor& output) {
  LOOM_CHECK(input.dtype() == output.dtype(), op, ": input is ", input.dtype(), " but output is ",
             output.dtype(), " (", group.describe(), ")");
}

// `big` must be `size` copies of `small` stacked along dim 0: small [n, *] -> big [size * n, *]
// (a 0-d `small` counts as [1]).
void check_stacked(const ProcessGroup& group, const char* op, const char* small_name, const Tensor& small,
                   const char* big_name, const Tensor& big) {
  std::vector<int64_t> expected(small.sizes().begin(), small.sizes().end());
  if (expected.empty()) expected.push_back(1);
  expected[0] *= group.size();
  const bool ok = big.dim() == static_cast<int64_t>(expected.size()) &&
                  std::equal(expected.begin(), expected.end(), big.sizes().begin());
  LOOM_CHECK(ok, op, ": ", big_name, " must be [", group.size(), " * n, *] for ", small_name,
             " [n, *] = ", small.sizes(), ", i.e. ", IntArrayRef(expected), ", but it is ", big.sizes(), " (",
             group.describe(), ")");
}

void check_root(const ProcessGroup& group, const char* op, const char* what, int root) {
  LOOM_CHECK(root >= 0 && root < group.size(), op, ": ", what, " ", root, " is not a rank of ",
             group.describe());
}

void check_reduce_op(const ProcessGroup& group, const char* op, const Tensor& t, ReduceOp reduce) {
  LOOM_CHECK(reduce != ReduceOp::Avg || is_floating(t.dtype()), op,
             ": ReduceOp::Avg needs a floating dtype, got ", t.dtype(),
             " (an integer average would have to round; use Sum and divide) (", group.describe(), ")");
}

// The MPI operation for (dtype, op); communication thread only (it may create a user op).
MPI_Op mpi_op(CommThread& thread, DType dtype, ReduceOp op) {
  if (dtype == DType::Float16 || dtype == DType::BFloat16) return thread.half_op(dtype, op);
  // bool: 0/1 bytes, so Max is a logical or and Min a logical and; a sum of bools is their
  // logical or as well (torch's convention), and a byte sum could leave 2 in a bool.
  if (dtype == DType::Bool) return op == ReduceOp::Min ? MPI_MIN : MPI_MAX;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

// Avg = Sum, then this division by the group size, in the tensor's own dtype.
void divide(const Tensor& t, int n) {
  const int64_t count = t.numel();
  if (count == 0) return;
  auto apply = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    for (int64_t i = 0; i < count; ++i) p[i] = T(static_cast<float>(p[i]) / static_cast<float>(n));
  };
  switch (t.dtype()) {
    case DType::Float32: {
      float* p = static_cast<float*>(t.data_ptr());
      for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
      break;
    }
    case DType::Float64: {
      double* p = static_cast<double*>(t.data_ptr());
      for (int64_t i = 0; i < count; ++i) p[i] /= n;
      break;
    }
    case DType::Float16:
      apply(static_cast<Half*>(t.data_ptr()));
      break;
    case DType::BFloat16:
      apply(static_cast<BFloat16*>(t.data_ptr()));
      break;
    default:
      LOOM_FAIL("Avg on ", t.dtype());
  }
}

bool overlap(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  auto pa = static_cast<const char*>(a.data_ptr()), pb = static_cast<const char*>(b.data_ptr());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// MPI forbids a send buffer that overlaps the receive buffer (except through MPI_IN_PLACE):
// such an input is copied first.
std::vector<char> staged(const Tensor& input, const Tensor& output, const void** data) {
  std::vector<char> copy;
  *data = input.data_ptr();
  if (overlap(input, output)) {
    copy.resize(input.nbytes());
    std::memcpy(copy.data(), input.data_ptr(), input.nbytes());
    *data = copy.data();
  }
  return copy;
}

int count_of(const Tensor& t) {
  return static_cast<int>(t.numel());
}

}  // namespace

// ---- ProcessGroupMpi ---------------------------------------------------------------------------

ProcessGroupMpi::ProcessGroupMpi(MPI_Comm comm, int rank, std::vector<int> world_ranks)
    : ProcessGroup(rank, static_cast<int>(world_ranks.size()), world_ranks),
      comm_(comm) {}  // copied: the size is read too

ProcessGroupMpi::~ProcessGroupMpi() {
  if (comm_ == MPI_COMM_WORLD || comm_ == MPI_COMM_NULL) return;
  // Freed on the communication thread, after the operations of this group still queued there;
  // dropped when MPI is already shut down (MPI_Finalize frees it).
  try {
    MPI_Comm comm = comm_;
    CommThread::get().enqueue_cleanup([comm]() mutable { LOOM_MPI_CHECK(MPI_Comm_free(&comm)); });
  } catch (...) {
  }
}

std::shared_ptr<ProcessGroupMpi> ProcessGroupMpi::world() {
  int initialized = 0, finalized = 0;
  // Local queries that MPI allows from any thread at any time, even before MPI_Init.
  LOOM_MPI_CHECK(MPI_Initialized(&initialized));
  LOOM_MPI_CHECK(MPI_Finalized(&finalized));
  LOOM_CHECK(initialized && !finalized,
             "ProcessGroupMpi::world: MPI is not initialised (call loom::distributed::init_process_group)");
  // Shared with the communication thread, which writes them (even after a wait() gave up).
  auto rank_size = std::make_shared<std::pair<int, int>>(0, 0);
  auto work = std::make_shared<MpiWork>("init", "MPI_COMM_WORLD", std::chrono::minutes(5));
  CommThread::get().enqueue(work, [rank_size] {
    // Errors come back as codes, which LOOM_MPI_CHECK turns into exceptions, instead of MPI's
    // default handler aborting the job. Communicators split from the world inherit it.
    LOOM_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    LOOM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_size->first));
    LOOM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &rank_size->second));
  });
  work->wait();  // local queries: waits only for the thread to start and run them
  const auto [rank, size] = *rank_size;
  std::vector<int> world_ranks(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) world_ranks[static_cast<size_t>(i)] = i;
  return std::make_shared<ProcessGroupMpi>(MPI_COMM_WORLD, rank, std::move(world_ranks));
}

bool ProcessGroupMpi::shutdown_comm_thread() {
  return CommThread::get().shutdown();
}

WorkPtr ProcessGroupMpi::native_broadcast_async(const Tensor& tensor, int root) {
  check_tensor(*this, "broadcast", "", tensor);
  check_root(*this, "broadcast", "root", root);
  auto work = std::make_shared<MpiWork>("broadcast", describe(), timeout());
  CommThread::get().enqueue(work, [tensor, root, comm = comm_] {
    LOOM_MPI_CHECK(MPI_Bcast(tensor.data_ptr(), count_of(tensor), mpi_type(tensor.dtype()), root, comm));
  });
  return work;
}

WorkPtr ProcessGroupMpi::native_reduce_async(const Tensor& tensor, int root, ReduceOp op) {
  check_tensor(*this, "reduce", "", tensor);
  check_root(*this, "reduce", "root", root);
  check_reduce_op(*this, "reduce", tensor, op);
  auto work = std::make_shared<MpiWork>(std::string("reduce(") + reduce_op_name(op) + ")", describe(), timeout());
  const bool is_root = rank() == root;
  CommThread::get().enqueue(work, [tensor, root, op, is_root, n = size(), comm = comm_] {
    // In place on the root (MPI_IN_PLACE); the other members only send, their tensors unchanged.
    const MPI_Op mop = mpi_op(CommThread::get(), tensor.dtype(), op);
    LOOM_MPI_CHECK(MPI_Reduce(is_root ? MPI_IN_PLACE : tensor.data_ptr(),
                              is_root ? tensor.data_ptr() : nullptr, count_of(tensor),
                              mpi_type(tensor.dtype()), mop, root, comm));
    if (is_root && op == ReduceOp::Avg) divide(tensor, n);
  });
  return work;
}

WorkPtr ProcessGroupMpi::native_all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_tensor(*this, "all_reduce", "", tensor);
  check_reduce_op(*this, "all_reduce", tensor, op);
  auto work = std::make_shared<MpiWork>(
      op == ReduceOp::Sum ? std::string("all_reduce") : std::string("all_reduce(") + reduce_op_name(op) + ")",
      describe(), timeout());
  CommThread::get().enqueue(work, [tensor, op, n = size(), comm = comm_] {
    const MPI_Op mop = mpi_op(CommThread::get(), tensor.dtype(), op);
    LOOM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), count_of(tensor), mpi_type(tensor.dtype()),
                                 mop, comm));
    if (op == ReduceOp::Avg) divide(tensor, n);
  });
  return work;
}

WorkPtr ProcessGroupMpi::native_all_gather_async(const Tensor& input, const Tensor& output) {
  check_tensor(*this, "all_gather", "input", input);
  check_tensor(*this, "all_gather", "output", output);
  check_same_dtype(*this, "all_gather", input, output);
  check_stacked(*this, "all_gather", "input", input, "output", output);
  auto work = std::make_shared<MpiWork>("all_gather", describe(), timeout());
  CommThread::get().enqueue(work, [input, output, comm = comm_] {
    const void* send = nullptr;
    const std::vector<char> copy = staged(input, output, &send);
    const MPI_Datatype type = mpi_type(input.dtype());
    LOOM_MPI_CHECK(
        MPI_Allgather(send, count_of(input), type, output.data_ptr(), count_of(input), type, comm));
  });
  return work;
}

WorkPtr ProcessGroupMpi::native_reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op) {
  check_tensor(*this, "reduce_scatter", "input", input);
  check_tensor(*this, "reduce_scatter", "output", output);
  check_same_dtype(*this, "reduce_scatter", input, output);
  check_stacked(*this, "reduce_scatter", "output", output, "input", input);
  check_reduce_op(*this, "reduce_scatter", input, op);
  auto work =
      std::make_shared<MpiWork>(std::string("reduce_scatter(") + reduce_op_name(op) + ")", describe(), timeout());
  CommThread::get().enqueue(work, [input, output, op, n = size(), comm = comm_] {
    const void* send = nullptr;
    const std::vector<char> copy = staged(input, output, &send);
    const MPI_Op mop = mpi_op(CommThread::get(), input.dtype(), op);
    LOOM_MPI_CHECK(MPI_Reduce_scatter_block(send, output.data_ptr(), count_of(output),
                                            mpi_type(input.dtype()), mop, comm));
    if (op == ReduceOp::Avg) divide(output, n);
  });
  return work;
}

WorkPtr ProcessGroupMpi::native_scatter_async(const Tensor& input, const Tensor& output, int root) {
  check_root(*this, "scatter", "root", root);
  check_tensor(*this, "scatter", "output", output);
  const bool is_root = rank() == root;
  if (is_root) {  // the input matters on the root only
    check_tensor(*this, "scatter", "input", input);
    check_same_dtype(*this, "scatter", input, output);
    check_stacked(*this, "scatter", "output", output, "input", input);
  }
  auto work = std::make_shared<MpiWork>("scatter", describe(), timeout());
  CommThread::get().enqueue(work, [input, output, root, is_root, comm = comm_] {
    const void* send = nullptr;
    std::vector<char> copy;
    if (is_root) copy = staged(input, output, &send);
    const MPI_Datatype type = mpi_type(output.dtype());
    LOOM_MPI_CHECK(
        MPI_Scatter(send, count_of(output), type, output.data_ptr(), count_of(output), type, root, comm));
  });
  return work;
}

WorkPtr ProcessGroupMpi::native_gather_async(const Tensor& input, const Tensor& output, int root) {
  check_root(*this, "gather", "root", root);
  check_tensor(*this, "gather", "input", input);
  const bool is_root = rank() == root;
  if (is_root) {  // the output matters on the root only
    check_tensor(*this, "gather", "output", output);
    check_same_dtype(*this, "gather", input, output);
    check_stacked(*this, "gather", "input", input, "output", output);
  }
  auto work = std::make_shared<MpiWork>("gather", describe(), timeout());
  CommThread::get().enqueue(work, [input, output, root, is_root, comm = comm_] {
    const void* send = input.data_ptr();
    std::vector<char> copy;
    if (is_root) copy = staged(input, output, &send);
    const MPI_Datatype type = mpi_type(input.dtype());
    LOOM_MPI_CHECK(MPI_Gather(send, count_of(input), type, is_root ? output.data_ptr() : nullptr,
                              count_of(input), type, root, comm));
  });
  return work;
}

WorkPtr ProcessGroupMpi::native_all_to_all_async(const Tensor& input, const Tensor& output) {
  check_tensor(*this, "all_to_all", "input", input);
  check_tensor(*this, "all_to_all", "output", output);
  check_same_dtype(*this, "all_to_all", input, output);
  LOOM_CHECK(input.dim() >= 1 && input.size(0) % size() == 0, "all_to_all: input must be [", size(),
             " * n, *] (one block of n rows per rank), got ", input.sizes(), " (", describe(), ")");
  LOOM_CHECK(output.sizes() == input.sizes(), "all_to_all: output must have the input's shape ",
             input.sizes(), ", got ", output.sizes(), " (", describe(), ")");
  auto work = std::make_shared<MpiWork>("all_to_all", describe(), timeout());
  CommThread::get().enqueue(work, [input, output, n = size(), comm = comm_] {
    const void* send = nullptr;
    const std::vector<char> copy = staged(input, output, &send);
    const MPI_Datatype type = mpi_type(input.dtype());
    const int block = count_of(input) / n;
    LOOM_MPI_CHECK(MPI_Alltoall(send, block, type, output.data_ptr(), block, type, comm));
  });
  return work;
}

WorkPtr ProcessGroupMpi::native_send_async(const Tensor& tensor, int dst, int tag) {
  check_tensor(*this, "send", "", tensor);
  check_root(*this, "send", "destination", dst);
  LOOM_CHECK(dst != rank(), "send: rank ", rank(), " cannot send to itself (", describe(), ")");
  LOOM_CHECK(tag >= 0 && tag <= 32767, "send: tag ", tag,
             " is outside [0, 32767], the range MPI guarantees (", describe(), ")");
  count_sent(tensor.nbytes());
  auto work = std::make_shared<MpiWork>(
      "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")", describe(), timeout());
  CommThread::get().enqueue_p2p(
      work,
      [tensor, dst, tag, comm = comm_] {
        MPI_Request request;
        LOOM_MPI_CHECK(MPI_Isend(tensor.data_ptr(), count_of(tensor), mpi_type(tensor.dtype()), dst, tag,
                                 comm, &request));
        return request;
      },
      [tensor](const MPI_Status&) {});  // keeps the tensor alive until MPI has read it
  return work;
}

WorkPtr ProcessGroupMpi::native_recv_async(const Tensor& tensor, int src, int tag) {
  check_tensor(*this, "recv", "", tensor);
  check_root(*this, "recv", "source", src);
  LOOM_CHECK(src != rank(), "recv: rank ", rank(), " cannot receive from itself (", describe(), ")");
  LOOM_CHECK(tag >= 0 && tag <= 32767, "recv: tag ", tag,
             " is outside [0, 32767], the range MPI guarantees (", describe(), ")");
  auto work = std::make_shared<MpiWork>(
      "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")", describe(), timeout());
  CommThread::get().enqueue_p2p(
      work,
      [tensor, src, tag, comm = comm_] {
        MPI_Request request;
        LOOM_MPI_CHECK(MPI_Irecv(tensor.data_ptr(), count_of(tensor), mpi_type(tensor.dtype()), src, tag,
                                 comm, &request));
        return request;
      },
      [tensor](const MPI_Status& status) {
        // A longer message fails in MPI_Test (MPI_ERR_TRUNCATE); a shorter one only shows here.
        int received = 0;
        LOOM_MPI_CHECK(MPI_Get_count(&status, mpi_type(tensor.dtype()), &received));
        LOOM_CHECK(received == count_of(tensor), "expected ", tensor.numel(), " elements of ", tensor.dtype(),
                   " (shape ", tensor.sizes(), "), but the message had ", received);
      });
  return work;
}

WorkPtr ProcessGroupMpi::barrier_async() {
  auto work = std::make_shared<MpiWork>("barrier", describe(), timeout());
  // Completes when every member has entered the barrier.
  CommThread::get().enqueue(work, [comm = comm_] { LOOM_MPI_CHECK(MPI_Barrier(comm)); });
  return work;
}

std::shared_ptr<ProcessGroup> ProcessGroupMpi::new_group(const std::vector<int>& ranks) {
  std::vector<bool> seen(static_cast<size_t>(size()), false);
  int my_index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    LOOM_CHECK(r >= 0 && r < size(), "new_group: rank ", r, " is not a rank of ", describe());
    LOOM_CHECK(!seen[static_cast<size_t>(r)], "new_group: rank ", r, " appears twice in the list (",
               describe(), ")");
    seen[static_cast<size_t>(r)] = true;
    if (r == rank()) my_index = static_cast<int>(i);
  }
  if (ranks.empty()) return nullptr;  // the same list everywhere: nobody is a member, nothing to split
  // MPI_Comm_split is collective over this group: members of the list take color 0 and are
  // ordered by their position in the list (the key); the others get MPI_COMM_NULL.
  auto new_comm = std::make_shared<MPI_Comm>(MPI_COMM_NULL);  // written by the communication thread
  auto work = std::make_shared<MpiWork>("new_group", describe(), timeout());
  CommThread::get().enqueue(work, [new_comm, my_index, comm = comm_] {
    LOOM_MPI_CHECK(MPI_Comm_split(comm, my_index >= 0 ? 0 : MPI_UNDEFINED, my_index, new_comm.get()));
  });
  work->wait();  // for every member of this group to take part in the split
  if (my_index < 0) return nullptr;
  std::vector<int> world_ranks;
  for (int r : ranks) world_ranks.push_back(this->world_ranks()[static_cast<size_t>(r)]);
  auto group = std::make_shared<ProcessGroupMpi>(*new_comm, my_index, std::move(world_ranks));
  group->set_timeout(timeout());
  return group;
}

}  // namespace loom::distributed
