/*
 * CheckpointManager: the save protocol (temporary directory -> fsync -> rename -> fsync ->
 * rewrite `latest` -> prune) and the loader that checks a checkpoint is complete before
 * handing it back. The ordering of those steps is the whole point of this file; see
 * docs/checkpoints.md for the argument that every kill point leaves a usable checkpoint.
 */
#include "nn/serialize/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "nn/serialize/atomic_file.h"
#include "nn/serialize/io_faults.h"
#include "nn/serialize/safetensors.h"

namespace loom::nn {
namespace fs = std::filesystem;

namespace {

using Json = nlohmann::ordered_json;  // keeps the user's metadata keys in their order

constexpr std::string_view kFormat = "loom-checkpoint";
constexpr int kFormatVersion = 1;
constexpr std::string_view kStepPrefix = "step-";
constexpr std::string_view kTmpPrefix = ".tmp-";
constexpr std::string_view kLatest = "latest";
constexpr std::string_view kMetaFile = "meta.json";

// "step-00000123" -> 123; nullopt for anything that is not exactly what step_dir_name makes,
// so that every step has one directory name.
std::optional<int64_t> parse_step_dir_name(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  if (CheckpointManager::step_dir_name(step) != name) return std::nullopt;
  return step;
}

bool valid_section_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

// A fresh hidden name in the run directory: pid and counter keep concurrent and successive
// temporary directories of this process apart.
fs::path temporary_dir(const fs::path& dir, const std::string& what) {
  static std::atomic<uint64_t> counter{0};
  std::string name(kTmpPrefix);
  name += what;
  name += '-';
  name += std::to_string(::getpid());
  name += '-';
  name += std::to_string(counter.fetch_add(1));
  return dir / name;
}

void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  LOOM_CHECK(!ec, "CheckpointManager: cannot remove '", path.string(), "': ", ec.message());
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  LOOM_CHECK(io_rename(from.c_str(), to.c_str()) == 0, "CheckpointManager: renaming '", from.string(),
             "' to '", to.string(), "' failed: ", std::strerror(errno));
}

}  // namespace

std::string CheckpointManager::step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

CheckpointManager::CheckpointManager(fs::path dir, int keep_last, CheckpointGroup group)
    : dir_(std::move(dir)), keep_last_(keep_last), group_(std::move(group)) {
  LOOM_CHECK(!dir_.empty(), "CheckpointManager: the run directory is empty");
  LOOM_CHECK(keep_last >= 0, "CheckpointManager: keep_last must be >= 0 (0 keeps every checkpoint), got ",
             keep_last);
  LOOM_CHECK(group_.size >= 1 && group_.rank >= 0 && group_.rank < group_.size,
             "CheckpointManager: group rank ", group_.rank, " of size ", group_.size, " is not a rank of the group");
  LOOM_CHECK(group_.size == 1 || group_.all_ok, "CheckpointManager: a group of ", group_.size,
             " ranks needs all_ok (the barrier the ranks commit with)");
}

std::string CheckpointManager::rank_dir_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d", rank);
  return buf;
}

namespace {

// The checks every save makes before touching the disk; returns the parsed metadata.
Json validated_metadata(const std::map<std::string, StateDict>& sections, const std::string& metadata_json) {
  for (const auto& [name, unused] : sections)
    LOOM_CHECK(valid_section_name(name), "CheckpointManager::save: section name '", name,
               "' is not a plain file name ([A-Za-z0-9_.-], not starting with '.')");
  try {
    return Json::parse(metadata_json);
  } catch (const nlohmann::json::exception& e) {
    LOOM_FAIL("CheckpointManager::save: metadata_json is not valid JSON: ", e.what());
  }
}

// Writes <section>.safetensors for every section into `dir` (each file fsynced, with its
// directory entry, by write_file_atomically) and returns their [{name, file, bytes}] list.
Json write_sections(const fs::path& dir, const std::map<std::string, StateDict>& sections) {
  Json list = Json::array();
  for (const auto& [section, tensors] : sections) {
    const std::string file = section + ".safetensors";
    save_safetensors(dir / file, tensors);
    std::error_code ec;
    const uint64_t bytes = fs::file_size(dir / file, ec);
    LOOM_CHECK(!ec, "CheckpointManager::save: cannot stat '", (dir / file).string(), "': ", ec.message());
    list.push_back({{"name", section}, {"file", file}, {"bytes", bytes}});
  }
  return list;
}

// meta.json (or a group's rank.json): parsed and checked to describe `step` of this format.
Json read_description(const fs::path& path, int64_t step, const std::string& where) {
  Json meta;
  try {
    meta = Json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    LOOM_FAIL(where, path.filename().string(), " is not valid JSON: ", e.what());
  }
  const std::string name = path.filename().string();
  LOOM_CHECK(meta.is_object() && meta.value("format", "") == kFormat, where, name,
             " is not a Loom checkpoint description (no \"format\": \"", kFormat, "\")");
  LOOM_CHECK(meta.contains("version") && meta["version"] == kFormatVersion, where, name, " has format version ",
             meta.contains("version") ? meta["version"].dump() : "(none)", ", this Loom reads version ",
             kFormatVersion);
  LOOM_CHECK(meta.contains("step") && meta["step"].is_number_integer() && meta["step"].get<int64_t>() == step,
             where, name, " says step ", meta.contains("step") ? meta["step"].dump() : "(none)",
             ", the directory step ", step);
  LOOM_CHECK(meta.contains("sections") && meta["sections"].is_array(), where, name, " lists no sections");
  return meta;
}

// The sections a description lists, each file checked to have the recorded size: name -> path.
std::map<std::string, fs::path> listed_sections(const Json& meta, const fs::path& dir, const std::string& where,
                                                const std::string& description_name) {
  std::map<std::string, fs::path> out;
  for (const Json& section : meta["sections"]) {
    LOOM_CHECK(section.is_object() && section.contains("name") && section["name"].is_string() &&
                   section.contains("bytes") && section["bytes"].is_number_unsigned(),
               where, "malformed section entry ", section.dump());
    const std::string name = section["name"].get<std::string>();
    LOOM_CHECK(valid_section_name(name), where, "invalid section name '", name, "'");
    LOOM_CHECK(!out.contains(name), where, "section '", name, "' is listed twice");
    const fs::path file = dir / (name + ".safetensors");
    std::error_code ec;
    const uint64_t size = fs::file_size(file, ec);
    LOOM_CHECK(!ec, where, "section '", name, "': cannot stat '", file.string(), "': ", ec.message());
    const uint64_t expected = section["bytes"].get<uint64_t>();
    LOOM_CHECK(size == expected, where, "section '", name, "': '", file.string(), "' has ", size,
               " bytes, ", description_name, " recorded ", expected);
    out.emplace(name, file);
  }
  return out;
}

// A step directory's meta.json, checked, and the number of processes that saved it.
std::pair<Json, int64_t> read_step_meta(const fs::path& step_dir, int64_t step, const std::string& where) {
  Json meta = read_description(step_dir / kMetaFile, step, where);
  LOOM_CHECK(meta.contains("metadata"), where, "meta.json has no \"metadata\"");
  const Json world = meta.value("world_size", Json(1));
  LOOM_CHECK(world.is_number_integer() && world.get<int64_t>() >= 1, where, "meta.json: invalid world_size ",
             world.dump());
  return {std::move(meta), world.get<int64_t>()};
}

}  // namespace

void CheckpointManager::prepare_save() const {
  std::error_code ec;
  const bool created = fs::create_directories(dir_, ec);
  LOOM_CHECK(!ec, "CheckpointManager::save: cannot create '", dir_.string(), "': ", ec.message());
  if (created) fsync_directory(dir_.parent_path());
  remove_leftovers();
  // A save killed after moving `latest` but before pruning leaves one checkpoint too many;
  // catching up here keeps the directory at keep_last + 1 however many saves were killed.
  if (auto current = latest_step()) prune(*current);
}

void CheckpointManager::publish(const fs::path& tmp, int64_t step) const {
  const std::string name = step_dir_name(step);
  const fs::path target = dir_ / name;
  // When the fsync that makes a rename durable fails, the rename is undone: a save that throws
  // leaves the directory as it found it (a failed fsync says nothing of what reached the disk).
  if (!fs::exists(target)) {
    rename_or_throw(tmp, target);
    try {
      fsync_directory(dir_);  // the rename is durable before `latest` can name the directory
    } catch (...) {
      ::rename(target.c_str(), tmp.c_str());
      throw;
    }
    return;
  }
  // Re-saving a step (a run resumed from an earlier checkpoint): swap the two directories
  // atomically, so the name never points at nothing even if `latest` names it.
  if (io_rename_exchange(tmp.c_str(), target.c_str()) == 0) {
    try {
      fsync_directory(dir_);
    } catch (...) {
      ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE);
      throw;
    }
    // The replaced checkpoint now lives at tmp, a .tmp-* name no load reads: removing it is
    // clean-up (the next save's remove_leftovers() retries), not part of the commit.
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return;
  }
  // File systems without RENAME_EXCHANGE: move the old one aside first. A kill between the two
  // renames leaves the name missing for a moment, which load_latest survives by falling back
  // to the newest complete checkpoint.
  LOOM_CHECK(errno == EINVAL || errno == ENOSYS, "CheckpointManager::save: exchanging '", tmp.string(), "' with '",
             target.string(), "' failed: ", std::strerror(errno));
  const fs::path aside = temporary_dir(dir_, "replaced-" + name);
  rename_or_throw(target, aside);
  if (io_rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::rename(aside.c_str(), target.c_str());  // put the old checkpoint back
    LOOM_FAIL("CheckpointManager: renaming '", tmp.string(), "' to '", target.string(), "' failed: ",
              std::strerror(err));
  }
  fsync_directory(dir_);
  remove_tree(aside);
}

bool CheckpointManager::agree(bool ok) const { return group_.size == 1 ? ok : group_.all_ok(ok); }

CheckpointManager::PendingSave CheckpointManager::begin_save(int64_t step,
                                                            const std::map<std::string, StateDict>& sections,
                                                            const std::string& metadata_json) {
  PendingSave pending;
  pending.step = step;
  std::string error;
  try {
    LOOM_CHECK(step >= 0, "CheckpointManager::save: step must be >= 0, got ", step);
    pending.metadata_json = validated_metadata(sections, metadata_json).dump();
    if (group_.rank == 0) {
      prepare_save();  // also removes the temporary directory of a killed save
      // One name for every rank of a group (no pid in it): rank 0 creates it, all write into it.
      pending.tmp = group_.size == 1 ? temporary_dir(dir_, step_dir_name(step))
                                     : dir_ / (std::string(kTmpPrefix) + step_dir_name(step) + "-group");
      std::error_code ec;
      LOOM_CHECK(fs::create_directory(pending.tmp, ec) && !ec, "CheckpointManager::save: cannot create '",
                 pending.tmp.string(), "': ", ec.message());
      fsync_directory(dir_);
    } else {
      pending.tmp = dir_ / (std::string(kTmpPrefix) + step_dir_name(step) + "-group");
    }
  } catch (const Error& e) {
    error = e.what();
    std::error_code ignored;
    if (group_.rank == 0 && !pending.tmp.empty()) fs::remove_all(pending.tmp, ignored);
  }
  // Waits until rank 0 created the directory every rank writes into.
  if (!agree(error.empty()))
    throw Error(error.empty() ? failed_elsewhere(step) : error);
  return pending;
}

void CheckpointManager::write_part(PendingSave& pending, const std::map<std::string, StateDict>& sections) const {
  if (group_.size == 1) {
    pending.sections_json = write_sections(pending.tmp, sections).dump();
    return;
  }
  const fs::path mine = pending.tmp / rank_dir_name(group_.rank);
  std::error_code ec;
  LOOM_CHECK(fs::create_directory(mine, ec) && !ec, "CheckpointManager::save: cannot create '", mine.string(),
             "': ", ec.message());
  Json description = {
      {"format", kFormat}, {"version", kFormatVersion}, {"step", pending.step}, {"rank", group_.rank}};
  description["sections"] = write_sections(mine, sections);
  // Each rank's own metadata (meta.json holds rank 0's): what a job of another layout needs to
  // know about this rank's piece (distributed/reshard.h).
  description["metadata"] = Json::parse(pending.metadata_json);
  write_file_atomically(mine / "rank.json", description.dump(2) + "\n");  // last, as meta.json
  fsync_directory(pending.tmp);
}

fs::path CheckpointManager::commit_save(const PendingSave& pending, const std::string& write_error) {
  const std::string name = step_dir_name(pending.step);
  // Waits until every rank's files are durable (or one failed): only then may rank 0 publish.
  if (!agree(write_error.empty())) {
    if (group_.rank == 0) {
      std::error_code ignored;
      fs::remove_all(pending.tmp, ignored);  // best effort; the next save removes what is left
    }
    throw Error(write_error.empty() ? failed_elsewhere(pending.step) : write_error);
  }
  std::string error;
  last_save_warning_.clear();
  if (group_.rank == 0) {
    const std::optional<int64_t> previous = latest_step();
    bool published = false;
    try {
      Json meta = {{"format", kFormat}, {"version", kFormatVersion}, {"step", pending.step}};
      if (group_.size == 1) {
        meta["sections"] = Json::parse(pending.sections_json);
      } else {
        meta["world_size"] = group_.size;
        meta["sections"] = Json::array();  // each rank's are in its rank.json
      }
      meta["metadata"] = Json::parse(pending.metadata_json);
      // meta.json last: a directory with it is one whose every section was written before it.
      write_file_atomically(pending.tmp / kMetaFile, meta.dump(2) + "\n");
      // Publish the directory under its final name in one atomic step, then point `latest` at
      // it (write_file_atomically: temporary file, fsync, rename, fsync dir), and only then
      // prune (below): until `latest` moved, an older checkpoint was the latest.
      publish(pending.tmp, pending.step);
      published = true;
      write_file_atomically(dir_ / kLatest, name + "\n");
    } catch (const Error& e) {
      error = e.what();
      std::error_code ignored;
      fs::remove_all(pending.tmp, ignored);
      if (published) error += unpublish(pending.step, previous);
    }
    // The checkpoint is committed: a failure to remove old ones loses nothing, and the next
    // save's prepare_save() tries again, so it is reported, not thrown.
    if (error.empty()) {
      try {
        prune(pending.step);
      } catch (const Error& e) {
        last_save_warning_ = e.what();
      }
    }
  }
  // Waits until rank 0 committed, so that a save that returned is the job's latest checkpoint.
  if (!agree(error.empty())) throw Error(error.empty() ? failed_elsewhere(pending.step) : error);
  return dir_ / name;
}

// After `latest` could not be moved to (or made durable at) `step`: puts back the pointer to the
// previous checkpoint and takes the new directory out of sight, so that the checkpoint that
// loads is the one that did before the save. Returns what could not be undone ("" if all was).
std::string CheckpointManager::unpublish(int64_t step, std::optional<int64_t> previous) const {
  std::string problems;
  try {
    if (latest_step() != previous) {
      if (previous)
        write_file_atomically(dir_ / kLatest, step_dir_name(*previous) + "\n");
      else
        LOOM_CHECK(::unlink((dir_ / kLatest).c_str()) == 0, "cannot remove '", (dir_ / kLatest).string(),
                   "': ", std::strerror(errno));
    }
    // A re-saved step that `latest` named before has replaced its old files: it stays.
    if (previous != step) {
      const fs::path doomed = temporary_dir(dir_, "delete-" + step_dir_name(step));
      rename_or_throw(dir_ / step_dir_name(step), doomed);
      remove_tree(doomed);
    }
    fsync_directory(dir_);
  } catch (const Error& e) {
    problems = std::string("; undoing the save also failed: ") + e.what();
  }
  return problems;
}

std::string CheckpointManager::failed_elsewhere(int64_t step) const {
  return "CheckpointManager::save: step " + std::to_string(step) + " failed on another rank; 'latest' in '" +
         dir_.string() + "' still names the previous checkpoint";
}

fs::path CheckpointManager::save(int64_t step, const std::map<std::string, StateDict>& sections,
                                 const std::string& metadata_json) {
  if (group_.size == 1) {
    // A single process throws at once, without the agreements' bookkeeping.
    PendingSave pending = begin_save(step, sections, metadata_json);
    try {
      write_part(pending, sections);
    } catch (...) {
      std::error_code ignored;
      fs::remove_all(pending.tmp, ignored);
      throw;
    }
    return commit_save(pending, "");
  }
  PendingSave pending = begin_save(step, sections, metadata_json);
  std::string error;
  try {
    write_part(pending, sections);
  } catch (const Error& e) {
    error = e.what();
  }
  return commit_save(pending, error);
}

std::optional<int64_t> CheckpointManager::latest_step() const {
  std::string text;
  try {
    text = read_file(dir_ / kLatest);
  } catch (const Error&) {
    return std::nullopt;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return parse_step_dir_name(text);
}

void CheckpointManager::remove_leftovers() const {
  std::error_code ec;
  std::vector<fs::path> leftovers;  // collected first: removing while listing may skip entries
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    // .tmp-* directories of interrupted saves and prunes; .latest.tmp-* files of interrupted
    // pointer updates (write_file_atomically's temporary names).
    if (entry.starts_with(kTmpPrefix) || entry.starts_with(".latest.tmp-")) leftovers.push_back(it->path());
  }
  LOOM_CHECK(!ec, "CheckpointManager: cannot list '", dir_.string(), "': ", ec.message());
  for (const fs::path& path : leftovers) remove_tree(path);
}

void CheckpointManager::prune(int64_t saved_step) const {
  if (keep_last_ == 0) return;
  // Older checkpoints only: newer step directories (left by a run that was later resumed from
  // an earlier checkpoint) are not this save's to judge, and `latest` no longer names them.
  std::vector<int64_t> older;
  for (int64_t s : steps())
    if (s < saved_step) older.push_back(s);
  std::sort(older.rbegin(), older.rend());
  if (older.size() < static_cast<size_t>(keep_last_)) return;
  for (size_t i = static_cast<size_t>(keep_last_) - 1; i < older.size(); ++i) {
    // Renamed out of sight first, so that a kill during the removal never leaves a half-deleted
    // step-* directory behind (the next save removes the .tmp-* one).
    const std::string name = step_dir_name(older[i]);
    const fs::path doomed = temporary_dir(dir_, "delete-" + name);
    rename_or_throw(dir_ / name, doomed);
    remove_tree(doomed);
  }
  fsync_directory(dir_);
}

std::vector<int64_t> CheckpointManager::steps() const {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return out;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code entry_ec;  // an entry removed meanwhile is skipped, not a listing failure
    if (!it->is_directory(entry_ec)) continue;
    if (auto step = parse_step_dir_name(it->path().filename().string())) out.push_back(*step);
  }
  LOOM_CHECK(!ec, "CheckpointManager: cannot list '", dir_.string(), "': ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

Checkpoint CheckpointManager::load_dir(const fs::path& step_dir, int64_t step) const {
  const std::string where = "CheckpointManager: '" + step_dir.string() + "': ";
  const auto [meta, saved_by] = read_step_meta(step_dir, step, where);
  if (saved_by != group_.size)
    throw WorldSizeMismatch(where + "saved by a job of " + std::to_string(saved_by) +
                            (saved_by == 1 ? " process" : " processes") + ", this job has " +
                            std::to_string(group_.size) + ": resume it with mpirun -np " + std::to_string(saved_by) +
                            " (and the same parallel degrees)");

  Checkpoint out;
  out.step = step;
  out.path = step_dir;
  out.metadata = meta["metadata"].dump();
  std::map<std::string, fs::path> files;
  if (saved_by == 1) {
    files = listed_sections(meta, step_dir, where + "meta.json: ", "meta.json");
  } else {
    // Complete only when every rank's part is: each rank checks all of them (stat only), so all
    // ranks agree on which checkpoint to load.
    for (int r = 0; r < group_.size; ++r) {
      const fs::path rank_dir = step_dir / rank_dir_name(r);
      const std::string rank_where = where + rank_dir_name(r) + "/";
      const Json description = read_description(rank_dir / "rank.json", step, rank_where);
      auto listed = listed_sections(description, rank_dir, rank_where + "rank.json: ", "rank.json");
      if (r == group_.rank) files = std::move(listed);
    }
  }
  for (const auto& [name, file] : files) out.sections.emplace(name, load_safetensors(file).tensors);
  return out;
}

Checkpoint CheckpointManager::load(int64_t step) const {
  const fs::path step_dir = dir_ / step_dir_name(step);
  std::error_code ec;
  LOOM_CHECK(fs::is_directory(step_dir, ec), "CheckpointManager::load: no checkpoint for step ", step, " ('",
             step_dir.string(), "' is not a directory)");
  return load_dir(step_dir, step);
}

template <class Loaded>
std::optional<Loaded> CheckpointManager::find_latest(
    const std::function<Loaded(const fs::path&, int64_t)>& load) const {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return std::nullopt;

  std::string note;
  std::optional<int64_t> latest_step;
  const fs::path latest = dir_ / kLatest;
  if (fs::exists(latest, ec)) {
    std::string text;
    try {
      text = read_file(latest);
    } catch (const Error& e) {
      note = std::string("'latest' cannot be read (") + e.what() + ")";
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
      text.pop_back();
    if (note.empty()) {
      latest_step = parse_step_dir_name(text);
      if (!latest_step) {
        note = "'latest' does not name a step directory (it holds \"" + text.substr(0, 64) + "\")";
      } else {
        try {
          return load(dir_ / text, *latest_step);
        } catch (const WorldSizeMismatch&) {
          throw;
        } catch (const Error& e) {
          note = "'latest' names " + text + ", which is incomplete (" + e.what() + ")";
        }
      }
    }
  } else {
    note = "'latest' is missing";
  }

  std::vector<int64_t> candidates = steps();
  std::string rejected;
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    if (latest_step && *it == *latest_step) continue;  // already tried, and its failure is in note
    const std::string name = step_dir_name(*it);
    try {
      Loaded c = load(dir_ / name, *it);
      c.note = note + "; loaded " + name + ", the newest complete checkpoint";
      return c;
    } catch (const WorldSizeMismatch&) {
      throw;
    } catch (const Error& e) {
      rejected += "; " + name + " is incomplete (" + e.what() + ")";
    }
  }
  if (candidates.empty() && !fs::exists(latest, ec)) return std::nullopt;  // a fresh run
  LOOM_FAIL("CheckpointManager::load_latest: '", dir_.string(),
            "' holds checkpoints but none is complete: ", note, rejected);
}

std::optional<Checkpoint> CheckpointManager::load_latest() const {
  return find_latest<Checkpoint>([this](const fs::path& step_dir, int64_t step) { return load_dir(step_dir, step); });
}

std::optional<CheckpointParts> CheckpointManager::load_latest_parts() const {
  return find_latest<CheckpointParts>(
      [this](const fs::path& step_dir, int64_t step) { return load_dir_parts(step_dir, step); });
}

CheckpointParts CheckpointManager::load_dir_parts(const fs::path& step_dir, int64_t step) const {
  const std::string where = "CheckpointManager: '" + step_dir.string() + "': ";
  const auto [meta, saved_by] = read_step_meta(step_dir, step, where);
  CheckpointParts out;
  out.step = step;
  out.path = step_dir;
  out.metadata = meta["metadata"].dump();
  if (saved_by == 1) {
    out.files.push_back(listed_sections(meta, step_dir, where + "meta.json: ", "meta.json"));
    out.rank_metadata.push_back(out.metadata);
    return out;
  }
  for (int r = 0; r < saved_by; ++r) {
    const fs::path rank_dir = step_dir / rank_dir_name(r);
    const std::string rank_where = where + rank_dir_name(r) + "/";
    const Json description = read_description(rank_dir / "rank.json", step, rank_where);
    out.files.push_back(listed_sections(description, rank_dir, rank_where + "rank.json: ", "rank.json"));
    out.rank_metadata.push_back(description.contains("metadata") ? description["metadata"].dump() : "{}");
  }
  return out;
}

std::map<std::string, StateDict> CheckpointParts::load_rank(int r) const {
  LOOM_CHECK(r >= 0 && r < ranks(), "CheckpointParts::load_rank: rank ", r, " of a checkpoint saved by ", ranks(),
             " processes ('", path.string(), "')");
  std::map<std::string, StateDict> sections;
  for (const auto& [name, file] : files[static_cast<size_t>(r)]) sections.emplace(name, load_safetensors(file).tensors);
  return sections;
}

}  // namespace loom::nn
