/*
 * The planner's answers as text (tools/plan prints them; docs/parallelism.md quotes them): one
 * layout's memory and traffic per pipeline stage, and a ranking of the layouts that fit.
 */
#pragma once

#include <string>
#include <vector>

#include "distributed/plan/planner.h"

namespace loom::distributed::plan {

// "1.50 GiB", "12.0 MiB", "640 B": binary units, three significant digits.
std::string format_size(double bytes);
// "80GB", "80GiB", "512MB", "1.5TB", "1000000" (bytes): decimal (GB = 1e9) or binary (GiB =
// 2^30) units, as the suffix says. Throws loom::Error naming the text otherwise.
double parse_size(const std::string& text);

// The layout, the bubble, and a table with one row per pipeline stage: the parameters it
// holds, memory by kind and in all, and the bytes it sends per step by kind.
std::string format_prediction(const ModelSpec& model, const Prediction& prediction);
// The best `top` layouts, one line each: layout, worst-stage memory, traffic, bubble, step time.
std::string format_ranking(const ModelSpec& model, const std::vector<Prediction>& ranked, int64_t gpus,
                           double memory_bytes, size_t top);

}  // namespace loom::distributed::plan
