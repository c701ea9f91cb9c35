/* norm_ops ops (being written). */
#include "ops/ops.h"
