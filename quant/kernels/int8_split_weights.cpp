/* Exact int8 products on CPUs without VNNI (int8_split_weights.h). */
#include "quant/kernels/int8_split_weights.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "ops/cpu/onednn_utils.h"
#include "ops/ops.h"

namespace loom::quant {

bool int8_products_saturate() {
  static const bool saturates = [] {
    namespace dn = cpu::onednn;
    using dnnl::memory;
    // 255 * 127 + 255 * 127 = 64770 needs more than int16.
    uint8_t a[2] = {255, 255};
    int8_t b[2] = {127, 127};
    int32_t c[1] = {0};
    memory::desc a_md({1, 2}, memory::data_type::u8, memory::format_tag::ab);
    memory::desc b_md({2, 1}, memory::data_type::s8, memory::format_tag::ab);
    memory::desc c_md({1, 1}, memory::data_type::s32, memory::format_tag::ab);
    return dn::guarded("int8_products_saturate", [&] {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), dn::engine());
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, dn::wrap(a_md, a)},
                                           {DNNL_ARG_WEIGHTS, dn::wrap(b_md, b)},
                                           {DNNL_ARG_DST, dn::wrap(c_md, c)}};
      dn::execute(dnnl::matmul(pd), args, pd.scratchpad_desc());
      return c[0] != 64770;
    });
  }();
  return saturates;
}

Tensor split_weight_halves(const Tensor& weight) {
  LOOM_CHECK(weight.dtype() == kInt8 && weight.dim() >= 2, "split_weight_halves: expected an int8 weight [out, in, ...], got ",
             weight.dtype(), " ", weight.sizes());
  Tensor w = weight.contiguous();
  Tensor ceil_half = empty(w.sizes(), w.options()), floor_half = empty(w.sizes(), w.options());
  const int8_t* src = w.data_ptr<int8_t>();
  int8_t* c = ceil_half.data_ptr<int8_t>();
  int8_t* f = floor_half.data_ptr<int8_t>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    f[i] = static_cast<int8_t>(src[i] >> 1);            // floor(w / 2): [-64, 63]
    c[i] = static_cast<int8_t>(src[i] - (src[i] >> 1));  // ceil(w / 2): [-64, 64]
  }
  return cat({ceil_half, floor_half}, 1);
}

Tensor repeat_input_channels(const Tensor& x, int64_t groups) {
  LOOM_CHECK(x.dim() >= 2 && groups >= 1 && x.size(1) % groups == 0, "repeat_input_channels: expected [N, C, ...] with C divisible by ",
             groups, ", got ", x.sizes());
  if (groups == 1) return cat({x, x}, 1);
  std::vector<int64_t> grouped{x.size(0), groups, x.size(1) / groups};
  for (int64_t d = 2; d < x.dim(); ++d) grouped.push_back(x.size(d));
  Tensor g = x.contiguous().view(grouped);
  std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().end());
  out_sizes[1] *= 2;
  return cat({g, g}, 2).view(out_sizes);
}

}  // namespace loom::quant
