/* Gathering the whole training state from one layout's pieces and cutting another's (see reshard.h). */
#include "distributed/reshard.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::distributed {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kStatePrefix = "state.", kGroupPrefix = "param_groups.";

// Per-element state ("exp_avg") has the parameter's shape; the step count is one number.
bool is_scalar_state(std::string_view name) {
  return name == "step";
}

std::string shape_text(IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The elements of `t` that a piece covers: a slice along its dim, or (a flat piece, dim -1) a
// range of the flattened elements. A view: `t` is contiguous here (loaded or made whole).
Tensor piece_of(const Tensor& t, int64_t dim, int64_t begin, int64_t length) {
  if (dim >= 0) return t.slice(dim, begin, begin + length);
  LOOM_CHECK(t.is_contiguous(), "reshard: a flat piece of a non-contiguous tensor");
  return t.reshape({-1}).slice(0, begin, begin + length);
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A parameter all of whose pieces are flat (FullyShardedDataParallel's shards): its elements
// outside every piece are padding.
bool is_flat(const LocalParameter& param) {
  return !param.pieces.empty() &&
         std::all_of(param.pieces.begin(), param.pieces.end(), [](const ShardPlacement& p) { return p.dim == -1; });
}

// A tensor of which only some elements are known (a ZeRO shard's part of a parameter's state,
// the slices of a whole tensor gathered so far).
struct Partial {
  Tensor value, known;  // known: bool, value's shape
};

Partial unknown(const std::vector<int64_t>& shape, const TensorOptions& options) {
  return {zeros(shape, options), zeros(shape, TensorOptions(kBool))};
}

bool complete(const Partial& p) {
  return p.known.logical_not().sum().item<int64_t>() == 0;
}

// Copies the elements `from` knows and `to` does not yet: the first source of an element wins.
void merge(Tensor to_value, Tensor to_known, const Tensor& from_value, const Tensor& from_known) {
  to_value.copy_(where(to_known, to_value, from_value));
  to_known.copy_(to_known.logical_or(from_known));
}

// "state.<i>.<name>" -> (i, name); nullopt for the group entries.
std::optional<std::pair<size_t, std::string>> state_key(const std::string& key) {
  if (!key.starts_with(kStatePrefix)) return std::nullopt;
  const char* begin = key.data() + kStatePrefix.size();
  size_t index = 0;
  const auto [end, ec] = std::from_chars(begin, key.data() + key.size(), index);
  LOOM_CHECK(ec == std::errc() && end != begin && *end == '.' && end + 1 != key.data() + key.size(),
             "reshard: malformed optimizer state key '", key, "'");
  return std::pair{index, std::string(end + 1)};
}

// The overlaps of each parameter with a ZeRO shard, as ZeroOptimizer makes its views: for view
// k, the parameter and the range [begin, end) of its flattened elements.
struct ShardView {
  size_t parameter;
  int64_t begin, end;
};

std::vector<ShardView> shard_views(const RankLayout& layout) {
  std::vector<ShardView> views;
  const auto [first, last] = *layout.zero_shard;
  int64_t offset = 0;
  for (size_t i = 0; i < layout.parameters.size(); ++i) {
    int64_t numel = 1;
    for (int64_t n : layout.parameters[i].shape) numel *= n;
    const int64_t lo = std::max(offset, first), hi = std::min(offset + numel, last);
    if (lo < hi) views.push_back({i, lo - offset, hi - offset});
    offset += numel;
  }
  return views;
}

// The optimizer state of each of a rank's parameters (index = layout position), by state name:
// whole (no ZeRO) or the shard's part of it.
std::vector<std::map<std::string, Partial>> per_parameter_state(const RankLayout& layout,
                                                                const nn::StateDict& optimizer, int rank) {
  std::vector<std::map<std::string, Partial>> out(layout.parameters.size());
  std::vector<ShardView> views;
  if (layout.zero_shard) views = shard_views(layout);
  const size_t entries = layout.zero_shard ? views.size() : layout.parameters.size();
  for (const auto& [key, value] : optimizer) {
    const auto parsed = state_key(key);
    if (!parsed) continue;
    const auto& [index, name] = *parsed;
    LOOM_CHECK(index < entries, "reshard: saving rank ", rank, "'s optimizer state '", key, "' is for entry ",
               index, " but its layout has ", entries,
               layout.zero_shard ? " ZeRO shard views" : " parameters");
    const size_t p = layout.zero_shard ? views[index].parameter : index;
    const LocalParameter& param = layout.parameters[p];
    if (is_scalar_state(name)) {
      Partial& slot = out[p][name];  // one count per parameter, whichever view holds it
      slot = Partial{value.reshape(IntArrayRef{}).clone(), Tensor()};
      continue;
    }
    Partial& slot = out[p].try_emplace(name, unknown(param.shape, value.options())).first->second;
    if (!layout.zero_shard) {
      LOOM_CHECK(value.sizes() == IntArrayRef(param.shape), "reshard: saving rank ", rank,
                 "'s optimizer state '", key, "' has shape ", shape_text(value.sizes()),
                 " but its parameter ", param.name, " has ", shape_text(param.shape));
      slot.value.copy_(value);
      slot.known.fill_(true);
      continue;
    }
    const ShardView& view = views[index];
    LOOM_CHECK(value.numel() == view.end - view.begin, "reshard: saving rank ", rank, "'s optimizer state '",
               key, "' has ", value.numel(), " elements but its ZeRO shard holds ", view.end - view.begin,
               " of ", param.name);
    slot.value.reshape({-1}).slice(0, view.begin, view.end).copy_(value.reshape({-1}));
    slot.known.reshape({-1}).slice(0, view.begin, view.end).fill_(true);
  }
  return out;
}

void check_piece_fits(const ShardPlacement& piece, const LocalParameter& param, const FullShapes& shapes,
                      int rank) {
  const auto it = shapes.find(piece.full_name);
  LOOM_CHECK(it != shapes.end(), "reshard: saving rank ", rank, "'s ", param.name, " is a piece of ",
             piece.full_name, ", which this model does not have");
  const std::vector<int64_t>& full = it->second;
  if (piece.dim == -1) {  // a flat piece: ranges of the flattened tensors
    LOOM_CHECK(param.shape.size() == 1 && piece.full_begin >= 0 && piece.local_begin >= 0 && piece.length >= 0 &&
                   piece.full_begin + piece.length <= numel_of(full) &&
                   piece.local_begin + piece.length <= param.shape[0],
               "reshard: saving rank ", rank, "'s ", param.name, " ", shape_text(param.shape), " holds the flat elements [",
               piece.full_begin, ", ", piece.full_begin + piece.length, ") of ", piece.full_name,
               ", which do not fit this model's ", piece.full_name, " ", shape_text(full),
               " (was the checkpoint written for another model size?)");
    return;
  }
  bool fits = full.size() == param.shape.size() && piece.dim >= 0 &&
              piece.dim < static_cast<int64_t>(full.size()) &&
              piece.full_begin + piece.length <= full[piece.dim] &&
              piece.local_begin + piece.length <= param.shape[piece.dim];
  for (size_t d = 0; fits && d < full.size(); ++d)
    fits = static_cast<int64_t>(d) == piece.dim || full[d] == param.shape[d];
  LOOM_CHECK(fits, "reshard: saving rank ", rank, "'s ", param.name, " ", shape_text(param.shape), " holds ",
             piece.full_name, "[", piece.full_begin, ", ", piece.full_begin + piece.length, ") along dim ",
             piece.dim, ", which does not fit this model's ", piece.full_name, " ", shape_text(full),
             " (was the checkpoint written for another model size?)");
}

// Copies the known elements of a rank's local tensor into the whole ones (`whole` of a full
// name), slice by slice.
void place(const std::function<Partial&(const std::string&)>& whole, const Partial& local,
           const LocalParameter& param) {
  for (const ShardPlacement& p : param.pieces) {
    Partial& to = whole(p.full_name);
    auto full_slice = [&](const Tensor& t) { return piece_of(t, p.dim, p.full_begin, p.length); };
    auto local_slice = [&](const Tensor& t) { return piece_of(t, p.dim, p.local_begin, p.length); };
    merge(full_slice(to.value), full_slice(to.known), local_slice(local.value), local_slice(local.known));
  }
}

}  // namespace

RankLayout rank_layout(const nn::Module& local, const ModelPlacement& placement,
                       std::optional<std::pair<int64_t, int64_t>> zero_shard) {
  RankLayout out{.parameters = {}, .zero_shard = zero_shard};
  const bool whole = placement.pieces.empty() && placement.copies.empty();
  for (const auto& [name, p] : local.named_parameters()) {
    LocalParameter param{name, p.sizes().vec(), {}};
    if (whole) param.pieces.push_back({name, name, 0, 0, 0, p.dim() > 0 ? p.size(0) : 1});
    for (const auto* placements : {&placement.pieces, &placement.copies})
      for (const ShardPlacement& piece : *placements)
        if (piece.local_name == name) param.pieces.push_back(piece);
    out.parameters.push_back(std::move(param));
  }
  return out;
}

std::string rank_layout_to_json(const RankLayout& layout) {
  Json parameters = Json::array();
  for (const LocalParameter& param : layout.parameters) {
    Json pieces = Json::array();
    for (const ShardPlacement& p : param.pieces)
      pieces.push_back({{"full", p.full_name},
                        {"dim", p.dim},
                        {"full_begin", p.full_begin},
                        {"local_begin", p.local_begin},
                        {"length", p.length}});
    parameters.push_back({{"name", param.name}, {"shape", param.shape}, {"pieces", pieces}});
  }
  Json out{{"parameters", parameters}, {"zero_shard", nullptr}};
  if (layout.zero_shard) out["zero_shard"] = {layout.zero_shard->first, layout.zero_shard->second};
  return out.dump();
}

RankLayout rank_layout_from_json(const std::string& text) {
  RankLayout layout;
  try {
    const Json j = Json::parse(text);
    for (const Json& param : j.at("parameters")) {
      LocalParameter p{
          param.at("name").get<std::string>(), param.at("shape").get<std::vector<int64_t>>(), {}};
      for (const Json& piece : param.at("pieces"))
        p.pieces.push_back(
            ShardPlacement{p.name, piece.at("full").get<std::string>(), piece.at("dim").get<int64_t>(),
                           piece.at("full_begin").get<int64_t>(), piece.at("local_begin").get<int64_t>(),
                           piece.at("length").get<int64_t>()});
      layout.parameters.push_back(std::move(p));
    }
    if (!j.at("zero_shard").is_null())
      layout.zero_shard =
          std::pair{j.at("zero_shard").at(0).get<int64_t>(), j.at("zero_shard").at(1).get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    LOOM_FAIL("reshard: a rank layout is malformed (", e.what(), "): ", text.substr(0, 200));
  }
  return layout;
}

RankLayout rank_layout_from_metadata(const std::string& rank_metadata) {
  const Json meta = Json::parse(rank_metadata, nullptr, false);
  LOOM_CHECK(
      meta.is_object() && meta.contains(kLayoutMetadataKey),
      "reshard: the rank recorded no layout (a checkpoint written before layouts were recorded); it resumes "
      "only in the layout that wrote it");
  return rank_layout_from_json(meta[kLayoutMetadataKey].dump());
}

FullShapes full_shapes_of(const nn::Module& full_model) {
  FullShapes shapes;
  for (const auto& [name, t] : full_model.named_parameters()) shapes.emplace(name, t.sizes().vec());
  return shapes;
}

FullTrainingState gather_training_state(const std::vector<RankLayout>& layouts,
                                        const std::vector<RankTrainingState>& ranks,
                                        const FullShapes& shapes) {
  LOOM_CHECK(layouts.size() == ranks.size() && !layouts.empty(), "reshard: ", layouts.size(), " layouts for ",
             ranks.size(), " ranks' sections");
  NoGradGuard no_grad;
  std::map<std::string, Partial> model;                         // full name ->
  std::map<std::string, std::map<std::string, Partial>> state;  // full name -> state name ->
  std::map<std::string, std::pair<Tensor, int>> steps;          // full name -> (count, first rank)
  const nn::StateDict* groups = nullptr;  // the hyper-parameters, from the first rank with an optimizer
  for (size_t r = 0; r < layouts.size(); ++r) {
    const int rank = static_cast<int>(r);
    const RankLayout& layout = layouts[r];
    for (const LocalParameter& param : layout.parameters) {
      for (const ShardPlacement& piece : param.pieces) check_piece_fits(piece, param, shapes, rank);
      const Tensor* value = ranks[r].model.find(param.name);
      LOOM_CHECK(value != nullptr, "reshard: saving rank ", rank, "'s model section has no ", param.name,
                 ", which its layout lists");
      LOOM_CHECK(value->sizes() == IntArrayRef(param.shape), "reshard: saving rank ", rank, "'s ", param.name,
                 " has shape ", shape_text(value->sizes()), ", its layout says ", shape_text(param.shape));
      const Partial local{*value, ones(param.shape, TensorOptions(kBool))};
      place(
          [&](const std::string& name) -> Partial& {
            auto it = model.find(name);
            if (it == model.end()) it = model.emplace(name, unknown(shapes.at(name), value->options())).first;
            return it->second;
          },
          local, param);
    }
    const auto local_state = per_parameter_state(layout, ranks[r].optimizer, rank);
    for (size_t i = 0; i < layout.parameters.size(); ++i) {
      const LocalParameter& param = layout.parameters[i];
      for (const auto& [name, partial] : local_state[i]) {
        if (!is_scalar_state(name)) {
          place(
              [&](const std::string& full_name) -> Partial& {
                auto& by_name = state[full_name];
                auto it = by_name.find(name);
                if (it == by_name.end())
                  it = by_name.emplace(name, unknown(shapes.at(full_name), partial.value.options())).first;
                return it->second;
              },
              partial, param);
          continue;
        }
        const double count = partial.value.to(kFloat64).item<double>();
        for (const ShardPlacement& piece : param.pieces) {
          const auto [it, first] = steps.try_emplace(piece.full_name, partial.value, rank);
          const double earlier = it->second.first.to(kFloat64).item<double>();
          LOOM_CHECK(first || earlier == count, "reshard: the optimizer step counts of ", piece.full_name,
                     " disagree: ", earlier, " on saving rank ", it->second.second, ", ", count,
                     " on saving rank ", rank);
        }
      }
    }
    if (!groups && !ranks[r].optimizer.empty()) groups = &ranks[r].optimizer;
  }
  FullTrainingState out;
  for (const auto& [name, shape] : shapes) {
    auto it = model.find(name);
    LOOM_CHECK(it != model.end() && complete(it->second), "reshard: no saving rank holds ",
               it == model.end() ? "any" : "all", " of ", name, " ", shape_text(shape),
               " (was the checkpoint written for another model?)");
    out.model.insert(name, it->second.value);
  }
  for (const auto& [name, by_state] : state)
    for (const auto& [state_name, partial] : by_state) {
      LOOM_CHECK(complete(partial), "reshard: the saving ranks hold the optimizer's ", state_name,
                 " of only part of ", name);
      out.optimizer.insert(name + "." + state_name, partial.value);
    }
  for (const auto& [name, count] : steps) out.optimizer.insert(name + ".step", count.first);
  if (groups)
    for (const auto& [key, value] : *groups) {
      if (!key.starts_with(kGroupPrefix)) continue;
      LOOM_CHECK(key.starts_with(std::string(kGroupPrefix) + "0."), "reshard: the saved optimizer has ",
                 "more than one parameter group ('", key, "'); only one can be resharded");
      if (!key.ends_with(".params")) out.optimizer.insert(key, value);
    }
  return out;
}

RankTrainingState scatter_training_state(const FullTrainingState& full, const RankLayout& layout) {
  NoGradGuard no_grad;
  RankTrainingState out;
  // Each parameter, and each of its optimizer states, cut from the whole ones.
  std::vector<std::map<std::string, Tensor>> state(layout.parameters.size());
  auto cut = [](const Tensor& whole_of_first, const LocalParameter& param,
                const std::function<const Tensor*(const std::string&)>& whole) {
    Partial local = unknown(param.shape, whole_of_first.options());
    for (const ShardPlacement& p : param.pieces) {
      const Tensor* source = whole(p.full_name);
      LOOM_CHECK(source != nullptr, "reshard: ", param.name, " is a piece of ", p.full_name,
                 ", which the gathered state does not have");
      piece_of(local.value, p.dim, p.local_begin, p.length)
          .copy_(piece_of(source->contiguous(), p.dim, p.full_begin, p.length));
      piece_of(local.known, p.dim, p.local_begin, p.length).fill_(true);
    }
    // A flat shard's uncovered elements are its padding: zero, as FullyShardedDataParallel pads.
    LOOM_CHECK(is_flat(param) || complete(local), "reshard: the layout's pieces do not cover all of ", param.name,
               " ", shape_text(param.shape));
    return local.value;
  };
  for (size_t i = 0; i < layout.parameters.size(); ++i) {
    const LocalParameter& param = layout.parameters[i];
    LOOM_CHECK(!param.pieces.empty(), "reshard: the layout places ", param.name,
               " nowhere in the whole model");
    const std::string& first = param.pieces.front().full_name;
    const Tensor* whole = full.model.find(first);
    LOOM_CHECK(whole != nullptr, "reshard: ", param.name, " is a piece of ", first,
               ", which the gathered model does not have");
    out.model.insert(param.name,
                     cut(*whole, param, [&full](const std::string& n) { return full.model.find(n); }));
    // The state names the gathered optimizer holds for this parameter's first whole tensor.
    const std::string prefix = first + ".";
    for (const auto& [key, value] : full.optimizer) {
      if (!key.starts_with(prefix) || key.find('.', prefix.size()) != std::string::npos) continue;
      const std::string name = key.substr(prefix.size());
      if (is_scalar_state(name)) {
        state[i][name] = value;
        continue;
      }
      state[i][name] = cut(
          value, param, [&full, &name](const std::string& n) { return full.optimizer.find(n + "." + name); });
    }
  }
  const bool empty_shard = layout.zero_shard && layout.zero_shard->first >= layout.zero_shard->second;
  if (empty_shard) return out;  // ZeroOptimizer makes no optimizer for it
  // The optimizer's entries: one per parameter, or one per ZeRO shard view.
  std::vector<ShardView> views;
  if (layout.zero_shard) {
    views = shard_views(layout);
  } else {
    for (size_t i = 0; i < layout.parameters.size(); ++i) views.push_back({i, 0, -1});
  }
  for (size_t k = 0; k < views.size(); ++k)
    for (const auto& [name, value] : state[views[k].parameter]) {
      const std::string key = std::string(kStatePrefix) + std::to_string(k) + "." + name;
      if (is_scalar_state(name) || !layout.zero_shard)
        out.optimizer.insert(key, value.clone());
      else
        out.optimizer.insert(key, value.reshape({-1}).slice(0, views[k].begin, views[k].end).clone());
    }
  out.optimizer.insert(std::string(kGroupPrefix) + "0.params",
                       arange(0, static_cast<int64_t>(views.size()), 1, kInt64));
  for (const auto& [key, value] : full.optimizer)
    if (key.starts_with(kGroupPrefix)) out.optimizer.insert(key, value);
  return out;
}

RankTrainingState reshard_checkpoint(const nn::CheckpointParts& parts, const RankLayout& mine,
                                     const FullShapes& shapes) {
  std::vector<RankLayout> layouts(static_cast<size_t>(parts.ranks()));
  std::vector<RankTrainingState> ranks(layouts.size());
  std::set<std::string> read;  // the layouts of the saving ranks read so far
  for (int r = 0; r < parts.ranks(); ++r) {
    RankLayout layout;
    try {
      layout = rank_layout_from_metadata(parts.rank_metadata.at(static_cast<size_t>(r)));
    } catch (const Error& e) {
      LOOM_FAIL("saving rank ", r, " of ", parts.path.string(), ": ", e.what());
    }
    // A rank with the layout of a lower one (a data-parallel replica without ZeRO) holds the
    // same values, of which the lower rank's win: its files are not read. It stays in the lists
    // as a rank with no piece, so that messages name the saving ranks by their numbers.
    if (!read.insert(rank_layout_to_json(layout)).second) continue;
    const auto sections = parts.load_rank(r);
    auto section = [&](const char* name) {
      auto it = sections.find(name);
      return it == sections.end() ? nn::StateDict{} : it->second;
    };
    layouts[static_cast<size_t>(r)] = std::move(layout);
    ranks[static_cast<size_t>(r)] = {section("model"), section("optimizer")};
  }
  return scatter_training_state(gather_training_state(layouts, ranks, shapes), mine);
}

int64_t resharded_batch(int64_t old_batch, int64_t old_global_batch, int64_t new_global_batch) {
  LOOM_CHECK(old_batch >= 0 && old_global_batch > 0 && new_global_batch > 0, "resharded_batch: batch ",
             old_batch, " of global batches ", old_global_batch, " -> ", new_global_batch);
  return old_batch * old_global_batch / new_global_batch;
}

}  // namespace loom::distributed
