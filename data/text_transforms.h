/*
 * Text transforms: RandomTokenWindow cuts a language-model example out of a block of tokens.
 */
#pragma once

#include "data/transform.h"

namespace loom::data {

// int64 [L] -> data int64 [T], target int64 [T]: a window of T + 1 tokens starting at a
// uniformly random position in [0, L - T - 1], split into input (the first T) and target
// (the last T, i.e. the next token at every position). With L = T + 1 it is deterministic.
class RandomTokenWindow : public Transform {
 public:
  explicit RandomTokenWindow(int64_t length);
  Example apply(const Example& example, SampleRng& rng) const override;
  bool is_random() const override { return true; }
  std::string description() const override { return "RandomTokenWindow(" + std::to_string(length_) + ")"; }

 private:
  int64_t length_;
};

}  // namespace loom::data
