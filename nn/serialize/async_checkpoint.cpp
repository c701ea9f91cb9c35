#include "nn/serialize/async_checkpoint.h"

#include <chrono>

#include "core/error.h"

namespace loom::nn {

void host_snapshot(const std::map<std::string, StateDict>& sections, std::map<std::string, StateDict>& into) {
  std::map<std::string, StateDict> copy;
  for (const auto& [name, tensors] : sections) {
    StateDict& out = copy[name];
    const StateDict* before = into.count(name) ? &into.at(name) : nullptr;
    for (const auto& [key, tensor] : tensors) {
      // The previous snapshot's buffer when it fits: copying into memory that is already
      // mapped is several times faster than into fresh pages, which the kernel must fault in
      // and zero first (that was most of the pause).
      if (before && before->contains(key)) {
        Tensor buffer = before->at(key);
        if (buffer.sizes() == tensor.sizes() && buffer.dtype() == tensor.dtype()) {
          buffer.copy_(tensor);
          out.insert(key, buffer);
          continue;
        }
      }
      // clone() of a host tensor, or the copy that moving a device tensor to the host makes.
      out.insert(key, tensor.device().is_cpu() ? tensor.clone() : tensor.to(kCPU).contiguous());
    }
  }
  into = std::move(copy);
}

std::map<std::string, StateDict> host_snapshot(const std::map<std::string, StateDict>& sections) {
  std::map<std::string, StateDict> copy;
  host_snapshot(sections, copy);
  return copy;
}

AsyncCheckpointer::AsyncCheckpointer(CheckpointManager& manager) : manager_(manager) {}

AsyncCheckpointer::~AsyncCheckpointer() { join(); }

void AsyncCheckpointer::join() {
  if (writer_.joinable()) writer_.join();
}

void AsyncCheckpointer::save(int64_t step, const std::map<std::string, StateDict>& sections,
                             const std::string& metadata_json) {
  if (pending_) wait();
  const auto start = std::chrono::steady_clock::now();
  host_snapshot(sections, snapshot_);
  pending_ = manager_.begin_save(step, snapshot_, metadata_json);
  written_ = false;
  write_error_.clear();
  writer_ = std::thread([this] {
    try {
      manager_.write_part(*pending_, snapshot_);
    } catch (const std::exception& e) {
      write_error_ = e.what();
    }
    written_ = true;  // after write_error_: the training thread reads it once this is true
  });
  last_pause_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::filesystem::path AsyncCheckpointer::commit() {
  join();
  CheckpointManager::PendingSave pending = *pending_;
  pending_.reset();
  // snapshot_ stays: the next save() copies into its buffers.
  return manager_.commit_save(pending, write_error_);
}

std::optional<std::filesystem::path> AsyncCheckpointer::poll() {
  if (!pending_) return std::nullopt;
  // Has every rank's writer finished? (An agreement over the group: all ranks go on training
  // when one has not, and all commit together when every one has.)
  const bool everyone_done = manager_.group().size == 1 ? written_.load() : manager_.group().all_ok(written_.load());
  if (!everyone_done) return std::nullopt;
  return commit();
}

std::optional<std::filesystem::path> AsyncCheckpointer::wait() {
  if (!pending_) return std::nullopt;
  return commit();
}

}  // namespace loom::nn
