/*
 * write_file_atomically and read_file over raw POSIX calls: fstream hides errno and cannot
 * fsync, and both are needed here (the error says why a write failed; fsync is what makes
 * the rename-based protocol survive a power loss, not just a process kill).
 */
#include "nn/serialize/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "nn/serialize/io_faults.h"

namespace loom::nn {
namespace fs = std::filesystem;

namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

// Closes the descriptor when the scope ends (close errors on the error path are moot).
struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// A name no other writer in this or another process uses at the same time: the pid tells
// processes apart, the counter tells this process's concurrent and successive writes apart.
fs::path temporary_name(const fs::path& target) {
  static std::atomic<uint64_t> counter{0};
  // Built by appending: GCC 12 reports a false -Wrestrict on `"." + std::string`.
  std::string name(".");
  name += target.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  name += '-';
  name += std::to_string(counter.fetch_add(1));
  return target.parent_path() / name;
}

}  // namespace

void FileSink::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux writes at most 0x7ffff000 bytes per call; larger requests just come back short.
    const ssize_t done = io_write(fd_, p, n);
    if (done < 0) {
      if (errno == EINTR) continue;
      LOOM_FAIL("write_file_atomically: writing '", path_.string(), "' failed: ", errno_text(errno));
    }
    p += done;
    n -= static_cast<size_t>(done);
    written_ += static_cast<uint64_t>(done);
  }
}

void fsync_directory(const fs::path& dir) {
  const fs::path d = dir.empty() ? fs::path(".") : dir;
  FdGuard guard{::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  LOOM_CHECK(guard.fd >= 0, "fsync_directory: cannot open directory '", d.string(), "': ", errno_text(errno));
  LOOM_CHECK(io_fsync(guard.fd) == 0, "fsync_directory: fsync of '", d.string(),
             "' failed: ", errno_text(errno));
}

void write_file_atomically(const fs::path& target, const std::function<void(FileSink&)>& writer) {
  LOOM_CHECK(!target.empty() && target.has_filename(), "write_file_atomically: '", target.string(),
             "' does not name a file");
  const fs::path tmp = temporary_name(target);
  FdGuard guard{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  LOOM_CHECK(guard.fd >= 0, "write_file_atomically: cannot create '", tmp.string(), "' (to write '",
             target.string(), "'): ", errno_text(errno));
  try {
    FileSink sink(guard.fd, tmp);
    writer(sink);
    // fsync before rename: otherwise the file system may persist the rename before the data,
    // and a power loss would leave an empty or partial file under the final name.
    LOOM_CHECK(io_fsync(guard.fd) == 0, "write_file_atomically: fsync of '", tmp.string(),
               "' failed: ", errno_text(errno));
    const int fd = guard.fd;
    guard.fd = -1;
    // close can report a deferred write error (NFS); the data is not safe if it does.
    LOOM_CHECK(::close(fd) == 0, "write_file_atomically: closing '", tmp.string(),
               "' failed: ", errno_text(errno));
    LOOM_CHECK(io_rename(tmp.c_str(), target.c_str()) == 0, "write_file_atomically: renaming '", tmp.string(),
               "' to '", target.string(), "' failed: ", errno_text(errno));
  } catch (...) {
    if (guard.fd >= 0) {
      ::close(guard.fd);
      guard.fd = -1;
    }
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_directory(target.parent_path());
}

void write_file_atomically(const fs::path& target, std::string_view bytes) {
  write_file_atomically(target, [bytes](FileSink& sink) { sink.write(bytes); });
}

std::string read_file(const fs::path& path) {
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  LOOM_CHECK(guard.fd >= 0, "read_file: cannot open '", path.string(), "': ", errno_text(errno));
  struct stat st {};
  LOOM_CHECK(::fstat(guard.fd, &st) == 0, "read_file: cannot stat '", path.string(),
             "': ", errno_text(errno));
  LOOM_CHECK(S_ISREG(st.st_mode), "read_file: '", path.string(), "' is not a regular file");
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t have = 0;
  // Read until EOF rather than trusting st_size: the file may grow or shrink meanwhile, and
  // what we return must be bytes that were actually read.
  for (;;) {
    if (have == out.size()) out.resize(out.size() + 65536);
    const ssize_t got = ::read(guard.fd, out.data() + have, out.size() - have);
    if (got < 0) {
      if (errno == EINTR) continue;
      LOOM_FAIL("read_file: reading '", path.string(), "' failed: ", errno_text(errno));
    }
    if (got == 0) break;
    have += static_cast<size_t>(got);
  }
  out.resize(have);
  return out;
}

}  // namespace loom::nn
