/*
 * Size2: a (height, width) pair for the 2-D layers' kernel sizes, strides and paddings. It is
 * built implicitly from one integer, as torch accepts `kernel_size=5` for (5, 5) and libtorch
 * its ExpandingArray<2>, so that options read `nn::Conv2d(3, 32, 5, {.padding = 2})`.
 */
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace loom::nn {

struct Size2 {
  int64_t h, w;

  constexpr Size2(int64_t v) : h(v), w(v) {}  // NOLINT(google-explicit-constructor): (v, v), as torch
  constexpr Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}

  constexpr std::array<int64_t, 2> array() const { return {h, w}; }
  constexpr bool square() const { return h == w; }
  constexpr bool operator==(const Size2&) const = default;

  // Python's tuple repr, "(5, 5)", as torch prints a Conv2d's sizes.
  std::string tuple_string() const {
    std::string s = "(";  // appended: GCC 12 reports a false -Wrestrict on `"(" + std::string`
    s += std::to_string(h);
    s += ", ";
    s += std::to_string(w);
    s += ')';
    return s;
  }
  // "5" when square, else "(3, 5)": how torch prints a pooling size given as one int or a pair.
  std::string short_string() const { return square() ? std::to_string(h) : tuple_string(); }
};

}  // namespace loom::nn
