/*
 * LOOM_MPI_CHECK(call): every MPI call of the MPI backend goes through it. MPI's default error
 * handler aborts the whole job on any error; the backend installs MPI_ERRORS_RETURN on its
 * communicators instead, so that an error comes back as a code, and this macro turns the code
 * into a loom::Error carrying file:line, the call and MPI's own error string.
 */
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.h"

namespace loom::distributed::detail {

// MPI's text for an error code: "MPI_ERR_TRUNCATE: message truncated".
inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

}  // namespace loom::distributed::detail

#define LOOM_MPI_CHECK(call)                                                                          \
  do {                                                                                                \
    const int loom_mpi_status_ = (call);                                                              \
    if (loom_mpi_status_ != MPI_SUCCESS) [[unlikely]]                                                 \
      LOOM_FAIL(#call, " failed: ", ::loom::distributed::detail::mpi_error_string(loom_mpi_status_)); \
  } while (0)
