/*
 * Files written by the data layer (converted datasets, disk caches) are written to a
 * temporary name beside the target, flushed, fsynced and renamed over it, and the directory is
 * fsynced: a crash mid-write leaves the old file (or none), never half a file.
 *
 * file_identity() names a file's current contents cheaply (path, size, modification time,
 * inode), so a cache built from it can tell when the source has changed.
 */
#pragma once

#include <functional>
#include <string>

namespace loom::data {

// "<absolute path>|size=...|mtime_ns=...|inode=..."; throws loom::Error when the file is missing.
std::string file_identity(const std::string& path);

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
