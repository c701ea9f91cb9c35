/*
 * How Loom's tools write numbers for people: durations, rates and sizes, and the bar of a
 * progress line (train's epochs, predict's batches).
 */
#pragma once

#include <cstdint>
#include <string>

namespace loom::tools {

std::string format_duration(double seconds);  // "1:05", "2:03:04"
std::string format_rate(double rate);         // "950", "1.5k", "2.0M"
std::string format_bytes(int64_t bytes);      // "1.5 MiB"
// "[=========>          ]": `fraction` in [0, 1] of `width` cells.
std::string progress_bar(double fraction, int width = 20);

}  // namespace loom::tools
