/*
 * Parsing `train`'s command line in tests: the options, or the message of the error that a bad
 * command line throws.
 */
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tools/train/options.h"

namespace loom::test {

// The options `args` (without the program name) give. Fails the test when they ask for --help.
inline train::TrainOptions parse_train(std::vector<const char*> args) {
  args.insert(args.begin(), "train");
  train::ParseOutcome outcome = train::parse_options(static_cast<int>(args.size()), args.data());
  REQUIRE(outcome.options.has_value());
  return *outcome.options;
}

// The message of the loom::Error that parsing `args` throws; empty when they parse.
inline std::string train_parse_error(std::vector<const char*> args) {
  args.insert(args.begin(), "train");
  try {
    train::parse_options(static_cast<int>(args.size()), args.data());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace loom::test
