/*
 * Moving batches to a GPU while the model trains on the previous one.
 *
 * With a CUDA device as the loader's destination, workers collate into page-locked ("pinned")
 * host buffers and start an asynchronous copy on the loader's own CUDA stream as soon as a
 * batch is ready; the copy of batch b + 1 overlaps the training step on batch b. At delivery
 * the loader waits for that batch's copy event only (by then it has normally finished), after
 * which the device tensors can be used on any stream and the pinned buffer goes back to the
 * pool for a later batch.
 *
 * pin_memory without a GPU (or in a build without CUDA) collates into ordinary memory, as
 * PyTorch does; a CUDA destination without one is an error.
 */
#pragma once

#include <memory>

#include "core/device.h"
#include "data/collate.h"

namespace loom::data {

// An in-flight host-to-device copy: the event to wait for and the host buffers to keep alive.
struct PendingCopy;

class DeviceTransfer {
 public:
  DeviceTransfer(Device device, bool pin_memory);
  ~DeviceTransfer();
  DeviceTransfer(const DeviceTransfer&) = delete;
  DeviceTransfer& operator=(const DeviceTransfer&) = delete;

  Device device() const { return device_; }
  // Whether batches are collated into page-locked memory.
  bool pinned() const { return pinned_; }
  // What to collate into: pinned buffers from a pool, or empty (ordinary memory).
  BatchAllocator host_allocator() const;
  // Worker side: starts copying the batch to the device (nothing for a CPU destination).
  // batch.data / batch.target become device tensors; the returned copy must be finished.
  std::shared_ptr<PendingCopy> start(Batch& batch) const;
  // Consumer side: waits until `copy` has landed (the device tensors are then ready).
  static void finish(const std::shared_ptr<PendingCopy>& copy);

 private:
  struct State;
  Device device_;
  bool pinned_ = false;
  std::shared_ptr<State> state_;  // CUDA stream and pinned pool; shared with buffers' deleters
};

}  // namespace loom::data
