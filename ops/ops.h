/*
 * The public op API of Loom, in one include. Every function validates its inputs (shapes,
 * dtypes, devices, with messages that name the op and the shapes) and dispatches on
 * (op, device) to a kernel; see op_list.def for the table.
 */
#pragma once

#include "core/parallel.h"
#include "core/random.h"
#include "core/tensor.h"
#include "ops/activation_ops.h"
#include "ops/amp_ops.h"
#include "ops/attention_ops.h"
#include "ops/conv_pool.h"
#include "ops/copy_ops.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/int8_ops.h"
#include "ops/linalg.h"
#include "ops/nn_ops.h"
#include "ops/norm_ops.h"
#include "ops/optim_ops.h"
#include "ops/reduction.h"
#include "ops/shape_ops.h"
#include "ops/sort_ops.h"
#include "ops/view_ops.h"
