/* RandomTokenWindow (see text_transforms.h). */
#include "data/text_transforms.h"

#include <cstring>

#include "data/sample_memory.h"
#include "ops/ops.h"

namespace loom::data {

RandomTokenWindow::RandomTokenWindow(int64_t length) : length_(length) {
  LOOM_CHECK(length >= 1, "RandomTokenWindow: length ", length, " must be >= 1");
}

Example RandomTokenWindow::apply(const Example& example, SampleRng& rng) const {
  LOOM_CHECK(example.data.defined(), "RandomTokenWindow: example has no data");
  LOOM_CHECK(example.data.dim() == 1, "RandomTokenWindow: expected tokens [L], got shape ",
             example.data.sizes());
  const Tensor tokens = example.data.to(kInt64).contiguous();
  const int64_t n = tokens.size(0);
  LOOM_CHECK(n >= length_ + 1, "RandomTokenWindow: a block of ", n, " tokens is shorter than a window of ",
             length_, " + 1");
  const int64_t start = rng.randint(0, n - length_);
  const int64_t* src = tokens.data_ptr<int64_t>() + start;
  Tensor input = sample_tensor({length_}, kInt64), target = sample_tensor({length_}, kInt64);
  std::memcpy(input.data_ptr(), src, static_cast<size_t>(length_) * sizeof(int64_t));
  std::memcpy(target.data_ptr(), src + 1, static_cast<size_t>(length_) * sizeof(int64_t));
  return {input, target};
}

}  // namespace loom::data
