/*
 * Samplers: permutations are permutations, reproducible from (seed, epoch) and different
 * across epochs and seeds; distributed shards are disjoint, of equal length, cover the data
 * and agree across ranks.
 */
#include <algorithm>
#include <numeric>
#include <set>

#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;

TEST_CASE("RandomSampler gives a permutation per epoch, a pure function of (seed, epoch)") {
  RandomSampler s(1000, 42);
  CHECK(s.size() == 1000);
  std::vector<int64_t> e0 = s.indices(0), e1 = s.indices(1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> ids(1000);
  std::iota(ids.begin(), ids.end(), 0);
  CHECK(sorted == ids);
  CHECK(e0 == RandomSampler(1000, 42).indices(0));  // a new object, same numbers
  CHECK(e0 != e1);
  CHECK(e0 != RandomSampler(1000, 43).indices(0));
  // Roughly uniform: where index 0 lands over many epochs spreads over the range.
  int64_t first_half = 0;
  for (int64_t epoch = 0; epoch < 400; ++epoch) {
    auto p = s.indices(epoch);
    first_half += std::find(p.begin(), p.end(), 0) - p.begin() < 500;
  }
  CHECK(first_half > 160);
  CHECK(first_half < 240);
  CHECK(SequentialSampler(5).indices(3) == std::vector<int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("DistributedSampler shards are disjoint, equal, covering, reshuffled per epoch and agreed on") {
  for (int64_t n : {100, 101, 7}) {
    for (bool drop_last : {false, true}) {
      CAPTURE(n);
      CAPTURE(drop_last);
      const int64_t replicas = 4;
      for (int64_t epoch : {0, 1}) {
        std::vector<int64_t> all;
        std::vector<std::vector<int64_t>> shards;
        for (int64_t rank = 0; rank < replicas; ++rank) {
          DistributedSampler s(n, replicas, rank, {.shuffle = true, .seed = 9, .drop_last = drop_last});
          shards.push_back(s.indices(epoch));
          CHECK(static_cast<int64_t>(shards.back().size()) == s.size());
          CHECK(s.size() == (drop_last ? n / replicas : (n + replicas - 1) / replicas));
          // The same rank computes the same shard in another object (another process).
          CHECK(shards.back() ==
                DistributedSampler(n, replicas, rank, {.shuffle = true, .seed = 9, .drop_last = drop_last})
                    .indices(epoch));
          all.insert(all.end(), shards.back().begin(), shards.back().end());
        }
        std::set<int64_t> distinct(all.begin(), all.end());
        if (drop_last) {
          CHECK(distinct.size() == all.size());  // strictly disjoint
          CHECK(static_cast<int64_t>(all.size()) == n / replicas * replicas);
        } else {
          CHECK(static_cast<int64_t>(distinct.size()) == n);  // every index, the padding repeats a few
          CHECK(static_cast<int64_t>(all.size() - distinct.size()) == (replicas - n % replicas) % replicas);
        }
        // Together the shards are the epoch's permutation, dealt round-robin.
        auto perm = permutation(n, 9, epoch);
        for (int64_t rank = 0; rank < replicas; ++rank)
          for (size_t k = 0; k < shards[static_cast<size_t>(rank)].size(); ++k) {
            const size_t pos = k * replicas + static_cast<size_t>(rank);
            if (pos < perm.size()) CHECK(shards[static_cast<size_t>(rank)][k] == perm[pos]);
          }
      }
      DistributedSampler s(n, replicas, 1, {.shuffle = true, .seed = 9, .drop_last = drop_last});
      if (s.size() > 2) CHECK(s.indices(0) != s.indices(1));
    }
  }
  CHECK(DistributedSampler(10, 2, 1, {.shuffle = false}).indices(0) == std::vector<int64_t>{1, 3, 5, 7, 9});
  CHECK_THROWS_AS(DistributedSampler(10, 2, 2), Error);
  CHECK_THROWS_AS(DistributedSampler(10, 0, 0), Error);
}

TEST_CASE("RandomWithReplacementSampler: an epoch of any length, uniform draws, split alike over ranks") {
  RandomWithReplacementSampler s(10, 5000, 7);
  CHECK(s.size() == 5000);
  const std::vector<int64_t> e0 = s.indices(0);
  CHECK(e0.size() == 5000);
  CHECK(e0 == RandomWithReplacementSampler(10, 5000, 7).indices(0));  // a pure function of (seed, epoch)
  CHECK(e0 != s.indices(1));
  CHECK(e0 != RandomWithReplacementSampler(10, 5000, 8).indices(0));
  // Uniform over 0..9: each index 500 times expected, sd about 21; chi-square with 9 degrees of
  // freedom stays under 27.9 with probability 0.999.
  std::vector<int64_t> counts(10, 0);
  for (int64_t i : e0) {
    REQUIRE(i >= 0);
    REQUIRE(i < 10);
    ++counts[static_cast<size_t>(i)];
  }
  double chi2 = 0;
  for (int64_t c : counts) chi2 += (c - 500.0) * (c - 500.0) / 500.0;
  CHECK(chi2 < 27.9);
  // Longer than the dataset, so indices repeat: with replacement, not a permutation.
  CHECK(std::set<int64_t>(e0.begin(), e0.end()).size() == 10);

  // Three ranks: each holds every third draw of the same sequence; 7 samples give 3 each, the
  // last round drawn whole.
  const std::vector<int64_t> all = RandomWithReplacementSampler(1000, 9, 3).indices(4);
  for (int64_t rank = 0; rank < 3; ++rank) {
    RandomWithReplacementSampler shard(1000, 7, 3, 3, rank);
    CHECK(shard.size() == 3);
    const std::vector<int64_t> mine = shard.indices(4);
    REQUIRE(mine.size() == 3);
    for (size_t k = 0; k < 3; ++k) CHECK(mine[k] == all[k * 3 + static_cast<size_t>(rank)]);
  }
  CHECK_THROWS_WITH_AS(RandomWithReplacementSampler(0, 5, 1), doctest::Contains("at least one example"), Error);
  CHECK_THROWS_WITH_AS(RandomWithReplacementSampler(5, 0, 1), doctest::Contains("num_samples"), Error);
  CHECK_THROWS_WITH_AS(RandomWithReplacementSampler(5, 5, 1, 2, 2), doctest::Contains("rank 2"), Error);
}
