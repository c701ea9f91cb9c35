/*
 * What the libFuzzer targets share (docs/fuzzing.md).
 *
 * A target calls a real loader on the fuzzer's bytes and lets only loom::Error through: that
 * is the loaders' contract for bad input. Anything else (a sanitizer report, a crash, an
 * exception of another type, std::bad_alloc, a hang, an allocation over -rss_limit_mb) ends
 * the run and is a bug, so the targets catch nothing else.
 */
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "ops/ops.h"

namespace loom::fuzz {

inline std::string_view as_chars(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A scratch file for loaders that only take a path: on tmpfs when there is one (no disk
// traffic at 10^4 writes a second), one per process (ctest runs the targets in parallel),
// removed when the fuzzer exits.
class ScratchFile {
 public:
  explicit ScratchFile(const char* suffix)
      : path_(std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/loom-fuzz-" +
              std::to_string(::getpid()) + suffix) {}
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  ~ScratchFile() { ::unlink(path_.c_str()); }

  const std::string& path() const { return path_; }

  // Replaces the file with `bytes`. Unlinked first so that every input is a fresh inode:
  // HDF5 keys its table of open files by device and inode, and must never mistake one input
  // for the previous one.
  void write(std::string_view bytes) const {
    ::unlink(path_.c_str());
    FILE* f = std::fopen(path_.c_str(), "wb");
    const bool ok =
        f != nullptr && (bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    const bool closed = f != nullptr && std::fclose(f) == 0;
    // Not a loom::Error: a target that cannot write its scratch file is broken, not its input.
    if (!ok || !closed) {
      std::fprintf(stderr, "fuzz: writing %s failed\n", path_.c_str());
      std::abort();
    }
  }

 private:
  std::string path_;
};

// Reads every byte of a loaded tensor (so ASan sees any read past its storage) and, for
// small ones, runs a reduction over it in float64, which walks the sizes and strides the
// loader built. Returns the sum so the compiler cannot drop the reads.
inline double touch(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  uint64_t bytes = 0;
  for (size_t i = 0; i < t.nbytes(); ++i) bytes += p[i];
  double total = static_cast<double>(bytes);
  if (t.numel() <= (int64_t{1} << 16)) {
    // A file may hold NaN, infinities and |x| >= 2^63: item() of such a sum was undefined
    // behaviour until this target found it (docs/fuzzing.md, finding 3).
    total += t.to(kFloat64).sum().item<double>();
  }
  return total;
}

}  // namespace loom::fuzz
