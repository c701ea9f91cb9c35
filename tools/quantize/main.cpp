/*
 * quantize: the command-line entry point (options.h and quantizer.h hold the logic, in
 * loom_quantize_lib). Exit status: 0 done, 2 bad input (flags, files, shapes: nothing was
 * written), 1 a failure while quantizing.
 */
#include <exception>
#include <iostream>

#include "core/error.h"
#include "tools/common/error_exit.h"
#include "tools/quantize/options.h"
#include "tools/quantize/quantizer.h"

int main(int argc, char** argv) {
  using namespace loom::quantize;
  QuantizeOptions options;
  try {
    ParseOutcome parsed = parse_options(argc, argv);
    if (!parsed.options) {
      std::cout << parsed.message;
      return parsed.exit_code;
    }
    options = *parsed.options;
  } catch (const std::exception& e) {
    return loom::tools::error_exit("quantize", e, 2);
  }
  try {
    run_quantize(options, std::cout);
    return 0;
  } catch (const InputError& e) {
    return loom::tools::error_exit("quantize", e, 2);
  } catch (const std::exception& e) {
    return loom::tools::error_exit("quantize", e, 1, "failed");
  }
}
