/* The HDF5 lock and the error-stack formatting behind LOOM_HDF5_CHECK (see hdf5_check.h). */
#include "data/hdf5_check.h"

#include <vector>

namespace loom::data {

namespace {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

// One frame of HDF5's error stack: "H5Dopen2(): unable to open dataset (object not found)".
herr_t collect_frame(unsigned /*n*/, const H5E_error2_t* err, void* out) {
  auto* frames = static_cast<std::vector<std::string>*>(out);
  std::string frame =
      std::string(err->func_name ? err->func_name : "?") + "(): " + (err->desc ? err->desc : "");
  char minor[128] = {0};
  if (H5Eget_msg(err->min_num, nullptr, minor, sizeof(minor)) > 0 && minor[0] != '\0') {
    frame += " (";
    frame += minor;
    frame += ")";
  }
  frames->push_back(std::move(frame));
  return 0;
}

}  // namespace

Hdf5Lock::Hdf5Lock() : lock_(hdf5_mutex()) {
  // HDF5 prints its error stack to stderr by default; Loom puts it in the loom::Error instead.
  // With the thread-safe library this setting is per thread, hence once per thread.
  thread_local const bool quiet = H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  (void)quiet;
}

namespace detail {

std::string hdf5_error_stack() {
  Hdf5Lock lock;
  std::vector<std::string> frames;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_frame, &frames);
  H5Eclear2(H5E_DEFAULT);
  if (frames.empty()) return "no HDF5 error stack";
  // The outermost frame says what failed, the innermost ones say why; the middle is plumbing.
  std::string out;
  const size_t keep_inner = 3;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i != 0 && i + keep_inner < frames.size()) continue;
    if (!out.empty()) out += "; ";
    out += frames[i];
  }
  return out;
}

void hdf5_fail(const char* file, int line, const char* call, const std::string& context) {
  std::string stack = hdf5_error_stack();
  ::loom::detail::throw_error(file, line, ::loom::detail::concat(context, ": ", call, " failed: ", stack));
}

}  // namespace detail
}  // namespace loom::data
