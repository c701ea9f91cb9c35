// What the checkpoint kill tests (test_checkpoint, test_async_checkpoint, test_checkpoint_group)
// share.
#pragma once

#include <cstdint>

#include "nn/serialize/checkpoint.h"

namespace loom::test {

// The one fallback that the checkpoint protocol itself can cause: the very first save, killed
// after its directory was renamed into place and before `latest` was first written (no
// `latest` can name a directory before it exists). `previous` is the step the last trial
// loaded, 0 before any. Every other note means that `latest` named something incomplete.
inline bool first_save_fallback(const nn::Checkpoint& c, int64_t previous) {
  return previous == 0 && c.note.starts_with("'latest' is missing;");
}

}  // namespace loom::test
