/*
 * Input checks of kernels captured into a CUDA graph (CUDA builds; see core/cuda_graph.h).
 *
 * Run eagerly, a kernel that meets invalid input (nll_loss's class index out of range) leaves a
 * flag that the host reads right after the launch and turns into the CPU's error. During a
 * capture the host cannot wait for a kernel, so the flag becomes a device word that the graph
 * owns: every replay's kernels record into it, and the host reads the words where it next waits
 * for the GPU (cuda::synchronize(), a copy between host and device such as .item()). The error
 * then names the check at that synchronisation, as PyTorch's device-side asserts do.
 */
#pragma once

#include <string>

namespace loom::cuda {

// A device word, "no error" (all ones) to begin with, for one check of the kernel being captured
// on the current stream, described by `what` ("nll_loss: a target out of bounds for 10 classes").
// The kernel stores the smallest bad position in it, which the report names after `position`
// ("batch index"). Owned by the graph being captured, freed with it. Throws loom::Error when the
// current stream is not being captured by a cuda::CudaGraph.
unsigned long long* capture_check_word(std::string what, std::string position = "batch index");

// Throws loom::Error naming the first captured check whose word a replay's kernel set, and the
// index it recorded; that word is reset so the graph can run again. Free when no graph holds a
// check; else one small device-to-host copy per check word.
void report_failed_graph_checks();

}  // namespace loom::cuda
