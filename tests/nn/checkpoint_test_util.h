// What the checkpoint kill tests (test_checkpoint, test_async_checkpoint, test_checkpoint_group)
// share.
#pragma once

#include "nn/serialize/checkpoint.h"

namespace loom::test {

// Tells the one fallback that the checkpoint protocol itself can cause from one that means
// `latest` named something incomplete. Until a save has written `latest` for the first time, a
// kill can leave complete step directories and no `latest` (no `latest` can name a directory
// before it exists), and the next run resumes from that fallback and may be killed again before
// its own first `latest`. Once any load has read `latest`, it is never removed, so a missing one
// is a bug.
class LatestFileHistory {
 public:
  // Call once per load, in order. True when the load fell back where it should not have.
  bool unexpected_fallback(const nn::Checkpoint& c) {
    if (c.note.empty()) {
      latest_seen_ = true;
      return false;
    }
    return latest_seen_ || !c.note.starts_with("'latest' is missing;");
  }

 private:
  bool latest_seen_ = false;
};

}  // namespace loom::test
