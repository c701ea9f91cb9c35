/* Shape arithmetic shared by every op (see shape.h). */
#include "core/shape.h"

#include "core/error.h"

namespace loom {

std::ostream& operator<<(std::ostream& os, IntArrayRef values) {
  os << '[';
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  return os << ']';
}

int64_t shape_numel(IntArrayRef sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    LOOM_CHECK(s >= 0, "negative dimension in shape ", sizes);
    n *= s;
  }
  return n;
}

DimVector contiguous_strides(IntArrayRef sizes) {
  DimVector strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

DimVector broadcast_shapes(IntArrayRef a, IntArrayRef b, std::string_view op) {
  size_t n = std::max(a.size(), b.size());
  DimVector out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    LOOM_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
               " cannot be broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;  // 0-dim accepts 0 and -1
  LOOM_CHECK(dim >= lo && dim <= hi, op, ": dim ", dim, " out of range for a ", ndim,
             "-dim tensor (expected [", lo, ", ", hi, "])");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

}  // namespace loom
