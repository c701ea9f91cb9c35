/*
 * The fused attention on CUDA (ops/cuda/attention.cu) against its CPU kernel, forward (out and
 * logsumexp) and backward (dq, dk, dv through the formula), in float32, float16 and bfloat16;
 * causal and not, with a broadcast float mask, L and S that are not multiples of the tiles
 * (16 and 32) and head dims from 1 to 128. Then scaled_dot_product_attention on CUDA (fused)
 * against the written-out attention on the CPU. Shapes stay small: the emulator runs 128 OS
 * threads a block.
 */
#include <cmath>
#include <limits>

#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::pat;

LOOM_CUDA_COVERS(Op::flash_attention, Op::flash_attention_backward);

// The CPU kernel computes in float from the same rounded inputs, so the difference is the
// summation order (and the 16-bit rounding of the output, one step at most).
test::Tol attention_tol(DType dt) {
  if (dt == kFloat32) return {1e-5, 1e-5};
  if (dt == kFloat16) return {2e-3, 1e-3};
  return {1.6e-2, 1e-2};
}

struct Shape {
  int64_t n, l, s, e, ev;
};

void check_flash(const Shape& sh, DType dt, bool is_causal, bool with_mask) {
  CAPTURE(sh.n); CAPTURE(sh.l); CAPTURE(sh.s); CAPTURE(sh.e); CAPTURE(sh.ev);
  CAPTURE(dt); CAPTURE(is_causal); CAPTURE(with_mask);
  Tensor q = pat({sh.n, sh.l, sh.e}, 0.1, 1.5).to(dt), k = pat({sh.n, sh.s, sh.e}, 0.2, 1.5).to(dt),
         v = pat({sh.n, sh.s, sh.ev}, 0.3).to(dt);
  // A float mask broadcast over the batch, with -inf in places (never a whole row).
  Tensor mask;
  if (with_mask) {
    Tensor allowed = pat({sh.l, sh.s}, 0.4).gt(-0.6).logical_or(ones({sh.l, sh.s}, kBool).tril());
    mask = where(allowed, pat({sh.l, sh.s}, 0.5), -std::numeric_limits<double>::infinity()).to(dt);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(sh.e));
  test::check_cuda_matches_cpu(
      [&](const std::vector<Tensor>& in) {
        auto [out, lse] = flash_attention_forward(in[0], in[1], in[2], in[3].defined() ? in[3].detach() : Tensor(),
                                                  scale, is_causal);
        return std::vector<Tensor>{out, lse};
      },
      {q, k, v, mask}, {.tol = attention_tol(dt)});
}

TEST_CASE("attention: flash_attention forward and backward match the CPU kernel") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    check_flash({2, 17, 19, 8, 8}, dt, /*is_causal=*/false, /*with_mask=*/false);
    check_flash({2, 17, 19, 8, 8}, dt, /*is_causal=*/true, /*with_mask=*/false);
  }
  check_flash({1, 33, 35, 5, 3}, kFloat32, false, /*with_mask=*/true);
  check_flash({1, 20, 9, 4, 6}, kFloat32, /*is_causal=*/true, false);  // L > S: rows past S see every key
  check_flash({1, 9, 40, 4, 4}, kFloat32, /*is_causal=*/true, false);  // S > L: keys past L seen by none
  check_flash({1, 5, 7, 1, 1}, kBFloat16, false, true);
  check_flash({1, 18, 18, 128, 128}, kFloat16, true, false);           // the widest head
}

TEST_CASE("attention: scaled_dot_product_attention on CUDA (fused) equals the written-out attention") {
  LOOM_REQUIRE_GPU();
  for (bool is_causal : {false, true}) {
    CAPTURE(is_causal);
    Tensor q = pat({2, 2, 13, 8}, 0.6, 1.5), k = pat({2, 2, 13, 8}, 0.7, 1.5), v = pat({2, 2, 13, 8}, 0.8);
    Tensor cpu = scaled_dot_product_attention(q, k, v, {}, 0.0, is_causal);
    Tensor gpu = scaled_dot_product_attention(q.to(Device::cuda()), k.to(Device::cuda()), v.to(Device::cuda()), {},
                                              0.0, is_causal);
    test::check_same(gpu, cpu, {1e-5, 1e-5}, "sdpa float32");
    Tensor half = scaled_dot_product_attention(q.to(Device::cuda(), kBFloat16), k.to(Device::cuda(), kBFloat16),
                                               v.to(Device::cuda(), kBFloat16), {}, 0.0, is_causal);
    CHECK(half.dtype() == kBFloat16);
    test::check_same(half.to(kFloat32), cpu.to(Device::cuda()), {3e-2, 3e-2}, "sdpa bfloat16");
  }
  // A bool mask [L, S] broadcast over batch and heads.
  Tensor q = pat({1, 2, 6, 4}, 0.9), k = pat({1, 2, 7, 4}, 1.0), v = pat({1, 2, 7, 5}, 1.1);
  Tensor mask = pat({6, 7}, 1.2).gt(-0.5).logical_or(ones({6, 7}, kBool).tril());
  test::check_same(scaled_dot_product_attention(q.to(Device::cuda()), k.to(Device::cuda()), v.to(Device::cuda()),
                                                mask.to(Device::cuda())),
                   scaled_dot_product_attention(q, k, v, mask), {1e-5, 1e-5}, "sdpa bool mask");
}

}  // namespace
}  // namespace loom
