#include "ops/memory_format.h"

#include "ops/copy_ops.h"
#include "ops/factories.h"
#include "ops/view_ops.h"

namespace loom {

bool is_channels_last(const Tensor& t) {
  if (t.dim() != 4 || t.is_contiguous()) return false;
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  const int64_t expected[4] = {h * w * c, 1, w * c, c};
  for (int d = 0; d < 4; ++d)
    if (t.size(d) != 1 && t.stride(d) != expected[d]) return false;
  return true;
}

Tensor empty_4d(IntArrayRef sizes, TensorOptions options, bool channels_last) {
  if (!channels_last) return empty(sizes, options);
  return permute(empty({sizes[0], sizes[2], sizes[3], sizes[1]}, options), {0, 3, 1, 2});
}

Tensor in_format(const Tensor& t, bool channels_last) {
  if (!channels_last) return contiguous(t);
  if (is_channels_last(t) || (t.is_contiguous() && t.size(1) == 1)) return t;
  Tensor out = empty_4d(t.sizes(), t.options(), true);
  copy_(out, t);
  return out;
}

void in_nchw_order(const Tensor& out, const std::vector<Tensor>& inputs,
                   const std::function<void(const Tensor&, const std::vector<Tensor>&)>& compute) {
  if (out.is_contiguous()) {
    compute(out, inputs);
    return;
  }
  std::vector<Tensor> nchw;
  for (const Tensor& t : inputs) nchw.push_back(contiguous(t));
  Tensor result = empty(out.sizes(), out.options());
  compute(result, nchw);
  copy_(out, result);
}

}  // namespace loom
