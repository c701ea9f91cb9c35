/*
 * train: the command-line entry point (options.h, trainer.h hold the logic, in loom_train_lib).
 * Exit status: 0 done, 2 bad input (flags, files, values: nothing was trained), 1 a failure
 * while training.
 */
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <iostream>

#include "core/error.h"
#include "tools/train/options.h"
#include "tools/train/trainer.h"

int main(int argc, char** argv) {
  using namespace loom::train;
  TrainOptions options;
  try {
    ParseOutcome parsed = parse_options(argc, argv);
    if (!parsed.options) {
      std::cout << parsed.message;
      return parsed.exit_code;
    }
    options = *parsed.options;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: error: %s\n", e.what());
    return 2;
  }
  try {
    if (options.generate)
      run_generation(options, std::cout);
    else
      run_training(options, std::cout, isatty(fileno(stdout)) != 0);
    return 0;
  } catch (const InputError& e) {
    std::fprintf(stderr, "train: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // On a terminal the progress line is still open: end it first.
    std::fprintf(stderr, "%strain: error: %s\n", isatty(fileno(stdout)) ? "\n" : "", e.what());
    return 1;
  }
}
