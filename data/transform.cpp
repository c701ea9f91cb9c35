/* Compose and MapDataset (see transform.h). */
#include "data/transform.h"

#include "core/error.h"

namespace loom::data {

Compose::Compose(std::vector<TransformPtr> transforms) : transforms_(std::move(transforms)) {
  for (const auto& t : transforms_) LOOM_CHECK(t != nullptr, "Compose: null transform");
}

Example Compose::apply(const Example& example, SampleRng& rng) const {
  Example e = example;
  for (const auto& t : transforms_) e = t->apply(e, rng);
  return e;
}

bool Compose::is_random() const {
  for (const auto& t : transforms_)
    if (t->is_random()) return true;
  return false;
}

std::string Compose::description() const {
  std::string out = "Compose(";
  for (size_t i = 0; i < transforms_.size(); ++i) out += (i ? ", " : "") + transforms_[i]->description();
  return out + ")";
}

MapDataset::MapDataset(std::shared_ptr<const Dataset> source, TransformPtr transform)
    : source_(std::move(source)), transform_(std::move(transform)) {
  LOOM_CHECK(source_ != nullptr && transform_ != nullptr, "MapDataset: null dataset or transform");
  LOOM_CHECK(
      !transform_->is_random(), "MapDataset: ", transform_->description(),
      " is random; give random transforms to the DataLoader, whose per-(seed, epoch, index) randomness keeps "
      "batches reproducible");
}

Example MapDataset::get(int64_t index) const {
  SampleRng unused(0, 0, index);  // a deterministic transform draws nothing from it
  return transform_->apply(source_->get(index), unused);
}

std::string MapDataset::identity() const {
  const std::string source = source_->identity();
  return source.empty() ? "" : source + "|map:" + transform_->description();
}

}  // namespace loom::data
