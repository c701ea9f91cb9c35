/* Stacking examples into a batch (see collate.h). */
#include "data/collate.h"

#include <cstring>

#include "ops/ops.h"

namespace loom::data {

namespace {

Tensor stack_field(const std::vector<Example>& examples, Tensor Example::*field, const char* name,
                   const BatchAllocator& alloc) {
  const Tensor& first = examples.front().*field;
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor& t = examples[i].*field;
    if (!first.defined()) {
      LOOM_CHECK(!t.defined(), "collate: example ", i, " has ", name, " but example 0 has none");
      continue;
    }
    LOOM_CHECK(t.defined(), "collate: example ", i, " has no ", name, " but example 0 has");
    LOOM_CHECK(t.sizes() == first.sizes() && t.dtype() == first.dtype(), "collate: example ", i, " has ",
               name, " of shape ", t.sizes(), " ", t.dtype(), ", but example 0 has ", first.sizes(), " ",
               first.dtype());
  }
  if (!first.defined()) return {};
  DimVector sizes{static_cast<int64_t>(examples.size())};
  for (int64_t s : first.sizes()) sizes.push_back(s);
  Tensor out = alloc ? alloc(sizes, first.dtype()) : empty(sizes, first.dtype());
  LOOM_CHECK(out.is_contiguous() && out.sizes() == IntArrayRef(sizes) && out.dtype() == first.dtype(),
             "collate: the batch allocator returned a tensor of the wrong shape or dtype");
  const size_t bytes = first.nbytes();
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor& t = examples[i].*field;
    if (t.is_contiguous() && t.is_cpu()) {
      std::memcpy(dst + i * bytes, t.data_ptr(), bytes);
    } else {
      out.select(0, static_cast<int64_t>(i)).copy_(t);
    }
  }
  return out;
}

}  // namespace

Batch collate(const std::vector<Example>& examples, const BatchAllocator& alloc) {
  LOOM_CHECK(!examples.empty(), "collate: no examples");
  Batch batch;
  batch.data = stack_field(examples, &Example::data, "data", alloc);
  batch.target = stack_field(examples, &Example::target, "target", alloc);
  return batch;
}

}  // namespace loom::data
