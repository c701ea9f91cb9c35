/*
 * Registration of the CPU kernels, one function per op family (each defined in its
 * ops/cpu/<family>_kernels.cpp). register_cpu_kernels() calls them all.
 */
#pragma once

namespace loom::cpu {

void register_copy_kernels();
void register_elementwise_kernels();
void register_reduction_kernels();
void register_linalg_kernels();
void register_conv_kernels();
void register_pool_kernels();
void register_norm_kernels();
void register_nn_kernels();
void register_shape_kernels();
void register_amp_kernels();
void register_optim_kernels();
void register_attention_kernels();
void register_sort_kernels();
void register_int8_kernels();

inline void register_cpu_kernels() {
  register_copy_kernels();
  register_elementwise_kernels();
  register_reduction_kernels();
  register_linalg_kernels();
  register_conv_kernels();
  register_pool_kernels();
  register_norm_kernels();
  register_nn_kernels();
  register_shape_kernels();
  register_amp_kernels();
  register_optim_kernels();
  register_attention_kernels();
  register_sort_kernels();
  register_int8_kernels();
}

}  // namespace loom::cpu
