/*
 * What the tools' option parsers share (CLI11): the outcome of parsing — the options, or an exit
 * with a message (--help) — and the parse itself, whose CLI11 errors become loom::Error with
 * CLI11's one-line message, for main to print (error_exit.h).
 */
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "core/error.h"

namespace loom::tools {

template <class Options>
struct ParseOutcome {
  std::optional<Options> options;  // empty: exit with exit_code after printing message
  int exit_code = 0;
  std::string message;  // --help text (exit 0)
};

// Parses argv with `app`. Returns the help text when --help was asked for, nothing otherwise.
// Throws loom::Error for an unknown flag, a bad value or a missing required option.
inline std::optional<std::string> parse_command_line(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return app.help();
  } catch (const CLI::ParseError& e) {
    throw Error(e.what());
  }
  return std::nullopt;
}

}  // namespace loom::tools
