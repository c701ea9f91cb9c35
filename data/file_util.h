/*
 * Files written by the data layer (converted datasets, disk caches) are written to a
 * temporary name beside the target, flushed, fsynced and renamed over it, and the directory is
 * fsynced: a crash mid-write leaves the old file (or none), never half a file.
 *
 * file_identity() names a file's current contents cheaply (path, size, modification time,
 * inode), so a cache built from it can tell when the source has changed.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace loom::data {

// "<absolute path>|size=...|mtime_ns=...|inode=..."; throws loom::Error when the file is missing.
std::string file_identity(const std::string& path);

// A file as stat(2) saw it once. A reader that keeps a file open records it at opening, and
// compares before each read: a file replaced (a new file renamed over the name), truncated,
// rewritten in place or deleted no longer matches. One stat is a microsecond or so, against a
// chunk read and decode of tens of them, so it can run that often.
struct FileStamp {
  uint64_t device = 0, inode = 0;
  int64_t size = 0, mtime_ns = 0;
};
// Throws loom::Error naming the file when it cannot be stat'ed.
FileStamp file_stamp(const std::string& path);
// "" when `path` is still the file `stamp` describes; otherwise what became of it ("was
// deleted", "was replaced by another file", "changed size from 100 to 40 bytes", "was modified").
std::string file_change(const std::string& path, const FileStamp& stamp);

// A fresh temporary name in the directory of `path` (same file system, so rename is atomic).
std::string temp_path_for(const std::string& path);

// fsync(2) of a file's contents; throws naming the file.
void fsync_path(const std::string& path);

// Renames `tmp` over `path` and fsyncs the directory, so the rename itself is durable.
void commit_file(const std::string& tmp, const std::string& path);

// write(tmp) creates the file under the temporary name it is given; then fsync, rename and
// directory fsync. On any error the temporary file is removed and the error rethrown.
void write_file_atomically(const std::string& path, const std::function<void(const std::string& tmp)>& write);

}  // namespace loom::data
