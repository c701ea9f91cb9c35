/*
 * The emulator's kernel launch: runs every thread of every block of a grid on the CPU with
 * CUDA's rules for barriers and warps (the execution model is described in emulator.h).
 *
 * Cooperative launches run one fiber per CUDA thread of a block on the launching thread
 * (fiber.h), or, under ThreadSanitizer, a pool of OS threads, one per CUDA thread. Either
 * walks the grid block by block; the end of a block is itself a barrier round, after which the
 * last thread to finish sets the block up for the next index. A barrier round completes when
 * every thread of the block has arrived at the same __syncthreads (same file and line); a
 * thread that returns while others wait, or two sites in one round, is an error, as is a
 * round that does not complete within kDeadlockSeconds. Warp intrinsics exchange values
 * through a per-warp slot array, one round per call, with two slot arrays used alternately so
 * that a lane that has run ahead to the next call cannot overwrite a value still being read.
 *
 * Every wait is bounded (a condition-variable wait, or a fiber's yield) and also watches the
 * launch's abort flag: the first error stops the launch, wakes everyone, and is rethrown in the
 * launching thread as a loom::Error that names the kernel, the block and the thread.
 */
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/emulated/device_memory.h"
#include "core/cuda/emulated/device_work.h"
#include "core/cuda/emulated/emulator.h"
#include "core/cuda/emulated/fiber.h"
#include "core/error.h"

namespace loom_emu {

namespace {

constexpr int kDeadlockSeconds = 30;
constexpr auto kPoll = std::chrono::milliseconds(50);
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr size_t kDefaultSharedLimit = 48 << 10, kOptInSharedLimit = 227 << 10;

thread_local ThreadPosition tls_position;

// Unwinds a CUDA thread after the launch was aborted (by this thread or another).
struct KernelAbort {};

struct Launch;

struct Warp {
  std::mutex mutex;
  std::condition_variable cv;
  unsigned present = 0;  // lanes that exist in this block
  unsigned exited = 0;   // lanes whose kernel body has returned
  unsigned arrived = 0;  // lanes waiting in the current round
  unsigned round_mask = 0;
  const char* round_what = nullptr;
  uint64_t generation = 0;
  uint64_t slots[2][32] = {};
};

struct Block {
  std::mutex mutex;
  std::condition_variable cv;
  unsigned threads = 0;
  unsigned arrived = 0, exited = 0;
  uint64_t generation = 0;        // barrier rounds, the end of a block included
  const char* site_file = nullptr;  // the __syncthreads of the current round
  int site_line = 0;
  unsigned site_thread = 0;
  // The linear index of the block being run. Read without the mutex at the start of a block:
  // taking a lock there would order every thread after the ones that already finished their
  // body (through the mutex), hiding from ThreadSanitizer the very races a missing
  // __syncthreads causes. The value is ordered by the end-of-block wait instead.
  std::atomic<uint64_t> index{0};
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<unsigned char> dynamic_shared;
};

struct Launch {
  const LaunchSpec* spec = nullptr;
  const std::function<void()>* body = nullptr;  // one CUDA thread's kernel call
  uint64_t num_blocks = 0;
  Block block;
  std::atomic<bool> aborting{false};
  std::mutex error_mutex;
  std::string error;
  std::atomic<uint64_t> next_block{0};  // independent launches: blocks taken by workers
};

// The CUDA thread that the calling OS thread is running, during a launch.
struct ThreadContext {
  Launch* launch = nullptr;
  unsigned linear = 0;  // x + y * Dx + z * Dx * Dy
  bool cooperative = false;
};
thread_local ThreadContext tls_thread;

std::string describe_position() {
  const ThreadPosition& p = tls_position;
  return loom::detail::concat("block (", p.block_idx.x, ",", p.block_idx.y, ",", p.block_idx.z, ") thread (",
                        p.thread_idx.x, ",", p.thread_idx.y, ",", p.thread_idx.z, ")");
}

// Records the launch's first error, wakes every waiter and unwinds the calling thread.
[[noreturn]] void fail(Launch& launch, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(launch.error_mutex);
    if (launch.error.empty()) launch.error = message;
  }
  launch.aborting = true;
  launch.block.cv.notify_all();
  for (auto& w : launch.block.warps) w->cv.notify_all();
  throw KernelAbort{};
}

Launch& current_launch(const char* what, const char* file = nullptr, int line = 0) {
  Launch* launch = tls_thread.launch;
  LOOM_CHECK(launch != nullptr, what, " called outside a kernel");
  if (!tls_thread.cooperative)
    fail(*launch, loom::detail::concat(describe_position(), " calls ", what, file ? " at " : "", file ? file : "",
                                 file ? ":" : "", file ? std::to_string(line) : "",
                                 ", but the kernel was launched with independent threads; launch it as "
                                 "BlockThreads::kCooperative"));
  return *launch;
}

// Waits on cv until done() holds; fails the launch on abort or after kDeadlockSeconds.
template <class Done>
void bounded_wait(Launch& launch, std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Done done,
                  const std::string& (*waiting_for)(std::string&), std::string& scratch) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kDeadlockSeconds);
  while (!done()) {
    if (launch.aborting) throw KernelAbort{};
    if (std::chrono::steady_clock::now() > deadline) {
      lock.unlock();
      fail(launch, loom::detail::concat("deadlock: ", describe_position(), " waited ", kDeadlockSeconds, " s for ",
                                  waiting_for(scratch)));
    }
    if constexpr (kFiberBlocks) {
      // The thread-local position is the OS thread's, and the next fiber sets its own.
      const ThreadContext self = tls_thread;
      const ThreadPosition where = tls_position;
      lock.unlock();
      yield_fiber();  // the other CUDA threads of the block run until they wait too
      lock.lock();
      tls_thread = self;
      tls_position = where;
    } else {
      cv.wait_for(lock, kPoll);
    }
  }
}

// Ends an __activemask round once every lane of the warp has arrived or returned (mutex held).
bool complete_active_mask_round(Warp& w) {
  if (w.arrived == 0 || std::strcmp(w.round_what, "__activemask") != 0 || (w.arrived | w.exited) != w.present)
    return false;
  w.slots[w.generation & 1][0] = w.arrived;
  w.arrived = 0;
  ++w.generation;
  w.cv.notify_all();  // the active lanes are known
  return true;
}

// The thread's kernel body has returned: count it, and if it is the last of the block, end the
// block (set up the next one and wake everyone). Otherwise wait for that.
void finish_thread(Launch& launch) {
  Block& b = launch.block;
  std::unique_lock<std::mutex> lock(b.mutex);
  if (b.arrived > 0) {
    std::string site = loom::detail::concat(b.site_file, ":", b.site_line);
    lock.unlock();
    fail(launch, loom::detail::concat(describe_position(), " returned while ", b.arrived, " other thread(s) wait at "
                                "__syncthreads at ", site, "; every thread of a block must reach each barrier"));
  }
  {
    Warp& w = *b.warps[tls_thread.linear / 32];
    std::unique_lock<std::mutex> warp_lock(w.mutex);
    w.exited |= 1u << (tls_thread.linear % 32);
    complete_active_mask_round(w);
    if (w.arrived != 0 && (w.round_mask >> (tls_thread.linear % 32) & 1u)) {  // they wait for this lane
      unsigned waiting = w.arrived;
      const char* what = w.round_what;
      warp_lock.unlock();
      lock.unlock();
      fail(launch, loom::detail::concat(describe_position(), " returned while lanes 0x", std::hex, waiting, std::dec,
                                  " of its warp wait in ", what, " with a mask that names it"));
    }
  }
  const uint64_t my_generation = b.generation;
  if (++b.exited == b.threads) {
    // End of the block: the next one starts with fresh barrier and warp state.
    b.exited = 0;
    b.index.store(b.index.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    for (auto& w : b.warps) {
      w->exited = 0;
      w->arrived = 0;
    }
    std::fill(b.dynamic_shared.begin(), b.dynamic_shared.end(), 0xff);  // uninitialised, as on a GPU
    ++b.generation;
    b.cv.notify_all();
    return;
  }
  std::string scratch;
  bounded_wait(
      launch, lock, b.cv, [&] { return b.generation != my_generation; },
      [](std::string& s) -> const std::string& { return s = "the other threads of its block to finish"; }, scratch);
}

void set_position(const LaunchSpec& spec, uint64_t block_linear, unsigned thread_linear) {
  ThreadPosition& p = tls_position;
  p.block_dim = spec.block;
  p.grid_dim = spec.grid;
  p.block_idx = uint3{static_cast<unsigned>(block_linear % spec.grid.x),
                      static_cast<unsigned>(block_linear / spec.grid.x % spec.grid.y),
                      static_cast<unsigned>(block_linear / (uint64_t{spec.grid.x} * spec.grid.y))};
  p.thread_idx = uint3{thread_linear % spec.block.x, thread_linear / spec.block.x % spec.block.y,
                       thread_linear / (spec.block.x * spec.block.y)};
}

// Runs one CUDA thread's body; errors other than an abort become the launch's error.
void run_body(Launch& launch) {
  try {
    (*launch.body)();
  } catch (const KernelAbort&) {
    throw;
  } catch (const std::exception& e) {
    fail(launch, loom::detail::concat(describe_position(), ": ", e.what()));
  }
}

// One fiber or OS thread of a cooperative launch: CUDA thread `linear` of every block in turn.
void cooperative_worker(Launch& launch, unsigned linear) {
  tls_thread = ThreadContext{&launch, linear, true};
  try {
    for (;;) {
      const uint64_t index = launch.block.index.load(std::memory_order_relaxed);
      if (index >= launch.num_blocks || launch.aborting) break;
      set_position(*launch.spec, index, linear);
      run_body(launch);
      finish_thread(launch);
    }
  } catch (const KernelAbort&) {
  }
  tls_thread = ThreadContext{};
  tls_position = ThreadPosition{};
}

// One OS thread of an independent launch: whole blocks, their threads one after another.
void independent_worker(Launch& launch) {
  const unsigned threads = launch.spec->block.x * launch.spec->block.y * launch.spec->block.z;
  try {
    for (uint64_t index = launch.next_block++; index < launch.num_blocks && !launch.aborting;
         index = launch.next_block++) {
      for (unsigned t = 0; t < threads; ++t) {
        tls_thread = ThreadContext{&launch, t, false};
        set_position(*launch.spec, index, t);
        run_body(launch);
      }
    }
  } catch (const KernelAbort&) {
  }
  tls_thread = ThreadContext{};
  tls_position = ThreadPosition{};
}

// A pool of OS threads that run the CUDA threads of launches; it grows to the largest block
// seen and is kept for the life of the process (detached threads that sleep between launches).
class WorkerPool {
 public:
  // Runs job(i) on workers 0..n-1 and returns when all have returned.
  void run(unsigned n, const std::function<void(unsigned)>& job) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (workers_ < n) {
      std::thread(&WorkerPool::loop, this, workers_++).detach();
    }
    job_ = &job;
    participants_ = n;
    remaining_ = n;
    ++generation_;
    wake_.notify_all();
    done_.wait(lock, [&] { return remaining_ == 0; });  // every participant has left job()
    job_ = nullptr;
  }

 private:
  void loop(unsigned index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });  // a new launch was posted
      seen = generation_;
      if (index >= participants_) continue;
      const auto* job = job_;
      lock.unlock();
      (*job)(index);
      lock.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  unsigned workers_ = 0, participants_ = 0, remaining_ = 0;
  uint64_t generation_ = 0;
  const std::function<void(unsigned)>* job_ = nullptr;
};

WorkerPool& pool() {
  static auto* p = new WorkerPool();  // never destroyed: its threads outlive main
  return *p;
}

std::mutex attributes_mutex;
std::map<const void*, size_t>& shared_opt_in() {
  static auto* m = new std::map<const void*, size_t>();
  return *m;
}

std::string config_text(const LaunchSpec& s) {
  return loom::detail::concat("grid (", s.grid.x, ",", s.grid.y, ",", s.grid.z, "), block (", s.block.x, ",", s.block.y, ",",
                        s.block.z, "), ", s.dynamic_shared_bytes, " bytes of dynamic shared memory");
}

void check_config(const LaunchSpec& s) {
  const uint64_t threads = uint64_t{s.block.x} * s.block.y * s.block.z;
  auto bad = [&](const char* code, const std::string& why) {
    LOOM_FAIL(code, ": launch of ", s.kernel_name, ": ", why, " (", config_text(s), ")");
  };
  if (threads == 0 || threads > kMaxThreadsPerBlock)
    bad("cudaErrorInvalidConfiguration", loom::detail::concat(threads, " threads per block (1 to 1024 allowed)"));
  if (s.block.x > 1024 || s.block.y > 1024 || s.block.z > 64)
    bad("cudaErrorInvalidConfiguration", "block dimensions beyond (1024, 1024, 64)");
  if (s.grid.x == 0 || s.grid.y == 0 || s.grid.z == 0 || s.grid.x > 2147483647u || s.grid.y > 65535 ||
      s.grid.z > 65535)
    bad("cudaErrorInvalidConfiguration", "grid dimensions outside (1..2^31-1, 1..65535, 1..65535)");
  size_t limit = kDefaultSharedLimit;
  {
    std::lock_guard<std::mutex> lock(attributes_mutex);
    auto it = shared_opt_in().find(s.kernel_id);
    if (it != shared_opt_in().end()) limit = std::max(limit, it->second);
  }
  if (s.dynamic_shared_bytes > limit)
    bad("cudaErrorInvalidValue",
        loom::detail::concat(s.dynamic_shared_bytes, " bytes of dynamic shared memory, but the kernel may use ", limit,
                       limit == kDefaultSharedLimit
                           ? " (48 KB without cudaFuncAttributeMaxDynamicSharedMemorySize; at most 227 KB with it)"
                           : " (its cudaFuncAttributeMaxDynamicSharedMemorySize)"));
  if (s.threads == BlockThreads::kIndependent && s.dynamic_shared_bytes > 0)
    bad("cudaErrorInvalidValue", "dynamic shared memory in a kernel launched with independent threads");
}

}  // namespace

ThreadPosition& position() { return tls_position; }

namespace {

// Every block of one launch, now (the launch's configuration was checked when it was enqueued).
void run_launch(const LaunchSpec& spec, const std::function<void()>& body) {
  Launch launch;
  launch.spec = &spec;
  launch.body = &body;
  launch.num_blocks = uint64_t{spec.grid.x} * spec.grid.y * spec.grid.z;
  const unsigned threads = spec.block.x * spec.block.y * spec.block.z;

  DeviceAccess access;  // device memory is open, and no other device work runs, until we return
  if (spec.threads == BlockThreads::kCooperative) {
    Block& b = launch.block;
    b.threads = threads;
    for (unsigned w = 0; w * 32 < threads; ++w) {
      b.warps.push_back(std::make_unique<Warp>());
      unsigned lanes = std::min(32u, threads - w * 32);
      b.warps.back()->present = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    }
    b.dynamic_shared.assign(spec.dynamic_shared_bytes, 0xff);
    const std::function<void(unsigned)> worker = [&](unsigned linear) { cooperative_worker(launch, linear); };
    if constexpr (kFiberBlocks)
      run_fibers(threads, worker);
    else
      pool().run(threads, worker);
  } else {
    // A few OS threads, so that races between blocks show up under ThreadSanitizer.
    unsigned workers = static_cast<unsigned>(
        std::min<uint64_t>(launch.num_blocks, std::clamp(std::thread::hardware_concurrency(), 2u, 4u)));
    pool().run(workers, [&](unsigned) { independent_worker(launch); });
  }
  if (!launch.error.empty()) LOOM_FAIL("kernel ", spec.kernel_name, " failed: ", launch.error);
}

}  // namespace

cudaError_t launch(const LaunchSpec& spec, std::function<void()> body) {
  check_config(spec);
  return submit(spec.stream, [spec, body = std::move(body)] { run_launch(spec, body); });
}

void syncthreads(const char* file, int line) {
  Launch& launch = current_launch("__syncthreads", file, line);
  Block& b = launch.block;
  std::unique_lock<std::mutex> lock(b.mutex);
  if (launch.aborting) throw KernelAbort{};
  if (b.exited > 0) {
    lock.unlock();
    fail(launch, loom::detail::concat(describe_position(), " waits at __syncthreads at ", file, ":", line, " but ", b.exited,
                                " thread(s) of its block have returned; every thread must reach each barrier"));
  }
  if (b.arrived == 0) {
    b.site_file = file;
    b.site_line = line;
    b.site_thread = tls_thread.linear;
  } else if (b.site_line != line || std::strcmp(b.site_file, file) != 0) {
    std::string other = loom::detail::concat(b.site_file, ":", b.site_line, " (thread ", b.site_thread, ")");
    lock.unlock();
    fail(launch, loom::detail::concat("threads of one block reached different barriers: ", describe_position(), " at ", file,
                                ":", line, ", another at ", other));
  }
  const uint64_t my_generation = b.generation;
  if (++b.arrived == b.threads) {
    b.arrived = 0;
    ++b.generation;
    b.cv.notify_all();  // the round is complete: release the waiting threads
    return;
  }
  std::string scratch;
  bounded_wait(
      launch, lock, b.cv, [&] { return b.generation != my_generation; },
      [](std::string& s) -> const std::string& { return s = "the rest of its block at __syncthreads"; }, scratch);
}

void* dynamic_shared_memory() {
  Launch& launch = current_launch("dynamic shared memory");
  LOOM_CHECK(!launch.block.dynamic_shared.empty(), "the kernel reads dynamic shared memory, but was launched with 0 bytes");
  return launch.block.dynamic_shared.data();
}

namespace {

// One round of a warp-wide operation: every lane of `mask` deposits `value`, and when all have,
// each reads the slot of `source` (exchange) or the whole slot array (vote, via `all`).
void warp_round(unsigned mask, uint64_t value, int source, uint64_t* out, uint64_t* all, const char* what) {
  Launch& launch = current_launch(what);
  const unsigned lane = tls_thread.linear % 32;
  Warp& w = *launch.block.warps[tls_thread.linear / 32];
  if (!(mask & (1u << lane)))
    fail(launch, loom::detail::concat(describe_position(), " (lane ", lane, ") calls ", what, " with mask 0x", std::hex, mask,
                                ", which does not name its own lane"));
  std::unique_lock<std::mutex> lock(w.mutex);
  if (mask & ~w.present) {
    unsigned present = w.present;
    lock.unlock();
    fail(launch, loom::detail::concat(describe_position(), " calls ", what, " with mask 0x", std::hex, mask,
                                ", which names lanes that do not exist in this block (present: 0x", present, ")"));
  }
  if (mask & w.exited) {
    unsigned exited = w.exited;
    lock.unlock();
    fail(launch, loom::detail::concat(describe_position(), " calls ", what, " with mask 0x", std::hex, mask,
                                ", which names lanes that have returned (0x", exited, ")"));
  }
  if (w.arrived == 0) {
    w.round_mask = mask;
    w.round_what = what;
  } else if (w.round_mask != mask || std::strcmp(w.round_what, what) != 0) {
    std::string other = loom::detail::concat(w.round_what, " with mask 0x", std::hex, w.round_mask);
    lock.unlock();
    fail(launch, loom::detail::concat("lanes of one warp disagree: ", describe_position(), " calls ", what, " with mask 0x",
                                std::hex, mask, " while others are in ", other));
  }
  if (source < 0 || source >= 32 || !(mask & (1u << source))) {
    lock.unlock();
    fail(launch, loom::detail::concat(describe_position(), " reads lane ", source, " in ", what, ", which mask 0x", std::hex,
                                mask, " does not name"));
  }
  const int buffer = static_cast<int>(w.generation & 1);
  const uint64_t my_generation = w.generation;
  w.slots[buffer][lane] = value;
  w.arrived |= 1u << lane;
  if (w.arrived == mask) {
    w.arrived = 0;
    ++w.generation;
    w.cv.notify_all();  // every lane of the mask has deposited its value
  } else {
    std::string scratch;
    bounded_wait(
        launch, lock, w.cv, [&] { return w.generation != my_generation; },
        [](std::string& s) -> const std::string& { return s = "the other lanes of its warp mask"; }, scratch);
  }
  if (out) *out = w.slots[buffer][source];
  if (all) std::memcpy(all, w.slots[buffer], sizeof w.slots[buffer]);
}

}  // namespace

unsigned warp_exchange(unsigned mask, uint64_t value, int source_lane, uint64_t* out, const char* what) {
  warp_round(mask, value, source_lane, out, nullptr, what);
  return mask;
}

unsigned warp_vote(unsigned mask, bool predicate, const char* what) {
  uint64_t all[32];
  const int own = static_cast<int>(tls_thread.linear % 32);
  warp_round(mask, predicate ? 1 : 0, own, nullptr, all, what);
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && all[l]) ballot |= 1u << l;
  return ballot;
}

void syncwarp(unsigned mask) {
  const int own = static_cast<int>(tls_thread.linear % 32);
  warp_round(mask, 0, own, nullptr, nullptr, "__syncwarp");
}

// CUDA's answer is the set of lanes executing this call together. The emulator makes that
// deterministic: the call waits until every lane of the warp has either returned or reached
// __activemask, and answers the lanes that reached it.
unsigned active_mask() {
  Launch& launch = current_launch("__activemask");
  Warp& w = *launch.block.warps[tls_thread.linear / 32];
  std::unique_lock<std::mutex> lock(w.mutex);
  if (w.arrived == 0) {
    w.round_mask = 0;
    w.round_what = "__activemask";
  } else if (std::strcmp(w.round_what, "__activemask") != 0) {
    std::string other = w.round_what;
    lock.unlock();
    fail(launch, loom::detail::concat("lanes of one warp disagree: ", describe_position(),
                                      " calls __activemask while others are in ", other));
  }
  const int buffer = static_cast<int>(w.generation & 1);
  const uint64_t my_generation = w.generation;
  w.arrived |= 1u << (tls_thread.linear % 32);
  if (complete_active_mask_round(w)) return static_cast<unsigned>(w.slots[buffer][0]);
  std::string scratch;
  bounded_wait(
      launch, lock, w.cv, [&] { return w.generation != my_generation; },
      [](std::string& s) -> const std::string& { return s = "the other lanes of its warp to reach __activemask"; },
      scratch);
  return static_cast<unsigned>(w.slots[buffer][0]);
}

}  // namespace loom_emu

cudaError_t loom_emulated_func_set_attribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // hints only
  if (value < 0 || static_cast<size_t>(value) > loom_emu::kOptInSharedLimit) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(loom_emu::attributes_mutex);
  loom_emu::shared_opt_in()[func] = static_cast<size_t>(value);
  return cudaSuccess;
}
