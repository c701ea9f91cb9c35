/*
 * The NCCL stand-in's communicators (nccl.h): the unique id, the bootstrap that turns the ranks
 * holding one id into an MPI communicator, split, destroy, abort, and the error strings.
 *
 * Bootstrap. Real NCCL's unique id carries the address of a socket that the id's creator
 * listens on. Here it carries the creator's rank in MPI_COMM_WORLD and a per-process counter.
 * Every member sends (its NCCL rank, its world rank) to the creator; the creator checks that
 * the ranks 0 .. n-1 each came once, sends the ordered list of world ranks back, and all
 * members make the communicator with MPI_Comm_create_group, which is collective over the members
 * only (a world-wide MPI_Comm_split would need every process of the job to take part). These
 * messages use the top 1024 tags below MPI_TAG_UB on MPI_COMM_WORLD, which Loom's MPI backend
 * leaves alone.
 */
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "emulated_nccl.h"

namespace loom::emulated_nccl {
namespace {

thread_local std::string g_last_error;

constexpr char kIdMagic[] = "loom-emulated-nccl";

// What ncclGetUniqueId writes into ncclUniqueId::internal.
struct IdContents {
  char magic[sizeof(kIdMagic)];
  int32_t creator_world_rank;
  int32_t creator_pid;
  uint64_t counter;
};
static_assert(sizeof(IdContents) <= NCCL_UNIQUE_ID_BYTES);

ncclResult_t mpi_usable(const char* call) {
  int initialized = 0, finalized = 0, provided = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return fail(ncclSystemError, std::string(call) +
                                     ": the emulated NCCL runs over MPI, which is not initialised (call "
                                     "loom::distributed::init_process_group first) or already finalised");
  MPI_Query_thread(&provided);
  // Loom's MPI backend makes its calls from its communication thread; the stand-in calls MPI
  // from the thread that enqueues NCCL work, at the same time.
  if (provided < MPI_THREAD_MULTIPLE)
    return fail(ncclSystemError, std::string(call) + ": the emulated NCCL needs MPI_THREAD_MULTIPLE, the MPI library "
                                                     "provides thread level " + std::to_string(provided));
  return ncclSuccess;
}

int bootstrap_tag(uint64_t counter) {
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
  const int upper = found && tag_ub ? *tag_ub : 32767;  // 32767: the least MPI_TAG_UB MPI allows
  return upper - 1024 + static_cast<int>(counter % 1024);
}

ncclComm_t new_comm(MPI_Comm mpi) {
  auto* comm = new ncclComm;
  comm->mpi = mpi;
  MPI_Comm_rank(mpi, &comm->rank);
  MPI_Comm_size(mpi, &comm->size);
  cudaGetDevice(&comm->device);
  // Errors come back as codes, which the calls turn into NCCL results with MPI's message.
  MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
  return comm;
}

// The members' world ranks in NCCL rank order, gathered by the creator (see the header).
ncclResult_t exchange_members(const IdContents& id, int nranks, int rank, std::vector<int>& members) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const int tag = bootstrap_tag(id.counter);
  members.assign(static_cast<size_t>(nranks), -1);
  std::vector<MPI_Request> requests;
  const std::string what = "ncclCommInitRank bootstrap (rank " + std::to_string(rank) + " of " +
                           std::to_string(nranks) + ", id made by world rank " +
                           std::to_string(id.creator_world_rank) + ")";
  if (world_rank != id.creator_world_rank) {
    // Buffers shared with keep_forever: after a timeout the requests may still complete.
    auto hello = std::make_shared<std::vector<int>>(std::vector<int>{rank, world_rank});
    auto reply = std::make_shared<std::vector<int>>(static_cast<size_t>(nranks), -1);
    requests.resize(2);
    MPI_Isend(hello->data(), 2, MPI_INT, id.creator_world_rank, tag, MPI_COMM_WORLD, &requests[0]);
    MPI_Irecv(reply->data(), nranks, MPI_INT, id.creator_world_rank, tag, MPI_COMM_WORLD, &requests[1]);
    if (ncclResult_t status = wait_all(requests, {}, what); status != ncclSuccess) {
      keep_forever(hello);
      keep_forever(reply);
      return status;
    }
    members = *reply;
    return members[0] == -2 ? fail(ncclInvalidUsage, what + ": the creator rejected the members (see its error)")
                            : ncclSuccess;
  }
  members[static_cast<size_t>(rank)] = world_rank;
  auto hellos = std::make_shared<std::vector<int>>(2 * static_cast<size_t>(nranks - 1));
  requests.resize(static_cast<size_t>(nranks - 1));
  for (int i = 0; i < nranks - 1; ++i)
    MPI_Irecv(hellos->data() + 2 * i, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD,
              &requests[static_cast<size_t>(i)]);
  if (ncclResult_t status = wait_all(requests, {}, what + ": waiting for the other members"); status != ncclSuccess) {
    keep_forever(hellos);
    return status;
  }
  std::string problem;
  std::vector<int> sources(static_cast<size_t>(nranks - 1));
  for (size_t i = 0; i + 1 < static_cast<size_t>(nranks); ++i) {
    const int r = (*hellos)[2 * i], w = (*hellos)[2 * i + 1];
    sources[i] = w;
    if (r < 0 || r >= nranks || members[static_cast<size_t>(r)] != -1)
      problem = "NCCL rank " + std::to_string(r) + " (world rank " + std::to_string(w) +
                ") is out of range or was claimed twice";
    else
      members[static_cast<size_t>(r)] = w;
  }
  // A rejected bootstrap still answers every member, so that none waits until its timeout.
  auto reply = std::make_shared<std::vector<int>>(problem.empty() ? members
                                                                  : std::vector<int>(static_cast<size_t>(nranks), -2));
  std::vector<MPI_Request> replies(static_cast<size_t>(nranks - 1));
  for (size_t i = 0; i < sources.size(); ++i)
    MPI_Isend(reply->data(), nranks, MPI_INT, sources[i], tag, MPI_COMM_WORLD, &replies[i]);
  if (ncclResult_t status = wait_all(replies, {}, what + ": answering the members"); status != ncclSuccess) {
    keep_forever(reply);
    return status;
  }
  return problem.empty() ? ncclSuccess : fail(ncclInvalidUsage, what + ": " + problem);
}

}  // namespace

ncclResult_t fail(ncclResult_t result, const std::string& message) {
  g_last_error = message;
  return result;
}

ncclResult_t check_comm(ncclComm_t comm, const char* call) {
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": comm is null");
  if (comm->aborted)
    return fail(ncclInvalidUsage, std::string(call) + ": the " + describe(comm) + " was aborted");
  return ncclSuccess;
}

std::string describe(ncclComm_t comm) {
  return "communicator (rank " + std::to_string(comm->rank) + " of " + std::to_string(comm->size) + ", device " +
         std::to_string(comm->device) + ")";
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

void keep_forever(std::shared_ptr<void> owner) {
  // Reachable from a global, so LeakSanitizer does not report what is kept on purpose.
  static std::mutex mutex;
  static auto* kept = new std::vector<std::shared_ptr<void>>;
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(owner));
}

ncclResult_t wait_all(std::vector<MPI_Request>& requests, const std::vector<ncclComm_t>& comms,
                      const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + timeout();
  while (true) {
    int done = 0;
    // Testing is also what moves non-blocking MPI collectives on: Open MPI has no progress thread.
    const int code = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (code != MPI_SUCCESS) return fail(ncclSystemError, what + ": " + mpi_error(code));
    if (done) return ncclSuccess;
    const auto now = Clock::now();
    if (now > deadline) {
      for (ncclComm_t comm : comms) comm->async_error = ncclRemoteError;
      return fail(ncclRemoteError, what + " did not complete within " + std::to_string(timeout().count()) +
                                       " ms (LOOM_EMULATED_NCCL_TIMEOUT_S): a peer did not take part in it");
    }
    // Peers on shared cores need the CPU to get here: yield at first, then sleep.
    if (now - start < std::chrono::milliseconds(2)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

std::chrono::milliseconds timeout() {
  static const std::chrono::milliseconds value = [] {
    const char* env = std::getenv("LOOM_EMULATED_NCCL_TIMEOUT_S");
    const double seconds = env ? std::atof(env) : 300.0;
    return std::chrono::milliseconds(static_cast<int64_t>((seconds > 0 ? seconds : 300.0) * 1000));
  }();
  return value;
}

}  // namespace loom::emulated_nccl

using loom::emulated_nccl::check_comm;
using loom::emulated_nccl::describe;
using loom::emulated_nccl::fail;

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is null");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t /*comm*/) { return loom::emulated_nccl::g_last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  using namespace loom::emulated_nccl;
  if (unique_id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is null");
  if (ncclResult_t status = mpi_usable("ncclGetUniqueId"); status != ncclSuccess) return status;
  static std::atomic<uint64_t> counter{0};
  IdContents id{};
  std::memcpy(id.magic, kIdMagic, sizeof(kIdMagic));
  MPI_Comm_rank(MPI_COMM_WORLD, &id.creator_world_rank);
  id.creator_pid = static_cast<int32_t>(getpid());
  id.counter = counter++;
  std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
  std::memcpy(unique_id->internal, &id, sizeof(id));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  using namespace loom::emulated_nccl;
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is null");
  *comm = nullptr;
  if (config != nullptr && config->blocking == 0)
    return fail(ncclInvalidArgument, "ncclCommInitRankConfig: non-blocking communicators are not emulated");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " is not in [0, nranks " +
                                         std::to_string(nranks) + ")");
  if (ncclResult_t status = mpi_usable("ncclCommInitRank"); status != ncclSuccess) return status;
  IdContents id;
  std::memcpy(&id, comm_id.internal, sizeof(id));
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (std::memcmp(id.magic, kIdMagic, sizeof(kIdMagic)) != 0 || id.creator_world_rank < 0 ||
      id.creator_world_rank >= world_size)
    return fail(ncclInvalidArgument, "ncclCommInitRank: the unique id was not made by ncclGetUniqueId of this job");
  MPI_Comm mpi = MPI_COMM_NULL;
  if (nranks == 1) {
    // A communicator of one: nothing to meet; its own copy of MPI_COMM_SELF keeps its traffic apart.
    const int code = MPI_Comm_dup(MPI_COMM_SELF, &mpi);
    if (code != MPI_SUCCESS) return fail(ncclSystemError, "ncclCommInitRank: MPI_Comm_dup: " + mpi_error(code));
  } else {
    std::vector<int> members;
    if (ncclResult_t status = exchange_members(id, nranks, rank, members); status != ncclSuccess) return status;
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, nranks, members.data(), &group);
    // Collective over the members only; their order in `group` makes MPI rank == NCCL rank.
    const int code = MPI_Comm_create_group(MPI_COMM_WORLD, group, bootstrap_tag(id.counter), &mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (code != MPI_SUCCESS)
      return fail(ncclSystemError, "ncclCommInitRank: MPI_Comm_create_group: " + mpi_error(code));
  }
  *comm = new_comm(mpi);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, comm_id, rank, nullptr);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  using namespace loom::emulated_nccl;
  if (ncclResult_t status = check_comm(comm, "ncclCommSplit"); status != ncclSuccess) return status;
  if (newcomm == nullptr) return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is null");
  *newcomm = nullptr;
  if (config != nullptr && config->blocking == 0)
    return fail(ncclInvalidArgument, "ncclCommSplit: non-blocking communicators are not emulated");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument, "ncclCommSplit: color " + std::to_string(color) +
                                         " is negative and not NCCL_SPLIT_NOCOLOR");
  // Collective over the parent: every member calls it, as with NCCL.
  MPI_Comm mpi = MPI_COMM_NULL;
  const int code = MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mpi);
  if (code != MPI_SUCCESS)
    return fail(ncclSystemError, "ncclCommSplit on the " + describe(comm) + ": MPI_Comm_split: " + mpi_error(code));
  if (mpi == MPI_COMM_NULL) return ncclSuccess;  // NCCL_SPLIT_NOCOLOR: no communicator
  ncclComm_t child = new_comm(mpi);
  child->device = comm->device;
  *newcomm = child;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommDestroy: comm is null");
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A communicator destroyed after MPI_Finalize (a static group at exit) has nothing left to free.
  if (!finalized && !comm->aborted) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // NCCL accepts a null communicator here
  // Operations of this communicator may still be pending in MPI (that is why it is aborted):
  // its MPI communicator and their buffers are left alone, never freed.
  comm->aborted = true;
  loom::emulated_nccl::keep_forever(std::shared_ptr<ncclComm>(comm, [](ncclComm*) {}));
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is null");
  *async_error = comm->async_error;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return fail(ncclInvalidArgument, "ncclCommCount: comm or count is null");
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr)
    return fail(ncclInvalidArgument, "ncclCommCuDevice: comm or device is null");
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return fail(ncclInvalidArgument, "ncclCommUserRank: comm or rank is null");
  *rank = comm->rank;
  return ncclSuccess;
}
