/*
 * Samplers: the order in which a loader visits dataset indices, one epoch at a time.
 *
 * indices(epoch) is a pure function of the sampler's parameters and the epoch, never of a
 * generator's hidden state, so an epoch can be replayed (resuming a checkpoint) and every
 * rank of a distributed job computes the same permutation without talking to the others.
 */
#pragma once

#include <cstdint>
#include <vector>

namespace loom::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Indices per epoch.
  virtual int64_t size() const = 0;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

// 0, 1, ..., n - 1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

// A fresh permutation of 0..n-1 per epoch, from (seed, epoch).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

// num_samples indices per epoch, each drawn uniformly from 0..n-1 with replacement, from
// (seed, epoch): torch's RandomSampler(replacement=True, num_samples=...). An epoch's length is
// then a choice, not the dataset's size: the random-offset text windows of nanoGPT, say, where
// every start position is an example and an epoch is as many windows as the user wants. With
// num_replicas > 1 every rank draws the same num_samples indices and keeps every
// num_replicas-th from `rank` on (ceil(num_samples / num_replicas) of them; the last round is
// drawn whole, so ranks stay equal).
class RandomWithReplacementSampler : public Sampler {
 public:
  RandomWithReplacementSampler(int64_t n, int64_t num_samples, uint64_t seed, int64_t num_replicas = 1,
                               int64_t rank = 0);
  int64_t size() const override { return per_rank_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_, replicas_, rank_, per_rank_;
  uint64_t seed_;
};

// A uniformly random permutation of 0..n-1, a pure function of (seed, epoch) (Fisher-Yates
// driven by Philox).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  // false: pad the epoch by repeating its first indices up to a multiple of the replicas (as
  // PyTorch); true: drop the tail, so that shards are strictly disjoint.
  bool drop_last = false;
};

// Rank `rank` of `num_replicas` gets every num_replicas-th index of the epoch's permutation
// (the same on every rank given the seed), starting at `rank`: shards are disjoint, of equal
// length, together cover the dataset (up to the padding or the dropped tail) and change every
// epoch.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, DistributedSamplerOptions options = {});
  int64_t size() const override { return per_rank_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_, replicas_, rank_, per_rank_;
  DistributedSamplerOptions options_;
};

}  // namespace loom::data
