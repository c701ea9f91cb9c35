/* Placements of a split model's pieces, and the whole model assembled from them (see shard_placement.h). */
#include "distributed/shard_placement.h"

#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::distributed {

std::string stage_parameter_name(const std::string& name, int64_t begin, int64_t end) {
  const size_t dot = name.find('.');
  const int64_t layer = std::stoll(name.substr(0, dot));
  if (layer < begin || layer >= end) return {};
  return std::to_string(layer - begin) + name.substr(dot);
}

std::vector<ShardPlacement> restrict_to_stage(const std::vector<ShardPlacement>& placements, int64_t begin,
                                              int64_t end) {
  std::vector<ShardPlacement> kept;
  for (ShardPlacement p : placements) {
    p.local_name = stage_parameter_name(p.local_name, begin, end);
    if (!p.local_name.empty()) kept.push_back(p);
  }
  return kept;
}

std::set<std::string> restrict_to_stage(const std::set<std::string>& names, int64_t begin, int64_t end) {
  std::set<std::string> kept;
  for (const std::string& name : names)
    if (std::string mine = stage_parameter_name(name, begin, end); !mine.empty()) kept.insert(mine);
  return kept;
}

void ModelPlacement::add_whole(const std::string& local_name, const std::string& full_name, const Tensor& t,
                               bool is_replicated, int tensor_rank) {
  if (is_replicated) replicated.insert(local_name);
  const ShardPlacement whole{local_name, full_name, 0, 0, 0, t.size(0)};
  if (!is_replicated || tensor_rank == 0)
    pieces.push_back(whole);
  else
    copies.push_back(whole);
}

ModelPlacement ModelPlacement::stage(int64_t begin, int64_t end) const {
  return ModelPlacement{restrict_to_stage(pieces, begin, end), restrict_to_stage(replicated, begin, end),
                        restrict_to_stage(copies, begin, end)};
}

void check_placements(const nn::Module& full, const nn::Module& local, const std::vector<ShardPlacement>& placements,
                      const std::set<std::string>& unplaced) {
  const nn::StateDict whole = full.state_dict();
  std::set<std::string> placed;
  for (const ShardPlacement& p : placements) {
    placed.insert(p.local_name);
    LOOM_CHECK(whole.contains(p.full_name), "check_placements: the piece ", p.local_name, " maps to ", p.full_name,
               ", which the full model does not have");
    LOOM_CHECK(p.full_begin + p.length <= whole.at(p.full_name).size(p.dim), "check_placements: the piece ",
               p.local_name, " does not fit in ", p.full_name);
  }
  for (const auto& [name, t] : local.named_parameters())
    LOOM_CHECK(placed.count(name) || unplaced.count(name), "check_placements: the parameter ", name,
               " of this rank's piece has no place in the full model");
}

nn::StateDict gather_full_state_dict(const nn::Module& full, const nn::StateDict& local,
                                     const std::vector<ShardPlacement>& placements, bool contributes,
                                     ProcessGroup& group) {
  nn::StateDict assembled;
  for (const auto& [name, t] : full.state_dict()) assembled.insert(name, zeros(t.sizes(), t.options()));
  NoGradGuard no_grad;
  if (contributes)
    for (const ShardPlacement& p : placements) {
      Tensor to = assembled.at(p.full_name).slice(p.dim, p.full_begin, p.full_begin + p.length);
      to.copy_(local.at(p.local_name).slice(p.dim, p.local_begin, p.local_begin + p.length));
    }
  for (const auto& [name, t] : assembled) group.all_reduce(t);  // waits for every rank's pieces
  return assembled;
}

}  // namespace loom::distributed
