/*
 * train: the command-line entry point (options.h, trainer.h hold the logic, in loom_train_lib).
 * Exit status: 0 done, 2 bad input (flags, files, values: nothing was trained), 1 a failure
 * while training.
 */
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "core/error.h"
#include "tools/common/error_exit.h"
#include "tools/train/options.h"
#if LOOM_TRAIN_WITH_MPI
#include "distributed/process_group.h"
#endif
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
    // N processes started by mpirun without --dp/--tp/--pp would each train alone and write the
    // same run directory. (Checked here, not in the library: a program may run a single-process
    // training on each of its ranks on purpose, as tests/distributed/test_train_dp.cpp does.)
    const int64_t ranks = options.dp * options.tp * options.pp;
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
      const char* value = std::getenv(var);
      if (!options.generate && ranks == 1 && value != nullptr && std::atoi(value) > 1)
        throw loom::Error(std::string("started by mpirun -np ") + value +
                          " without --dp, --tp or --pp: pass e.g. --dp " + value);
    }
  } catch (const std::exception& e) {
    return loom::tools::error_exit("train", e, 2);
  }
  try {
    if (options.generate)
      run_generation(options, std::cout);
    else
      run_training(options, std::cout, isatty(fileno(stdout)) != 0);
    return 0;
  } catch (const std::exception& e) {
    const bool input_error = dynamic_cast<const InputError*>(&e) != nullptr;
    const int status = input_error ? 2 : 1;
#if LOOM_TRAIN_WITH_MPI
    // With several ranks the others may be waiting in a collective this rank will never join:
    // end the whole job now instead of leaving them to the group's timeout.
    if (options.dp * options.tp * options.pp > 1)
      loom::distributed::abort_job(std::string("train: error: ") + e.what(), status);
#endif
    // On a terminal the progress line is still open: end it first.
    return loom::tools::error_exit("train", e, status, "error", !input_error && isatty(fileno(stdout)));
  }
}
