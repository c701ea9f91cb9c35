/*
 * The system calls that make a file durable (write, fsync of a file or a directory, rename), in
 * one place, so that a test can make exactly one of them fail the way a full disk (ENOSPC) or a
 * failing device (EIO) would. Every checkpoint save goes through them (atomic_file.cpp,
 * checkpoint.cpp), which is what lets tests/nn/test_checkpoint_faults.cpp fail the k-th write,
 * fsync or rename of one save, for every k until the save has fewer than k of them, and check
 * after each that the previous checkpoint is still the one that loads.
 *
 *   arm_io_fault({IoOp::kFsync, 2, ENOSPC});   // the 2nd fsync from now fails with ENOSPC
 *   manager.save(...);                          // throws, naming the file and strerror(ENOSPC)
 *   io_fault_fired();                           // true: the save reached its 2nd fsync
 *
 * A fault fires once and then disarms itself, so that the clean-up after the failure (which
 * uses the same calls) runs as it would in a real failure of one call. Disarmed (always, outside
 * tests and `train` under LOOM_FAULT_INJECT), a call costs one relaxed atomic load on top of the
 * system call. Counting is process-wide: an asynchronous checkpoint's writer thread counts too.
 */
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace loom::nn {

enum class IoOp {
  kWrite,   // write(2) of file contents (each call; a short write retried is another call)
  kFsync,   // fsync(2) of a file or of a directory (the step that makes a rename durable)
  kRename,  // rename(2), and renameat2's exchange
  kAny,     // any of the above: the k-th durable-storage call of the save, whatever it is
};

struct IoFault {
  IoOp op = IoOp::kAny;
  int64_t nth = 1;  // the nth call of that kind from arming (1-based) fails
  int error = 0;    // the errno it fails with, e.g. ENOSPC, EIO
};

// Arms `fault` (replacing one armed before) and restarts the count. Throws loom::Error for
// nth < 1 or error <= 0.
void arm_io_fault(const IoFault& fault);
void disarm_io_fault();
// Whether the armed fault has fired since it was armed.
bool io_fault_fired();
// "write", "fsync", "rename", "any" and back (nullopt for another name).
const char* io_op_name(IoOp op);
std::optional<IoOp> io_op_from_name(const std::string& name);

// The system calls with the fault applied: when the armed fault matches this call, they fail
// without calling the system, returning -1 with errno set to the fault's error.
ssize_t io_write(int fd, const void* data, size_t n);
int io_fsync(int fd);
int io_rename(const char* from, const char* to);
// renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE).
int io_rename_exchange(const char* from, const char* to);

}  // namespace loom::nn
