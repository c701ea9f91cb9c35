/* The durable-storage system calls and their one fault (see io_faults.h). */
#include "nn/serialize/io_faults.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "core/error.h"

namespace loom::nn {
namespace {

// Plain atomics rather than a mutex: the writer thread of an asynchronous checkpoint counts
// calls while the training thread may read io_fault_fired().
std::atomic<bool> armed{false};
std::atomic<bool> fired{false};
std::atomic<int> armed_op{0};
std::atomic<int64_t> armed_nth{0};
std::atomic<int> armed_error{0};
std::atomic<int64_t> calls{0};

// True when this call is the one the armed fault fails (errno is then set).
bool inject(IoOp op) {
  if (!armed.load(std::memory_order_relaxed)) return false;
  const auto want = static_cast<IoOp>(armed_op.load());
  if (want != IoOp::kAny && want != op) return false;
  if (calls.fetch_add(1) + 1 != armed_nth.load()) return false;
  armed = false;  // once: the clean-up after the failure runs unharmed
  fired = true;
  errno = armed_error.load();
  return true;
}

}  // namespace

void arm_io_fault(const IoFault& fault) {
  LOOM_CHECK(fault.nth >= 1, "arm_io_fault: nth must be >= 1 (the first call is 1), got ", fault.nth);
  LOOM_CHECK(fault.error > 0, "arm_io_fault: error must be a positive errno value, got ", fault.error);
  armed = false;
  armed_op = static_cast<int>(fault.op);
  armed_nth = fault.nth;
  armed_error = fault.error;
  calls = 0;
  fired = false;
  armed = true;
}

void disarm_io_fault() { armed = false; }

bool io_fault_fired() { return fired.load(); }

const char* io_op_name(IoOp op) {
  switch (op) {
    case IoOp::kWrite: return "write";
    case IoOp::kFsync: return "fsync";
    case IoOp::kRename: return "rename";
    case IoOp::kAny: return "any";
  }
  return "?";
}

std::optional<IoOp> io_op_from_name(const std::string& name) {
  for (IoOp op : {IoOp::kWrite, IoOp::kFsync, IoOp::kRename, IoOp::kAny})
    if (name == io_op_name(op)) return op;
  return std::nullopt;
}

ssize_t io_write(int fd, const void* data, size_t n) {
  if (inject(IoOp::kWrite)) return -1;
  return ::write(fd, data, n);
}

int io_fsync(int fd) {
  if (inject(IoOp::kFsync)) return -1;
  return ::fsync(fd);
}

int io_rename(const char* from, const char* to) {
  if (inject(IoOp::kRename)) return -1;
  return ::rename(from, to);
}

int io_rename_exchange(const char* from, const char* to) {
  if (inject(IoOp::kRename)) return -1;
  return ::renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE);
}

}  // namespace loom::nn
