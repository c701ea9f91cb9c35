/*
 * LOOM_HDF5_CHECK and the HDF5 lock: every HDF5 call in Loom goes through both.
 *
 * LOOM_HDF5_CHECK(call, context...) evaluates `call` and, when it returns a negative value (the
 * HDF5 convention for hid_t, herr_t and htri_t), throws loom::Error with file:line, the call,
 * the context (which file, which dataset) and HDF5's own error stack, e.g.
 *   "/tmp/x.h5: dataset 'images': H5Dopen2(file, name, H5P_DEFAULT) failed: H5Dopen2(): unable to
 *    open dataset; H5G__loc_find_cb(): object 'images' doesn't exist (data/hdf5_file.cpp:88)"
 * It yields the call's value, so it wraps calls that return handles.
 *
 * Hdf5Lock: Debian's libhdf5 1.10 (serial) is built thread-safe by one global lock inside the
 * library, and other builds are not thread-safe at all. Loom takes its own process-wide lock
 * around every HDF5 call, so the code is correct with either build, and so the data loader can
 * keep the lock short on purpose: workers read raw chunk bytes under it and decompress outside.
 * The lock is recursive because closing a handle (which needs the lock) can happen while a
 * caller already holds it.
 */
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>

#include "core/error.h"

namespace loom::data {

class Hdf5Lock {
 public:
  Hdf5Lock();
  Hdf5Lock(const Hdf5Lock&) = delete;
  Hdf5Lock& operator=(const Hdf5Lock&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

namespace detail {

// HDF5's error stack of this thread as one line (innermost messages last), then cleared.
std::string hdf5_error_stack();

[[noreturn]] void hdf5_fail(const char* file, int line, const char* call, const std::string& context);

}  // namespace detail
}  // namespace loom::data

#define LOOM_HDF5_CHECK(call, ...)                                                                     \
  [&]() {                                                                                              \
    const auto loom_hdf5_result_ = (call);                                                             \
    if (loom_hdf5_result_ < 0) [[unlikely]]                                                            \
      ::loom::data::detail::hdf5_fail(__FILE__, __LINE__, #call, ::loom::detail::concat(__VA_ARGS__)); \
    return loom_hdf5_result_;                                                                          \
  }()
