/*
 * Asynchronous checkpoints: the training loop stops only to copy its state into host memory;
 * a background thread writes the files while the next steps run, and the checkpoint is
 * committed (published and named by `latest`) at the first step boundary after every rank's
 * writer finished.
 *
 *   step k     save():  snapshot (deep copies on the host) ─► begin_save (agree) ─► writer thread
 *   step k+1   poll():  writers finished on every rank?  no ─► train on
 *   step k+2   poll():                                   yes ─► commit_save (agree, rank 0
 *                                                              publishes, moves `latest`)
 *
 * Why the commit waits for a step boundary instead of happening on the writer thread: with a
 * group, committing needs agreements (collectives), and the MPI backend runs every group's
 * operations in one FIFO per process, so a collective issued from the writer thread could be
 * ordered differently on different ranks and deadlock. Only the calling (training) thread ever
 * takes part in an agreement; the writer thread only writes its rank's files.
 *
 * A crash while the writer runs leaves a temporary directory, which no reader looks at: the
 * previous checkpoint stays `latest` and intact (tests/nn/test_async_checkpoint.cpp kills the
 * process during background writes to show it). The cost is memory: one host copy of the state
 * (kept between saves as a buffer, so that later snapshots copy into mapped pages); and a
 * pending save is finished (waited for) before the next starts.
 */
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "nn/serialize/checkpoint.h"

namespace loom::nn {

class AsyncCheckpointer {
 public:
  // Saves through `manager` (which must outlive this object; its group decides who agrees).
  explicit AsyncCheckpointer(CheckpointManager& manager);
  // Joins a running writer without committing its checkpoint: `latest` keeps naming the last
  // committed one (call wait() first to keep the pending save).
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Copies `sections` to host memory and starts writing them as checkpoint `step`; returns as
  // soon as the copy is made (the caller may then change its tensors). A save still pending is
  // finished first (wait()). Collective with a group. Throws what CheckpointManager::save
  // throws for bad arguments.
  void save(int64_t step, const std::map<std::string, StateDict>& sections, const std::string& metadata_json = "{}");

  // At a step boundary: commits the pending save if every rank's writer has finished, and
  // returns its directory; nullopt when nothing was committed now. Collective with a group
  // while a save is pending (one agreement; none otherwise: every rank knows alike whether one
  // is). Throws loom::Error, on every rank, if any rank's write failed.
  std::optional<std::filesystem::path> poll();

  // Blocks until the pending save is written and committed (collective with a group); returns
  // its directory, nullopt if none was pending.
  std::optional<std::filesystem::path> wait();

  bool pending() const { return pending_.has_value(); }
  // Seconds the last save() held the caller (snapshot, agreement and thread start).
  double last_pause_seconds() const { return last_pause_seconds_; }

 private:
  void join();
  std::filesystem::path commit();

  CheckpointManager& manager_;
  std::optional<CheckpointManager::PendingSave> pending_;
  // What the writer writes; owned here, not shared. Kept after the commit as the next save's
  // buffers: one copy of the state lives on for the object's lifetime.
  std::map<std::string, StateDict> snapshot_;
  std::thread writer_;
  std::atomic<bool> written_{false};
  std::string write_error_;  // set by the writer before written_
  double last_pause_seconds_ = 0;
};

// Deep copies of every tensor of `sections`, contiguous and on the host: a snapshot that later
// in-place updates of the originals (the optimizer's next step) cannot change.
std::map<std::string, StateDict> host_snapshot(const std::map<std::string, StateDict>& sections);
// The same into `into`, reusing its tensors (same section, key, shape and dtype) as buffers.
void host_snapshot(const std::map<std::string, StateDict>& sections, std::map<std::string, StateDict>& into);

}  // namespace loom::nn
