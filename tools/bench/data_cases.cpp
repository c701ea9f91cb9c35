/*
 * Bench cases of the data layer.
 */
#include "tools/bench/bench.h"

namespace loom::bench {

std::vector<BenchCase> data_cases() { return {}; }

}  // namespace loom::bench
