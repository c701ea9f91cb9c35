/*
 * Fibers for the emulator's cooperative launches: the CUDA threads of a block as user-level
 * contexts (ucontext) on the launching OS thread, each running until it waits at a barrier or a
 * warp round and then handing the thread to the next one, round robin.
 *
 * Why: with one OS thread per CUDA thread, every barrier round wakes the whole block through the
 * kernel, and a block reduction over 256 threads crosses a dozen rounds. On a 2-core machine
 * that made batch norm's statistics kernel take about a second per call, and the emulated
 * training tests minutes. A fiber switch is a fraction of a microsecond.
 *
 * Under ThreadSanitizer the emulator keeps one OS thread per CUDA thread (kFiberBlocks is
 * false): only real threads make a missing __syncthreads a data race that TSan can see.
 * Under AddressSanitizer each switch is announced to ASan (__sanitizer_start_switch_fiber), so
 * it checks the fibers' stacks as it does threads'.
 */
#pragma once

#include <functional>

namespace loom_emu {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kFiberBlocks = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kFiberBlocks = false;
#else
inline constexpr bool kFiberBlocks = true;
#endif
#else
inline constexpr bool kFiberBlocks = true;
#endif

// Runs body(0) ... body(n - 1) as fibers on the calling thread and returns when every one has
// returned. body must not throw (a fiber's stack cannot unwind into the caller's). Not
// reentrant: a fiber cannot start fibers of its own.
void run_fibers(unsigned n, const std::function<void(unsigned)>& body);

// Called in a fiber: lets the other fibers run and returns when the round robin comes back.
// Thread-local state is the OS thread's, shared by all fibers; a caller that keeps some saves it
// around the call.
void yield_fiber();

}  // namespace loom_emu
