/* oneDNN engine, streams, descriptors and execution helpers (see onednn_utils.h). */
#include "ops/cpu/onednn_utils.h"

#include "core/allocator.h"

namespace loom::cpu::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::memory::data_type data_type(DType t) {
  switch (t) {
    case DType::Float32:
      return dnnl::memory::data_type::f32;
    case DType::BFloat16:
      return dnnl::memory::data_type::bf16;
    case DType::Float16:
      return dnnl::memory::data_type::f16;
    case DType::Int8:
      return dnnl::memory::data_type::s8;
    case DType::UInt8:
      return dnnl::memory::data_type::u8;
    case DType::Int32:
      return dnnl::memory::data_type::s32;
    default:
      LOOM_FAIL("oneDNN has no data type for ", t);
  }
}

dnnl::memory::desc strided_md(IntArrayRef sizes, IntArrayRef strides, DType t) {
  const size_t nd = sizes.size();
  dnnl::memory::dims dims(sizes.begin(), sizes.end()), st(strides.begin(), strides.end());
  // A size-1 dim gets the stride a row-major layout would give it (its neighbour's extent), so
  // that e.g. a [1, M, K] view compares equal to the plain "abc" layout whatever its stray stride.
  for (size_t d = nd; d-- > 0;)
    if (sizes[d] == 1) st[d] = d + 1 == nd ? 1 : st[d + 1] * std::max<int64_t>(sizes[d + 1], 1);
  return dnnl::memory::desc(dims, data_type(t), st);
}

Key& Key::add(const Tensor& t) {
  if (!t.defined()) return add(-1);
  add(static_cast<int64_t>(t.dtype()));
  add(t.sizes());
  return add(t.strides());
}

size_t Key::hash() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the 64-bit values
  for (int64_t v : v_) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ull;
  }
  return static_cast<size_t>(h);
}

namespace {
// Whether oneDNN implements bf16 on this CPU: the answer to creating one small bf16 matmul.
bool bf16_implemented() {
  static const bool implemented = [] {
    try {
      dnnl::memory::desc md({2, 2}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return implemented;
}
}  // namespace

bool computes_in_f32(DType t) {
  return t == DType::Float16 || (t == DType::BFloat16 && !bf16_implemented());
}

Tensor scratch_bytes(size_t nbytes) {
  return empty({static_cast<int64_t>(std::max<size_t>(nbytes, 1))}, TensorOptions(DType::UInt8));
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory>& args,
             const dnnl::memory::desc& scratch_md) {
  Tensor scratch;
  if (scratch_md.get_size() > 0) {
    scratch = scratch_bytes(scratch_md.get_size());
    args[DNNL_ARG_SCRATCHPAD] = wrap(scratch_md, scratch);
  }
  dnnl::stream& s = stream();
  prim.execute(s, args);
  s.wait();  // the CPU stream is in-order and synchronous: returns once the outputs are written
}

Reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  Reorder r;
  if (from == to) return r;
  dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, user_scratchpad_attr());
  r.needed = true;
  r.prim = dnnl::reorder(pd);
  r.from = from;
  r.to = to;
  r.scratch_md = pd.scratchpad_desc();
  return r;
}

void run_reorder(const Reorder& r, const void* src, void* dst) {
  std::unordered_map<int, dnnl::memory> args;
  args[DNNL_ARG_FROM] = wrap(r.from, const_cast<void*>(src));
  args[DNNL_ARG_TO] = wrap(r.to, dst);
  execute(r.prim, args, r.scratch_md);
}

void* reordered(const Reorder& r, const void* data, Tensor& holder) {
  if (!r.needed) return const_cast<void*>(data);
  holder = scratch_bytes(r.to.get_size());
  run_reorder(r, data, holder.data_ptr());
  return holder.data_ptr();
}

ReorderedOutput::ReorderedOutput(const Reorder& r, void* user) : reorder_(r), user_(user), data_(user) {
  if (r.needed) {
    buffer_ = scratch_bytes(r.from.get_size());
    data_ = buffer_.data_ptr();
  }
}

void ReorderedOutput::finish() const {
  if (reorder_.needed) run_reorder(reorder_, data_, user_);
}

}  // namespace loom::cpu::onednn
