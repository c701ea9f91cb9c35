/*
 * LOOM_NCCL_CHECK(call): throws loom::Error with file:line, the call and NCCL's own error string
 * (and its last detailed message) when an NCCL call fails.
 */
#pragma once

#include <nccl.h>

#include "core/error.h"

#define LOOM_NCCL_CHECK(call)                                                                                  \
  do {                                                                                                         \
    ncclResult_t loom_nccl_status_ = (call);                                                                   \
    if (loom_nccl_status_ != ncclSuccess && loom_nccl_status_ != ncclInProgress) [[unlikely]] {               \
      LOOM_FAIL("NCCL error ", ncclGetErrorString(loom_nccl_status_), " in ", #call, " (", ncclGetLastError(nullptr), \
                ")");                                                                                          \
    }                                                                                                          \
  } while (0)
