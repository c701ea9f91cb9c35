/*
 * libFuzzer target: `train --config FILE` (train::parse_options) with arbitrary bytes in FILE
 * (docs/fuzzing.md).
 *
 * The config file's keys become command-line flags that CLI11 then parses, so this covers the
 * JSON parse, the key -> flag mapping, every option's value conversion and check, and
 * validate(). The command line adds only --out (which a config file may not set), so that a
 * config naming --data passes validation and reaches to_json, as a real run's would.
 */
#include <cstdint>

#include "fuzz_util.h"
#include "tools/train/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom;
  static const fuzz::ScratchFile file(".json");
  file.write(fuzz::as_chars(data, size));
  const char* argv[] = {"train", "--config", file.path().c_str(), "--out", "/nonexistent/loom-fuzz-run"};
  try {
    train::ParseOutcome outcome = train::parse_options(5, argv);
    if (outcome.options) {
      // What a run writes to its run directory, and reads back on --resume.
      volatile size_t sink = train::to_json(*outcome.options).dump().size();
      (void)sink;
    }
  } catch (const Error&) {
    // parse_options' answer to a bad config file.
  }
  return 0;
}
