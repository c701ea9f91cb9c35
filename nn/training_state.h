/*
 * The parts of a training run's state that are not a module's or an optimizer's tensors —
 * the random generator and small counters (step, epoch, a data loader's position) — as
 * StateDicts, so that one checkpoint (nn/serialize/checkpoint.h) holds everything a resumed
 * run needs to continue bit-exactly:
 *
 *   manager.save(step, {{"model", model.state_dict()},
 *                       {"optimizer", optimizer.state_dict()},
 *                       {"scheduler", scheduler.state_dict()},
 *                       {"rng", nn::rng_state_dict()},
 *                       {"loader", nn::counters_to_state_dict(loader.state().to_map())}});
 */
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/random.h"
#include "nn/state_dict.h"

namespace loom::nn {

// The generator's seed and offset (the position in its counter-based stream) as 0-dim int64
// tensors "seed" and "offset" (the seed's 64 bits reinterpreted).
StateDict rng_state_dict(const Generator& generator = default_generator());
// Restores what rng_state_dict() returned; throws loom::Error naming a missing or malformed key.
void load_rng_state_dict(const StateDict& state, Generator& generator = default_generator());

// Named integers as 0-dim int64 tensors, and back (throws naming a key that is not a 0-dim
// integer tensor).
StateDict counters_to_state_dict(const std::map<std::string, int64_t>& counters);
std::map<std::string, int64_t> counters_from_state_dict(const StateDict& state);

}  // namespace loom::nn
