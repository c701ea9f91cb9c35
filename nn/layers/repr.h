/*
 * Formatting helpers for the layers' extra_repr(): numbers and flags written the way Python
 * prints them, so that print(model) in Loom reads exactly like PyTorch's ("eps=1e-05",
 * "momentum=0.1", "bias=False", "(128,)"). Internal to nn/layers.
 */
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace loom::nn::detail {

// Python's repr(float): the shortest digits that read back as the same double, in fixed
// notation when the decimal exponent is in [-4, 16) ("0.0001", "100.0"), else in scientific
// notation with at least two exponent digits ("1e-05", "1e+16").
inline std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(end - buf));  // "-1.2345e-05": shortest round-trip
  const size_t e = sci.find('e');
  const int exponent = std::atoi(buf + e + 1);
  if (exponent < -4 || exponent >= 16) return std::string(sci);
  // Strings are built by appending: GCC 12 reports a false -Wrestrict on `"literal" + std::string`.
  std::string digits, out;
  for (char c : sci.substr(0, e)) {
    if (c == '-') {
      out += '-';
    } else if (c != '.') {
      digits += c;
    }
  }
  if (exponent < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
  } else {
    const size_t int_digits = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= int_digits) {
      out += digits;
      out.append(int_digits - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, int_digits);
      out += '.';
      out.append(digits, int_digits);
    }
  }
  return out;
}

inline std::string python_bool(bool v) {
  return v ? "True" : "False";
}

// Python's repr of a tuple of ints: "(128,)", "(2, 3)".
inline std::string python_tuple(const std::vector<int64_t>& values) {
  std::string out = "(";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(values[i]);
  }
  out += values.size() == 1 ? ",)" : ")";
  return out;
}

}  // namespace loom::nn::detail
