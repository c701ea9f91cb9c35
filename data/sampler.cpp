/* Sequential, random and distributed samplers (see sampler.h). */
#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "data/sample_rng.h"

namespace loom::data {

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  PhiloxStream rng(mix_key(seed, kSamplerStream), static_cast<uint64_t>(epoch), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  LOOM_CHECK(n >= 0, "SequentialSampler: size ", n, " is negative");
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> p(static_cast<size_t>(n_));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  LOOM_CHECK(n >= 0, "RandomSampler: size ", n, " is negative");
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return permutation(n_, seed_, epoch);
}

RandomWithReplacementSampler::RandomWithReplacementSampler(int64_t n, int64_t num_samples, uint64_t seed,
                                                           int64_t num_replicas, int64_t rank)
    : n_(n), replicas_(num_replicas), rank_(rank), seed_(seed) {
  LOOM_CHECK(n >= 1, "RandomWithReplacementSampler: needs a dataset of at least one example, got ", n);
  LOOM_CHECK(num_samples >= 1, "RandomWithReplacementSampler: num_samples must be >= 1, got ", num_samples);
  LOOM_CHECK(num_replicas >= 1, "RandomWithReplacementSampler: num_replicas must be >= 1, got ", num_replicas);
  LOOM_CHECK(rank >= 0 && rank < num_replicas, "RandomWithReplacementSampler: rank ", rank, " is not in [0, ",
             num_replicas, ")");
  per_rank_ = (num_samples + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> RandomWithReplacementSampler::indices(int64_t epoch) const {
  PhiloxStream rng(mix_key(seed_, kSamplerStream), static_cast<uint64_t>(epoch), 0);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = 0; i < per_rank_ * replicas_; ++i) {
    const auto index = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n_)));
    if (i % replicas_ == rank_) mine.push_back(index);
  }
  return mine;
}

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank,
                                       DistributedSamplerOptions options)
    : n_(n), replicas_(num_replicas), rank_(rank), options_(options) {
  LOOM_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ", num_replicas);
  LOOM_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " is not in [0, ",
             num_replicas, ")");
  LOOM_CHECK(n >= 0, "DistributedSampler: dataset size ", n, " is negative");
  per_rank_ = options_.drop_last ? n / replicas_ : (n + replicas_ - 1) / replicas_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all;
  if (options_.shuffle) {
    all = permutation(n_, options_.seed, epoch);
  } else {
    all.resize(static_cast<size_t>(n_));
    std::iota(all.begin(), all.end(), 0);
  }
  const int64_t total = per_rank_ * replicas_;
  // Padding repeats the permutation from its start (n may be smaller than the padding).
  for (int64_t i = n_; i < total && n_ > 0; ++i) all.push_back(all[static_cast<size_t>(i % n_)]);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = rank_; i < total; i += replicas_) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace loom::data
