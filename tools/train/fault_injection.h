/*
 * Fault injection for the reliability tests (tests/tools/kill_resume_test.sh): makes one rank
 * of a `train` job die at an exact point, so that a test can kill it mid-epoch or right at an
 * epoch boundary, between two checkpoints, on every run alike. A timer or a watcher outside
 * the job could only aim roughly, and would sometimes hit a checkpoint instead.
 *
 *   LOOM_FAULT_INJECT=kill:rank=1:step=15   rank 1 raises SIGKILL when optimizer step 15 is done
 *
 * Unset (as in every normal run), it costs one getenv at start-up. Malformed values are an
 * error that says what is expected, not silently ignored: a test that meant to kill a rank and
 * did not would pass for the wrong reason.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace loom::train {

struct InjectedFault {
  int rank = 0;
  int64_t step = 0;  // after this optimizer step
};

// The fault LOOM_FAULT_INJECT asks for; nullopt when it is unset. Throws loom::Error naming
// the variable and the expected form when it is set but malformed.
std::optional<InjectedFault> injected_fault_from_env();
std::optional<InjectedFault> parse_injected_fault(const std::string& spec);

// Called after every optimizer step: SIGKILLs this process when `fault` names its rank and step.
void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t step);

}  // namespace loom::train
