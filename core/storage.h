/*
 * Storage: the bytes behind one or more tensors (views share it). Owned memory comes from
 * the device's allocator; from_blob memory is borrowed, optionally with a deleter.
 * The version counter counts in-place writes; autograd uses it to detect that a tensor it
 * saved for backward was modified.
 */
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace loom {

class StorageImpl {
 public:
  // Allocates nbytes on `device`.
  StorageImpl(size_t nbytes, Device device);
  // Wraps memory owned elsewhere; `deleter` (if any) runs when the storage dies.
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;           // set when owned
  std::function<void(void*)> deleter_;       // set when borrowed with a deleter
  std::atomic<uint64_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace loom
