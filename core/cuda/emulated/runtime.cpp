/*
 * The emulated CUDA runtime: one device that reports an H100, device memory in protected
 * mappings, pinned host memory, streams and events, copies that check their direction.
 *
 * Device memory: each cudaMalloc is its own anonymous mapping, PROT_NONE while no device work
 * runs. DeviceAccess (held by launches and copies, one at a time) opens every mapping for
 * reading and writing and closes them again. A host read of device memory thus raises SIGSEGV,
 * and the handler installed here prints which allocation was touched before the default action
 * (or AddressSanitizer's report) ends the process, the way an illegal access ends a CUDA context.
 *
 * Streams, events and stream capture live in streams.cpp; copies and memsets reach their stream
 * through its submit(), so that they are captured like kernels.
 *
 * The number of devices is 1, or what LOOM_EMULATED_GPUS says (0 emulates a machine without a
 * GPU, so that the "no GPU" paths are tested in this build too).
 */
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "core/cuda/emulated/address_sanitizer.h"
#include "core/cuda/emulated/device_memory.h"
#include "core/cuda/emulated/device_work.h"
#include "core/cuda/emulated/emulator.h"
#include "core/error.h"

namespace loom_emu {

namespace {

constexpr size_t kTotalMemory = size_t{80} << 30;  // an H100 80GB
constexpr size_t kPage = 4096;

struct Region {
  size_t mapped;     // bytes mapped (a multiple of the page size)
  size_t requested;  // bytes the caller asked for
};

struct State {
  std::recursive_mutex device_mutex;  // one piece of device work at a time
  int access_depth = 0;
  std::mutex regions_mutex;
  std::map<uintptr_t, Region> regions;  // device allocations by base address
  size_t used = 0;
  std::set<void*> pinned;
  int device_count = 1;
  int current_device = 0;
};

State& state() {
  static State* s = [] {
    auto* st = new State();  // never destroyed: storages may be freed after main returns
    if (const char* env = std::getenv("LOOM_EMULATED_GPUS")) st->device_count = std::max(0, std::atoi(env));
    return st;
  }();
  return *s;
}

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t record(cudaError_t e) {
  return record_error(e);
}

void protect_all(int prot) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.regions_mutex);
  for (const auto& [base, region] : s.regions) mprotect(reinterpret_cast<void*>(base), region.mapped, prot);
}

// Finds the allocation containing p (regions_mutex held). Returns end() when none does.
std::map<uintptr_t, Region>::const_iterator find_region(const State& s, uintptr_t p) {
  auto it = s.regions.upper_bound(p);
  if (it == s.regions.begin()) return s.regions.end();
  --it;
  return p < it->first + it->second.mapped ? it : s.regions.end();
}

// A host access to device memory: say which allocation it was, then let the default action end
// the process when the access is retried.
void on_segv(int sig, siginfo_t* info, void* context) {
  State& s = state();
  uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  auto it = find_region(s, addr);  // no lock: the process is about to end, and locking could deadlock
  if (it != s.regions.end()) {
    char message[256];
    int n = std::snprintf(message, sizeof message,
                          "loom emulated CUDA: host code accessed device memory at %p, %zu bytes into a %zu-byte "
                          "cudaMalloc allocation; copy the tensor to the CPU first (.to(kCPU))\n",
                          info->si_addr, static_cast<size_t>(addr - it->first), it->second.requested);
    if (n > 0) (void)!write(2, message, static_cast<size_t>(n));
  }
  // The default action, not the handler we replaced: a test framework's or a sanitizer's
  // handler may return or report in a loop, and a fault in device memory must end the process.
  signal(SIGSEGV, SIG_DFL);
  (void)sig;
  (void)context;
}

void install_segv_handler() {
  static std::once_flag once;
  std::call_once(once, install_device_fault_handler);
}

}  // namespace

cudaError_t record_error(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

void install_device_fault_handler() {
  struct sigaction action {};
  action.sa_sigaction = on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, nullptr);
}

namespace {

bool is_device_pointer(const void* p) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.regions_mutex);
  return find_region(s, reinterpret_cast<uintptr_t>(p)) != s.regions.end();
}

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an invalid cudaMemcpyKind";
}

// Checks that the pointers of a copy are where its kind says, and that device ranges lie
// inside one allocation each. Throws loom::Error naming the problem.
void check_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, const char* api) {
  if (count == 0) return;
  const bool dst_dev = is_device_pointer(dst), src_dev = is_device_pointer(src);
  bool want_dst_dev = dst_dev, want_src_dev = src_dev;
  switch (kind) {
    case cudaMemcpyHostToHost: want_dst_dev = want_src_dev = false; break;
    case cudaMemcpyHostToDevice: want_dst_dev = true, want_src_dev = false; break;
    case cudaMemcpyDeviceToHost: want_dst_dev = false, want_src_dev = true; break;
    case cudaMemcpyDeviceToDevice: want_dst_dev = want_src_dev = true; break;
    case cudaMemcpyDefault: break;
    default: LOOM_FAIL(api, ": invalid cudaMemcpyKind ", static_cast<int>(kind));
  }
  LOOM_CHECK(dst_dev == want_dst_dev && src_dev == want_src_dev, "cudaErrorInvalidValue: ", api, " with ",
             kind_name(kind), " got a ", dst_dev ? "device" : "host", " destination and a ", src_dev ? "device" : "host",
             " source");
  LOOM_CHECK(!dst_dev || is_device_range(dst, count), "cudaErrorInvalidValue: ", api, ": ", count,
             " bytes at the destination run past the end of its device allocation");
  LOOM_CHECK(!src_dev || is_device_range(src, count), "cudaErrorInvalidValue: ", api, ": ", count,
             " bytes at the source run past the end of its device allocation");
}

}  // namespace

DeviceAccess::DeviceAccess() {
  State& s = state();
  s.device_mutex.lock();
  if (s.access_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  State& s = state();
  if (--s.access_depth == 0) protect_all(PROT_NONE);
  s.device_mutex.unlock();
}

bool is_device_range(const void* p, size_t n) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.regions_mutex);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = find_region(s, a);
  return it != s.regions.end() && a + n <= it->first + it->second.requested;
}

void check_kernel_pointer(const char* kernel_name, int argument, const void* p) {
  if (p == nullptr || is_device_pointer(p)) return;
  LOOM_FAIL("cudaErrorIllegalAddress: kernel ", kernel_name, ": argument ", argument, " (", p,
            ") is not device memory; kernels can only read memory from cudaMalloc");
}

void mark_device_bytes(const void* p, size_t n, bool usable) {
#ifdef LOOM_EMU_ASAN
  if (usable) {
    ASAN_UNPOISON_MEMORY_REGION(p, n);
  } else {
    ASAN_POISON_MEMORY_REGION(p, n);
  }
#else
  (void)p, (void)n, (void)usable;
#endif
}

}  // namespace loom_emu

using loom_emu::record;
using loom_emu::state;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = state().device_count;
  return record(*count > 0 ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= state().device_count) return record(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "NVIDIA H100 80GB HBM3 (Loom emulated)");
  prop->totalGlobalMem = loom_emu::kTotalMemory;
  prop->sharedMemPerBlock = 48 << 10;
  prop->sharedMemPerBlockOptin = 227 << 10;
  prop->sharedMemPerMultiprocessor = 228 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024, prop->maxThreadsDim[1] = 1024, prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647, prop->maxGridSize[1] = 65535, prop->maxGridSize[2] = 65535;
  prop->major = 9, prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->l2CacheSize = 50 << 20;
  prop->memoryBusWidth = 5120;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= state().device_count) return record(cudaErrorInvalidDevice);
  state().current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (state().device_count == 0) return record(cudaErrorNoDevice);
  *device = state().current_device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  cudaError_t e = loom_emu::last_error;
  loom_emu::last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return loom_emu::last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureMerge:
      return "cudaErrorStreamCaptureMerge";
    case cudaErrorStreamCaptureUnmatched:
      return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined:
      return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation:
      return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent:
      return "cudaErrorCapturedEvent";
    case cudaErrorStreamCaptureWrongThread:
      return "cudaErrorStreamCaptureWrongThread";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge:
      return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched:
      return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined:
      return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
  }
  return "unknown error";
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  using namespace loom_emu;
  State& s = state();
  *ptr = nullptr;
  if (s.device_count == 0) return record(cudaErrorNoDevice);
  if (cudaError_t e = check_unsafe_call(); e != cudaSuccess) return e;
  if (size == 0) return cudaSuccess;
  const size_t mapped = (size + kPage - 1) / kPage * kPage;
  {
    std::lock_guard<std::mutex> lock(s.regions_mutex);
    if (mapped > kTotalMemory - s.used) return record(cudaErrorMemoryAllocation);
    s.used += mapped;
  }
  install_segv_handler();
  // Open while device work runs (cudaMalloc may be called between launches of one access).
  std::lock_guard<std::recursive_mutex> device(s.device_mutex);
  int prot = s.access_depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE;
  void* p = mmap(nullptr, mapped, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::lock_guard<std::mutex> lock(s.regions_mutex);
    s.used -= mapped;
    return record(cudaErrorMemoryAllocation);
  }
  // The tail of the last page is not part of the allocation.
  mark_device_bytes(static_cast<char*>(p) + size, mapped - size, false);
  std::lock_guard<std::mutex> lock(s.regions_mutex);
  s.regions[reinterpret_cast<uintptr_t>(p)] = Region{mapped, size};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  using namespace loom_emu;
  if (ptr == nullptr) return cudaSuccess;
  if (cudaError_t e = check_unsafe_call(); e != cudaSuccess) return e;
  State& s = state();
  std::lock_guard<std::recursive_mutex> device(s.device_mutex);  // cudaFree synchronises the device
  std::lock_guard<std::mutex> lock(s.regions_mutex);
  auto it = s.regions.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.regions.end()) return record(cudaErrorInvalidDevicePointer);
  mark_device_bytes(ptr, it->second.mapped, true);  // the address range may be reused by the host
  munmap(ptr, it->second.mapped);
  s.used -= it->second.mapped;
  s.regions.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) {
  *ptr = nullptr;
  if (cudaError_t e = loom_emu::check_unsafe_call(); e != cudaSuccess) return e;
  *ptr = std::aligned_alloc(4096, (std::max<size_t>(size, 1) + 4095) / 4096 * 4096);
  if (*ptr == nullptr) return record(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(state().regions_mutex);
  state().pinned.insert(*ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (cudaError_t e = loom_emu::check_unsafe_call(); e != cudaSuccess) return e;
  {
    std::lock_guard<std::mutex> lock(state().regions_mutex);
    if (state().pinned.erase(ptr) == 0) return record(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> lock(state().regions_mutex);
  *total = loom_emu::kTotalMemory;
  *free = loom_emu::kTotalMemory - state().used;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  loom_emu::check_copy(dst, src, count, kind, "cudaMemcpy");
  return loom_emu::submit(stream, [dst, src, count] {
    loom_emu::DeviceAccess access;
    if (count > 0) std::memmove(dst, src, count);
  });
}

// The synchronous forms run on the legacy stream and make the host wait, which a capture forbids.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (cudaError_t e = loom_emu::check_unsafe_call(); e != cudaSuccess) return e;
  return cudaMemcpyAsync(dst, src, count, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (!loom_emu::is_device_range(ptr, count)) return record(cudaErrorInvalidValue);
  return loom_emu::submit(stream, [ptr, value, count] {
    loom_emu::DeviceAccess access;
    std::memset(ptr, value, count);
  });
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (cudaError_t e = loom_emu::check_unsafe_call(); e != cudaSuccess) return e;
  return cudaMemsetAsync(ptr, value, count, nullptr);
}
