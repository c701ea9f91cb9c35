/*
 * Registration of the CUDA kernels (built only with the CUDA backend, real or emulated). One
 * register function per op family, each in ops/cuda/<family>_kernels.cpp, which turns tensors
 * into the plain arguments of the family's launchers (ops/cuda/<family>_launchers.h) whose
 * kernels live in ops/cuda/<family>.cu. An op without a registered kernel reports
 * "<op> has no CUDA kernel".
 */
#pragma once

namespace loom::cuda {

void register_cuda_kernels();  // all of the below

void register_copy_cuda_kernels();         // copy, fill (cuda_kernels.cpp)
void register_elementwise_cuda_kernels();  // unary, binary, where, clamp, gelu, arange, random fills
void register_reduction_cuda_kernels();    // sum, prod, amax, amin, var, max_dim, min_dim
void register_nn_cuda_kernels();           // softmax, log_softmax, nll_loss, layer_norm, batch_norm (nn.cu, norm.cu)
void register_linalg_cuda_kernels();       // matmul (cuBLAS)
void register_conv_pool_cuda_kernels();    // conv2d, pooling
void register_shape_cuda_kernels();        // cat, index_select/add, gather, scatter_add, tril/triu, flip, pad
void register_amp_cuda_kernels();          // amp_unscale_and_check_ (GradScaler)
void register_optim_cuda_kernels();        // fused_adam_, fused_sgd_, foreach_norm_reduce, foreach_mul_
void register_attention_cuda_kernels();    // flash_attention, flash_attention_backward
void register_sort_cuda_kernels();         // cumsum, sort (sort.cu)
void register_int8_cuda_kernels();         // int8_linear (cuBLASLt INT8), int8_im2col, int8_max_pool2d, (de)quantize

}  // namespace loom::cuda
