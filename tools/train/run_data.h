/*
 * The data of a `train` run (trainer.h): the --data and --val HDF5 files opened as image or token
 * datasets, with their transforms and the image normalisation; and the validation shard of a
 * rank. Bad input throws loom::Error naming the flag.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/data.h"
#include "tools/train/options.h"

namespace loom::train {

struct Data {
  bool tokens = false;  // a token stream (GPT) rather than labelled images
  std::shared_ptr<data::Dataset> train, val;
  data::TransformPtr train_transform, val_transform;
  int64_t channels = 0, height = 0, width = 0, classes = 0;  // images
  int64_t vocab = 0;                                         // tokens
  // tokens, --windows random: windows drawn per epoch (with replacement) from `train`, whose
  // example i is the window starting at token i; 0: `train`'s examples are visited once each.
  int64_t random_windows = 0;
  std::vector<float> mean, std;  // images: the per-channel normalisation of the inputs
};

// Opens --data and --val (and keeps the first --train-examples training examples).
Data load_data(const TrainOptions& o);

// Rank r of N evaluates examples r, r + N, r + 2N, ...: each example exactly once over the job
// (DistributedSampler pads the shards to equal length, which would count some examples twice).
class ShardSampler : public data::Sampler {
 public:
  ShardSampler(int64_t n, int64_t ranks, int64_t rank) : n_(n), ranks_(ranks), rank_(rank) {}
  int64_t size() const override { return rank_ < n_ ? (n_ - rank_ + ranks_ - 1) / ranks_ : 0; }
  std::vector<int64_t> indices(int64_t) const override {
    std::vector<int64_t> mine;
    for (int64_t i = rank_; i < n_; i += ranks_) mine.push_back(i);
    return mine;
  }

 private:
  int64_t n_, ranks_, rank_;
};

}  // namespace loom::train
