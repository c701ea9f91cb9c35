/* Write checks for in-place ops, and dim-list normalisation shared by dim-taking ops. */
#include "ops/op_utils.h"

#include <algorithm>

#include "ops/copy_ops.h"

namespace loom {

void check_writable(const Tensor& self, std::string_view op) {
  for (int64_t d = 0; d < self.dim(); ++d)
    LOOM_CHECK(self.strides()[d] != 0 || self.sizes()[d] <= 1, op,
               ": cannot write in place into a tensor whose elements share memory (shape ", self.sizes(),
               ", strides ", self.strides(), "); clone() it first");
}

Tensor unaliased(const Tensor& input, const Tensor& self) {
  if (!input.shares_storage(self)) return input;
  if (input.data_ptr() == self.data_ptr() && input.strides() == self.strides()) return input;
  return clone(input);
}

DimVector normalize_dims(IntArrayRef dims, int64_t ndim, std::string_view op) {
  DimVector out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i)
    LOOM_CHECK(out[i] != out[i - 1], op, ": dim ", out[i], " appears more than once in ", dims);
  if (ndim == 0) out.clear();  // a 0-dim tensor reduces over nothing
  return out;
}

DimVector reduced_shape(IntArrayRef sizes, IntArrayRef dims, bool keepdim) {
  DimVector out;
  size_t j = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    bool reduced = j < dims.size() && dims[j] == static_cast<int64_t>(i);
    if (reduced) ++j;
    if (!reduced) out.push_back(sizes[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

}  // namespace loom
