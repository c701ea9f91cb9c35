/*
 * How `train` writes numbers for people: durations, rates and sizes.
 */
#pragma once

#include <cstdint>
#include <string>

namespace loom::train {

std::string format_duration(double seconds);  // "1:05", "2:03:04"
std::string format_rate(double rate);         // "950", "1.5k", "2.0M"
std::string format_bytes(int64_t bytes);      // "1.5 MiB"

}  // namespace loom::train
