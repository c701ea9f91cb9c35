/*
 * The fibers of fiber.h: one ucontext and one mmap'd stack per fiber, a scheduler on the
 * launching thread that resumes each unfinished fiber in turn.
 */
#include "core/cuda/emulated/fiber.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "core/cuda/emulated/address_sanitizer.h"
#include "core/error.h"

#ifdef LOOM_EMU_ASAN
#include <dlfcn.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace loom_emu {

namespace {

// Kernel bodies are shallow, but ASan's redzones and an error message built with concat() while
// unwinding need room. Pages are touched only as used (MAP_NORESERVE).
constexpr size_t kStackBytes = size_t{256} << 10;

// A fiber's stack with a PROT_NONE guard page below it, so that an overflow faults instead of
// writing into the next fiber's stack.
struct Stack {
  void* mapping = nullptr;
  size_t mapping_bytes = 0;
  void* bottom = nullptr;  // lowest usable address
  size_t bytes = 0;

  Stack() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    mapping_bytes = kStackBytes + page;
    mapping = mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    LOOM_CHECK(mapping != MAP_FAILED, "emulated CUDA: cannot map a ", kStackBytes,
               "-byte fiber stack: ", std::strerror(errno));
    LOOM_CHECK(mprotect(mapping, page, PROT_NONE) == 0,
               "emulated CUDA: cannot protect a fiber's guard page: ", std::strerror(errno));
    bottom = static_cast<char*>(mapping) + page;
    bytes = kStackBytes;
  }
  ~Stack() {
#ifdef LOOM_EMU_ASAN
    // fiber_entry's frame never returns, so the redzones around its locals are still in the
    // shadow; left there, they would poison whatever is mapped at these addresses next (CI saw
    // LeakSanitizer's own symbolizer trip over them at exit and hang).
    ASAN_UNPOISON_MEMORY_REGION(bottom, bytes);
#endif
    munmap(mapping, mapping_bytes);
  }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
};

// Stacks are kept for the thread's next launch: a block is up to 1024 threads, and launches come
// thousands a second.
thread_local std::vector<std::unique_ptr<Stack>> tls_stacks;

struct Fiber {
  ucontext_t context{};
  Stack* stack = nullptr;
  unsigned index = 0;
  bool finished = false;
  void* fake_stack = nullptr;  // ASan's fake stack frames of this fiber while it is switched out
};

struct Scheduler {
  ucontext_t home{};  // the launching thread's context
  const std::function<void(unsigned)>* body = nullptr;
  Fiber* current = nullptr;
  const void* home_bottom = nullptr;  // the launching thread's stack, as ASan reports it
  size_t home_bytes = 0;
};
thread_local Scheduler* tls_scheduler = nullptr;

// ASan's fiber annotations: start before a switch (naming the stack switched to), finish right
// after arriving (getting the stack switched from). No-ops without ASan.
void start_switch(void** fake_stack_save, const void* bottom, size_t bytes) {
#ifdef LOOM_EMU_ASAN
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, bytes);
#else
  (void)fake_stack_save, (void)bottom, (void)bytes;
#endif
}
void finish_switch(void* fake_stack_save, const void** bottom_old, size_t* bytes_old) {
#ifdef LOOM_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, bytes_old);
#else
  (void)fake_stack_save, (void)bottom_old, (void)bytes_old;
#endif
}

// Under ASan, swapcontext is intercepted, and the interceptor clears the shadow of the whole
// stack switched to on every call (32 KB for a 256 KB stack): that made the emulated training
// tests ten times slower than without ASan. This file announces each switch to ASan itself
// (below), and a fiber's frames are unpoisoned as they return or, on a throw, by ASan's
// no-return handler, so libc's own swapcontext is called.
using SwapContext = int (*)(ucontext_t*, const ucontext_t*);
SwapContext libc_swapcontext() {
#ifdef LOOM_EMU_ASAN
  static const SwapContext real = [] {
    void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void* symbol = libc ? dlsym(libc, "swapcontext") : nullptr;
    return symbol ? reinterpret_cast<SwapContext>(symbol) : &swapcontext;
  }();
  return real;
#else
  return &swapcontext;
#endif
}

void fiber_entry() {
  Scheduler& s = *tls_scheduler;
  Fiber& f = *s.current;
  finish_switch(nullptr, &s.home_bottom, &s.home_bytes);  // first arrival: no fake stack yet
  try {
    (*s.body)(f.index);
  } catch (...) {
    // The caller's contract is that body does not throw; unwinding cannot leave this stack.
    std::terminate();
  }
  f.finished = true;
  start_switch(nullptr, s.home_bottom, s.home_bytes);  // nullptr: this fiber's frames are gone for good
  libc_swapcontext()(&f.context, &s.home);             // never resumed
}

}  // namespace

void run_fibers(unsigned n, const std::function<void(unsigned)>& body) {
  LOOM_CHECK(tls_scheduler == nullptr, "emulated CUDA: a kernel launch from inside a kernel");
  while (tls_stacks.size() < n) tls_stacks.push_back(std::make_unique<Stack>());
  std::vector<Fiber> fibers(n);
  Scheduler s;
  s.body = &body;
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = fibers[i];
    f.index = i;
    f.stack = tls_stacks[i].get();
    LOOM_CHECK(getcontext(&f.context) == 0, "emulated CUDA: getcontext failed: ", std::strerror(errno));
    f.context.uc_stack.ss_sp = f.stack->bottom;
    f.context.uc_stack.ss_size = f.stack->bytes;
    f.context.uc_link = nullptr;  // fiber_entry switches home itself
    makecontext(&f.context, fiber_entry, 0);
  }
  tls_scheduler = &s;
  for (unsigned live = n; live > 0;) {
    for (Fiber& f : fibers) {
      if (f.finished) continue;
      s.current = &f;
      void* home_fake_stack = nullptr;
      start_switch(&home_fake_stack, f.stack->bottom, f.stack->bytes);
      libc_swapcontext()(&s.home, &f.context);  // runs f until it yields or returns
      finish_switch(home_fake_stack, nullptr, nullptr);
      if (f.finished) --live;
    }
  }
  tls_scheduler = nullptr;
}

void yield_fiber() {
  Scheduler& s = *tls_scheduler;
  Fiber& f = *s.current;
  start_switch(&f.fake_stack, s.home_bottom, s.home_bytes);
  libc_swapcontext()(&f.context, &s.home);
  finish_switch(f.fake_stack, &s.home_bottom, &s.home_bytes);
}

}  // namespace loom_emu
