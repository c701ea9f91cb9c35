/*
 * Shared by the formula files: the registration function of each op family (called by
 * register_formulas in formulas.cpp) and the helpers formulas are written with.
 */
#pragma once

#include "autograd/formula.h"
#include "ops/ops.h"

namespace loom::autograd {

void register_view_formulas();         // views.cpp: as_strided, view, permute, expand, slice, ...
void register_copy_formulas();         // copy.cpp: copy (to, clone, copy_), fill
void register_elementwise_formulas();  // elementwise.cpp: unary, binary, where, clamp, gelu
void register_reduction_formulas();    // reduction.cpp: sum, prod, amax/amin, var, max/min
void register_linalg_formulas();       // linalg.cpp: matmul (and linear)
void register_conv_pool_formulas();    // conv_pool.cpp: conv2d, pooling
void register_norm_formulas();         // norm.cpp: batch_norm, layer_norm
void register_nn_formulas();           // nn.cpp: softmax, log_softmax, nll_loss
void register_shape_formulas();        // shape.cpp: cat, index ops, tril/triu, flip, pad
void register_attention_formulas();    // attention.cpp: flash_attention
void register_sort_formulas();         // sort.cpp: cumsum, sort

// grad with a broadcast shape summed down to `sizes` (a no-op when the shapes agree).
Tensor sum_to(const Tensor& grad, IntArrayRef sizes);

// A reduced gradient (keepdim = false) given back its reduced dims as size 1, so that it
// broadcasts against the input: dims are sorted and normalised; empty dims = all.
Tensor unsqueeze_reduced(const Tensor& grad, IntArrayRef input_sizes, IntArrayRef dims, bool keepdim);

// Undefined stands for "no gradient": formulas return it for inputs that need none.
inline Tensor if_needed(bool needed, const auto& compute) { return needed ? Tensor(compute()) : Tensor(); }

}  // namespace loom::autograd
