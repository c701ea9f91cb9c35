/*
 * Training checkpoints in a run directory, written so that killing the process (or losing
 * power) at any moment leaves `load_latest()` a complete checkpoint to resume from:
 *
 *   run/
 *     latest                      "step-00000300\n": the newest complete checkpoint
 *     step-00000200/              model.safetensors, optimizer.safetensors, ..., meta.json
 *     step-00000300/
 *     .tmp-step-00000400-<pid>-<n>/   a save in progress (removed by the next save)
 *
 * A checkpoint is built in a hidden temporary directory, every file fsynced, the directory
 * renamed into place, and only then is `latest` atomically rewritten; old checkpoints are
 * pruned after that. docs/checkpoints.md walks through why every kill point is safe.
 *
 * One writer per run directory: a second process saving into the same directory at the same
 * time would remove the other's temporary directory.
 *
 * A job of several processes (`mpirun -np N train ...`) saves one checkpoint together, each rank
 * its own state (a tensor-parallel shard of the model, a ZeRO shard of the optimizer, its random
 * generator and loader position), as one atomic commit across the ranks:
 *
 *   run/step-00000300/   meta.json (world_size N), rank-00000/ ... rank-0000{N-1}/
 *                        each rank-R/ holding R's <section>.safetensors and rank.json
 *
 *   rank 0     clean up leftovers, create .tmp-step-00000300/         ─┐ agree: ready
 *   every rank write rank-R/ files, fsync them, rank.json last, fsync  ─┤ agree: all written
 *   rank 0     meta.json, rename to step-00000300, fsync, `latest`     ─┘ agree: committed
 *
 * A rank killed anywhere before the second agreement leaves only a .tmp-* directory, which no
 * reader looks at; after it, every rank's files are durable and rank 0 alone finishes the commit.
 * A checkpoint counts as complete only when meta.json and all N rank.json files are there and
 * every file has the size they record, so every rank of a resumed job reaches the same verdict
 * on the same files and all resume from the same step.
 */
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/state_dict.h"

namespace loom::nn {

// One loaded checkpoint.
struct Checkpoint {
  int64_t step = 0;
  std::map<std::string, StateDict> sections;  // "model", "optimizer", ... as saved
  std::string metadata;                       // the JSON given to save() (re-serialised, compact)
  std::filesystem::path path;                 // the step directory it was read from
  // Empty when `latest` led here; otherwise why load_latest fell back to this checkpoint
  // ("'latest' is missing; loaded step-00000200, the newest complete checkpoint").
  std::string note;
};

// Every saving rank's part of one checkpoint, for a job of another layout that reshards it
// (distributed/reshard.h): part r is what rank r of the saving job wrote. Complete (every file
// there, of its recorded size) when load_latest_parts returns it; the tensors are read by
// load_rank, so that a reader reads only the ranks it needs.
struct CheckpointParts {
  int64_t step = 0;
  // Per saving rank: section name ("model", ...) -> its file.
  std::vector<std::map<std::string, std::filesystem::path>> files;
  // Per saving rank, the metadata JSON it gave save() (its own, not only rank 0's); "{}" for a
  // checkpoint written before ranks recorded theirs.
  std::vector<std::string> rank_metadata;
  std::string metadata;  // rank 0's, as Checkpoint::metadata
  std::filesystem::path path;
  std::string note;  // as Checkpoint::note

  int ranks() const { return static_cast<int>(files.size()); }
  // Saving rank r's sections. Throws loom::Error for r outside [0, ranks()) or a file that
  // cannot be read.
  std::map<std::string, StateDict> load_rank(int r) const;
};

// load_latest() of a checkpoint saved by another number of processes than the group has: not a
// damaged checkpoint to skip, but a job started wrongly (or one that must reshard it).
class WorldSizeMismatch : public Error {
 public:
  using Error::Error;
};

// The job whose ranks save checkpoints together (see the header comment). The default is a
// single process, which writes the flat layout (no rank-R/ directories).
struct CheckpointGroup {
  int rank = 0;
  int size = 1;
  // Called by every rank with whether its part went well; returns true when it did on every rank.
  // It is a barrier: it returns only once every rank called it (e.g. an all-reduce of the flags).
  // Called from the thread that calls save(). Required when size > 1.
  std::function<bool(bool ok)> all_ok;
};

class CheckpointManager {
 public:
  // keep_last: how many checkpoints save() keeps (the one just saved included); 0 keeps all.
  // Throws loom::Error if keep_last is negative, or for a group with size < 1, a rank outside
  // [0, size), or size > 1 without all_ok. Nothing is created until the first save().
  explicit CheckpointManager(std::filesystem::path dir, int keep_last = 3, CheckpointGroup group = {});

  // Writes dir/step-<step, 8 digits>/<section>.safetensors for every section, plus meta.json
  // holding `metadata_json` (any JSON value, e.g. "{\"epoch\": 3, \"lr\": 0.001}"), then
  // points dir/latest at it and prunes: of the checkpoints older than `step`, the newest
  // keep_last - 1 stay (step directories newer than `step`, left by a run that was resumed
  // from an earlier checkpoint, are not touched). Saving a step that already exists replaces
  // it atomically. Leftovers of interrupted saves (.tmp-* directories, an unpruned checkpoint)
  // are cleaned up first, so at most keep_last + 1 checkpoints exist at any moment.
  // Returns the checkpoint's directory.
  // With a group of size > 1 the call is collective: every rank calls it with the same step and
  // its own sections (metadata_json is rank 0's); when any rank fails, every rank throws and
  // `latest` still names the previous checkpoint.
  // Throws loom::Error for step < 0, a section name that is not [A-Za-z0-9_-][A-Za-z0-9_.-]*
  // (or is "meta"), invalid metadata JSON, and any I/O failure (naming the path and
  // strerror); a failed save leaves `latest` and the existing checkpoints untouched, and no
  // file of its own outside a .tmp-* name (which no load reads and the next save removes).
  // Failing to prune old checkpoints after the commit does not fail the save (see
  // last_save_warning()).
  std::filesystem::path save(int64_t step, const std::map<std::string, StateDict>& sections,
                             const std::string& metadata_json = "{}");

  // The checkpoint `latest` names. If `latest` is missing, malformed, or names a checkpoint
  // that is incomplete (a user deleted or damaged files), the newest complete step-* directory
  // instead, with Checkpoint::note saying so. std::nullopt when the directory holds no
  // checkpoint at all (a fresh run). Throws loom::Error when checkpoints exist but none is
  // complete, listing why each was rejected: silently starting from scratch would be worse.
  // With a group: this rank's sections (and rank 0's metadata); a checkpoint counts as complete
  // only when every rank's part is, and one saved by another number of ranks is an error that
  // says how many. Every rank reads the same files, so all reach the same checkpoint.
  std::optional<Checkpoint> load_latest() const;

  // The checkpoint load_latest() would choose, whatever number of processes saved it: every
  // saving rank's files and metadata, what a job of another layout reads to reshard it (each
  // rank of the loading job reads them itself: no collective is needed).
  std::optional<CheckpointParts> load_latest_parts() const;

  // The checkpoint of one step; throws loom::Error (naming the file and the problem) if it
  // is missing or incomplete.
  Checkpoint load(int64_t step) const;

  // Steps of the step-* directories present, ascending (complete or not).
  std::vector<int64_t> steps() const;

  const std::filesystem::path& dir() const { return dir_; }
  int keep_last() const { return keep_last_; }
  const CheckpointGroup& group() const { return group_; }
  // "rank-00003": the directory of a rank's files in a group checkpoint.
  static std::string rank_dir_name(int rank);

  // save() in its three stages, for AsyncCheckpointer (async_checkpoint.h), which writes the
  // files on a background thread while training goes on:
  //   begin_save   collective: checks the arguments; rank 0 cleans up and creates the
  //                temporary directory (throws on every rank if any failed)
  //   write_part   this rank's files into it, fsynced; no agreement, so any thread may run it
  //   commit_save  collective: agrees that every rank wrote its part (write_error empty), then
  //                rank 0 writes meta.json, publishes the directory and moves `latest`
  struct PendingSave {
    int64_t step = -1;
    std::filesystem::path tmp;
    std::string metadata_json;  // validated
    std::string sections_json;  // a single process's section list, for meta.json
  };
  PendingSave begin_save(int64_t step, const std::map<std::string, StateDict>& sections,
                         const std::string& metadata_json);
  void write_part(PendingSave& pending, const std::map<std::string, StateDict>& sections) const;
  std::filesystem::path commit_save(const PendingSave& pending, const std::string& write_error);
  // "step-00000123"
  static std::string step_dir_name(int64_t step);
  // Empty, or why the last save (which succeeded) could not remove the checkpoints beyond
  // keep_last; the next save tries again.
  const std::string& last_save_warning() const { return last_save_warning_; }

 private:
  Checkpoint load_dir(const std::filesystem::path& step_dir, int64_t step) const;
  CheckpointParts load_dir_parts(const std::filesystem::path& step_dir, int64_t step) const;
  // load_latest's choice of checkpoint (`latest`, else the newest complete one), read by `load`;
  // `note` says why it fell back.
  template <class Loaded>
  std::optional<Loaded> find_latest(
      const std::function<Loaded(const std::filesystem::path&, int64_t)>& load) const;
  // all_ok over the group (the flag itself for a single process).
  bool agree(bool ok) const;
  std::string failed_elsewhere(int64_t step) const;
  void prepare_save() const;
  // Moves a finished temporary directory to dir/step_dir_name(step), replacing an existing one
  // atomically, and makes the rename durable.
  void publish(const std::filesystem::path& tmp, int64_t step) const;
  // The step `latest` names; nullopt when it is missing or malformed.
  std::optional<int64_t> latest_step() const;
  void remove_leftovers() const;
  std::string unpublish(int64_t step, std::optional<int64_t> previous) const;
  void prune(int64_t saved_step) const;

  std::filesystem::path dir_;
  int keep_last_;
  CheckpointGroup group_;
  std::string last_save_warning_;
};

}  // namespace loom::nn
