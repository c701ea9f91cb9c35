/*
 * Fault injection for the reliability tests (tests/tools/kill_resume_test.sh,
 * tests/tools/train_faults_test.sh): makes a `train` job meet a fault at an exact point, on
 * every run alike. A timer or a watcher outside the job could only aim roughly, and would
 * sometimes hit a checkpoint instead.
 *
 *   LOOM_FAULT_INJECT=kill:rank=1:step=15         rank 1 raises SIGKILL when optimizer step 15 is done
 *   LOOM_FAULT_INJECT=io:op=fsync:nth=2:errno=ENOSPC[:step=S]
 *        the 2nd fsync of the checkpoint of step S (without :step, the first checkpoint) fails
 *        with ENOSPC; op is write, fsync, rename or any (nn/serialize/io_faults.h); errno is
 *        ENOSPC, EIO, EDQUOT or EROFS
 *   LOOM_FAULT_INJECT=loader:sample=I:throw       reading training example I throws
 *   LOOM_FAULT_INJECT=loader:sample=I:hang        reading training example I never returns
 *   LOOM_FAULT_INJECT=data:step=N:truncate|delete  after optimizer step N, the --data file is cut
 *        to half its size, or deleted, under the running job (as a user or a cleanup job might)
 *
 * Unset (as in every normal run), it costs one getenv at start-up. Malformed values are an
 * error that says what is expected, not silently ignored: a test that meant to inject a fault
 * and did not would pass for the wrong reason.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/dataset.h"
#include "nn/serialize/io_faults.h"

namespace loom::train {

struct InjectedFault {
  enum class Kind { kKill, kIo, kLoader, kData };
  Kind kind = Kind::kKill;
  int rank = 0;       // kill
  int64_t step = 0;   // kill, data: after this optimizer step; io: the checkpoint of this step (0: the first)
  nn::IoFault io;     // io
  int64_t sample = 0; // loader: the training example whose reading fails
  bool hang = false;  // loader: never returns (instead of throwing)
  bool remove = false;  // data: delete the file (instead of truncating it)
};

// The fault LOOM_FAULT_INJECT asks for; nullopt when it is unset. Throws loom::Error naming
// the variable and the expected forms when it is set but malformed.
std::optional<InjectedFault> injected_fault_from_env();
std::optional<InjectedFault> parse_injected_fault(const std::string& spec);

// Called after every optimizer step: SIGKILLs this process when a kill fault names its rank and
// step; truncates or deletes `data_file` (on rank 0) when a data fault names the step.
void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t step,
                        const std::string& data_file);

// Called before each checkpoint save: arms an io fault for the save of `step` (once).
void maybe_arm_io_fault(std::optional<InjectedFault>& fault, int64_t step);

// `dataset`, or a loader fault's wrapper around it, whose example `sample` throws or hangs.
std::shared_ptr<data::Dataset> with_loader_fault(const std::optional<InjectedFault>& fault,
                                                 std::shared_ptr<data::Dataset> dataset);

}  // namespace loom::train
