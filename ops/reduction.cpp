/* reduction ops (being written). */
#include "ops/ops.h"
