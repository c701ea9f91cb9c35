/* elementwise ops (being written). */
#include "ops/ops.h"
