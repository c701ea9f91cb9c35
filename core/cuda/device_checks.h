/*
 * Input checks that kernels make on the GPU (CUDA builds).
 *
 * A kernel that meets invalid input (nll_loss's class index out of range, an index outside its
 * dimension, a max-pool index outside its plane) stores the smallest bad position in a device
 * word, and leaves the bad element out of its result. The host does not wait for the kernel to
 * find out: a wait per op would drain the queue of launches that a GPU step lives on, and
 * PyTorch's device-side asserts do not wait either. The host reads the words where it next waits
 * for the GPU anyway: cuda::synchronize(), and every copy between host and device (.item(),
 * .to(kCPU), a checkpoint's save). The error then names the check and the first bad position.
 * - Eagerly, a word belongs to one check ("nll_loss: a target out of bounds for 10 classes") on
 *   one stream. Every launch of that check on that stream records into it, and a wait for that
 *   stream, or for the whole device, reads it.
 * - During a CUDA graph capture, the word belongs to the graph: every replay records into it, and
 *   the next wait after a replay reads it.
 * A failed check is reported once; its word is then reset.
 *
 * cuda::set_blocking_checks(true) (core/cuda.h), or LOOM_CUDA_BLOCKING_CHECKS=1 in the
 * environment, makes each eager check wait for its kernel and throw at the op itself, as
 * CUDA_LAUNCH_BLOCKING=1 does for PyTorch's asserts: slower, and meant for finding the call.
 */
#pragma once

#include <string>
#include <vector>

#include "core/cuda.h"

namespace loom::cuda {

// A device word, "no error" (all ones) to begin with, for one check of the kernel about to be
// launched on the current stream, described by `what`. The kernel stores the smallest bad
// position in it (an atomic minimum), which the report names after `position` ("batch index").
// During a capture the word is the capturing graph's (loom::Error when no cuda::CudaGraph captures
// the stream), otherwise the stream's.
unsigned long long* device_check_word(const std::string& what, const std::string& position = "batch index");

// Call after launching the kernel that writes device_check_word's word. With blocking checks (and
// no capture) it waits for that kernel and throws its failure now; otherwise it does nothing.
void finish_device_check();

// Throw loom::Error naming the first failed check (and how many more failed) among the words that
// the host's wait has made readable: after a wait for the whole device, all of them; after a wait
// for one stream, that stream's. Graphs' words are read after either. Free when no check ran
// since the last report and no graph holds a check; else one small device-to-host copy per stream
// and per graph word.
void report_failed_device_checks();
void report_failed_device_checks(StreamHandle waited_for);

// The capturing graph's half (core/cuda/graph.cpp), for device_check_word and the reports: a word
// owned by the graph that captures the current stream, and the failed words of every graph, reset
// as they are read (their messages say that a replay found them).
unsigned long long* graph_check_word(const std::string& what, const std::string& position);
void collect_failed_graph_checks(std::vector<std::string>& failures);

}  // namespace loom::cuda
