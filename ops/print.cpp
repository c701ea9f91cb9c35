/*
 * Printing tensors the way PyTorch does: one format for all elements (integer-valued floats
 * as "1.", otherwise 4 decimals, scientific when the range calls for it), right-aligned,
 * nested brackets, and "..." eliding all but 3 items at each end of every dim when the
 * tensor has more than 1000 elements. Non-default dtypes and non-CPU devices are appended.
 */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/copy_ops.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = false;
  bool int_mode = false;
  bool sci_mode = false;
  size_t width = 1;

  std::string format(double v, bool is_bool) const {
    char buf[64];
    if (is_bool) return v != 0 ? "True" : "False";
    if (!floating) {
      std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      return "nan";
    } else if (std::isinf(v)) {
      return v > 0 ? "inf" : "-inf";
    } else if (sci_mode) {
      std::snprintf(buf, sizeof(buf), "%.4e", v);
    } else if (int_mode) {
      std::snprintf(buf, sizeof(buf), "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof(buf), "%.4f", v);
    }
    return buf;
  }
};

// Indices shown along a dim of `size`: all, or the first and last kEdgeItems (-1 marks "...").
std::vector<int64_t> shown_indices(int64_t size, bool summarize) {
  std::vector<int64_t> idx;
  if (summarize && size > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
    idx.push_back(-1);
    for (int64_t i = size - kEdgeItems; i < size; ++i) idx.push_back(i);
  } else {
    for (int64_t i = 0; i < size; ++i) idx.push_back(i);
  }
  return idx;
}

// Values (as double, row-major) of the elements that will be printed.
void collect(const Tensor& t, bool summarize, std::vector<double>& out) {
  if (t.dim() == 0) {
    out.push_back(t.item().to_double());
    return;
  }
  for (int64_t i : shown_indices(t.sizes()[0], summarize))
    if (i >= 0) collect(select(t, 0, i), summarize, out);
}

void print_rec(std::string& s, const Tensor& t, const Formatter& f, bool is_bool, bool summarize, size_t indent,
               const std::vector<double>& values, size_t& pos) {
  if (t.dim() == 0) {
    std::string v = f.format(values[pos++], is_bool);
    s += std::string(f.width > v.size() ? f.width - v.size() : 0, ' ') + v;
    return;
  }
  s += '[';
  auto idx = shown_indices(t.sizes()[0], summarize);
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k > 0) {
      s += ',';
      if (t.dim() == 1) {
        s += ' ';
      } else {
        s += std::string(static_cast<size_t>(t.dim() - 1), '\n');
        s += std::string(indent + 1, ' ');
      }
    }
    if (idx[k] < 0) {
      s += t.dim() == 1 ? " ..." : "...";
      continue;
    }
    print_rec(s, select(t, 0, idx[k]), f, is_bool, summarize, indent + 1, values, pos);
  }
  s += ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) {
  if (!tensor.defined()) return os << "tensor(undefined)";
  Tensor t = to(tensor, kCPU);
  const bool summarize = t.numel() > kSummarizeThreshold;
  const bool is_bool = t.dtype() == DType::Bool;
  std::vector<double> values;
  if (t.numel() > 0) collect(t, summarize, values);

  Formatter f;
  f.floating = t.is_floating_point();
  if (f.floating) {
    std::vector<double> finite;
    for (double v : values)
      if (std::isfinite(v)) finite.push_back(std::abs(v));
    f.int_mode = std::all_of(finite.begin(), finite.end(), [](double v) { return v == std::floor(v); });
    if (!finite.empty()) {
      double mx = *std::max_element(finite.begin(), finite.end());
      std::vector<double> nonzero;
      for (double v : finite)
        if (v != 0) nonzero.push_back(v);
      double mn = nonzero.empty() ? 0 : *std::min_element(nonzero.begin(), nonzero.end());
      if (f.int_mode) {
        f.sci_mode = mx > 1e8;
      } else {
        f.sci_mode = mx > 1e8 || (mn > 0 && (mx / mn > 1000.0 || mn < 1e-4));
      }
    }
  }
  for (double v : values) f.width = std::max(f.width, f.format(v, is_bool).size());

  std::string s = "tensor(";
  if (t.numel() == 0 && t.dim() > 0) {
    s += "[]";
  } else {
    size_t pos = 0;
    print_rec(s, t, f, is_bool, summarize, 7, values, pos);
  }
  if (tensor.is_cuda()) s += ", device='" + tensor.device().str() + "'";
  if (t.numel() == 0 && t.dim() > 1) {
    s += ", size=(";
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.sizes()[i]);
    s += ")";
  }
  DType d = t.dtype();
  if (d != DType::Float32 && d != DType::Int64 && d != DType::Bool) s += ", dtype=" + std::string(dtype_name(d));
  s += ')';
  return os << s;
}

}  // namespace loom
