/* Atomic file writes and file identities (see file_util.h). */
#include "data/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace loom::data {

namespace fs = std::filesystem;

namespace {
int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}
}  // namespace

std::string file_identity(const std::string& path) {
  struct stat st {};
  LOOM_CHECK(::stat(path.c_str(), &st) == 0, path, ": cannot stat: ", std::strerror(errno));
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::absolute(path), ec);
  return ::loom::detail::concat(ec ? path : abs.string(), "|size=", st.st_size, "|mtime_ns=", mtime_ns_of(st),
                                "|inode=", st.st_ino);
}

FileStamp file_stamp(const std::string& path) {
  struct stat st {};
  LOOM_CHECK(::stat(path.c_str(), &st) == 0, path, ": cannot stat: ", std::strerror(errno));
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<int64_t>(st.st_size),
          mtime_ns_of(st)};
}

std::string file_change(const std::string& path, const FileStamp& stamp) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return errno == ENOENT ? "was deleted" : ::loom::detail::concat("cannot be stat'ed (", std::strerror(errno), ")");
  if (static_cast<uint64_t>(st.st_dev) != stamp.device || static_cast<uint64_t>(st.st_ino) != stamp.inode)
    return "was replaced by another file";
  if (static_cast<int64_t>(st.st_size) != stamp.size)
    return ::loom::detail::concat("changed size from ", stamp.size, " to ", st.st_size, " bytes (truncated or rewritten)");
  if (mtime_ns_of(st) != stamp.mtime_ns) return "was modified (its modification time changed)";
  return "";
}

std::string temp_path_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return ::loom::detail::concat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK(fd >= 0, path, ": cannot open to fsync: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  LOOM_CHECK(rc == 0, path, ": fsync failed: ", std::strerror(err));
}

void commit_file(const std::string& tmp, const std::string& path) {
  LOOM_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot rename ", tmp,
             " over it: ", std::strerror(errno));
  fs::path dir = fs::path(path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string());  // makes the new directory entry durable
}

void write_file_atomically(const std::string& path,
                           const std::function<void(const std::string& tmp)>& write) {
  const std::string tmp = temp_path_for(path);
  try {
    write(tmp);
    fsync_path(tmp);
    commit_file(tmp, path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

}  // namespace loom::data
