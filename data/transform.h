/*
 * Transforms: functions of one example, applied by the loader's workers (augmentation) or by
 * a MapDataset (deterministic preprocessing, which a cache may then keep).
 *
 * A transform draws its randomness only from the SampleRng it is given, which the loader
 * derives from (seed, epoch, index): augmented batches do not depend on the number of workers
 * or on timing. A transform never modifies its input's tensors (they may live in a cache); it
 * returns new ones, or the input itself when it changes nothing.
 */
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/sample_rng.h"

namespace loom::data {

class Transform {
 public:
  virtual ~Transform() = default;
  virtual Example apply(const Example& example, SampleRng& rng) const = 0;
  // Whether apply draws from rng (a MapDataset accepts only transforms that do not).
  virtual bool is_random() const = 0;
  // The transform and its parameters, e.g. "Normalize(mean=[0.286], std=[0.353])": part of
  // a disk cache's key, so a changed parameter invalidates the cache.
  virtual std::string description() const = 0;
};

using TransformPtr = std::shared_ptr<const Transform>;

// Applies transforms in order, all drawing from the same sample stream.
class Compose : public Transform {
 public:
  Compose(std::initializer_list<TransformPtr> transforms) : Compose(std::vector<TransformPtr>(transforms)) {}
  explicit Compose(std::vector<TransformPtr> transforms);
  Example apply(const Example& example, SampleRng& rng) const override;
  bool is_random() const override;
  std::string description() const override;

 private:
  std::vector<TransformPtr> transforms_;
};

// A transform from a function (tests, quick experiments). `name` stands in for its
// parameters in the description: change it when the function changes.
class FunctionTransform : public Transform {
 public:
  using Fn = std::function<Example(const Example&, SampleRng&)>;
  FunctionTransform(std::string name, Fn fn, bool random)
      : name_(std::move(name)), fn_(std::move(fn)), random_(random) {}
  Example apply(const Example& example, SampleRng& rng) const override { return fn_(example, rng); }
  bool is_random() const override { return random_; }
  std::string description() const override { return name_; }

 private:
  std::string name_;
  Fn fn_;
  bool random_;
};

// The dataset `source` with a deterministic transform applied to each example, as
// torch::data's map(). Its identity includes the transform's description, so a disk cache
// of it is rebuilt when the preprocessing changes.
class MapDataset : public Dataset {
 public:
  MapDataset(std::shared_ptr<const Dataset> source, TransformPtr transform);
  int64_t size() const override { return source_->size(); }
  Example get(int64_t index) const override;
  std::string identity() const override;

 private:
  std::shared_ptr<const Dataset> source_;
  TransformPtr transform_;
};

}  // namespace loom::data
