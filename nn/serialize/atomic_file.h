/*
 * Crash-safe file writes: everything Loom writes to disk (safetensors files, checkpoints, the
 * `latest` pointer) goes through write_file_atomically, so that a crash or a kill mid-write
 * leaves either the old file or the complete new one under the target name — never a torn
 * mixture. The recipe is the POSIX one: write a temporary file in the same directory, fsync
 * it, rename it over the target (rename is atomic within a file system), fsync the directory
 * (so that the rename itself survives a power loss).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace loom::nn {

// Where a writer callback puts its bytes: an open file descriptor that reports every failed
// write as a loom::Error naming the file and strerror(errno).
class FileSink {
 public:
  FileSink(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  // Writes all n bytes (retrying short writes and EINTR). Throws loom::Error on failure
  // (e.g. ENOSPC), naming the file.
  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  uint64_t bytes_written() const { return written_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  int fd_;
  std::filesystem::path path_;
  uint64_t written_ = 0;
};

// Replaces `target` with what `writer` writes, atomically: the bytes go to a temporary file
// "<dir>/.<name>.tmp-<pid>-<counter>" which is fsynced, renamed over `target`, and then the
// directory is fsynced. The target's directory must exist. On a failure before the rename the
// temporary file is removed and `target` is left as it was; when only the directory's fsync
// after the rename fails, `target` already holds the new content, which may not survive a
// power loss (a caller that must keep the old content then restores it, as
// CheckpointManager does for `latest`). System-call failures throw loom::Error naming the path
// and strerror(errno), and an exception thrown by `writer` propagates unchanged.
void write_file_atomically(const std::filesystem::path& target, const std::function<void(FileSink&)>& writer);
void write_file_atomically(const std::filesystem::path& target, std::string_view bytes);

// The whole content of a regular file. Throws loom::Error naming the path and the reason
// (missing, not a regular file, read error).
std::string read_file(const std::filesystem::path& path);

// fsync on a directory: makes the creation, renaming and removal of its entries durable.
// Throws loom::Error naming the directory.
void fsync_directory(const std::filesystem::path& dir);

}  // namespace loom::nn
