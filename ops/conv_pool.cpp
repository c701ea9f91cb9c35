/* conv_pool ops (being written). */
#include "ops/ops.h"
