/* QConfig (see qconfig.h). */
#include "quant/qconfig.h"

#include <sstream>

#include "core/error.h"

namespace loom::quant {

void QConfig::validate() const {
  static const char* const kMethods[] = {"minmax", "moving_average", "percentile", "entropy"};
  LOOM_CHECK(std::find(std::begin(kMethods), std::end(kMethods), activation_method) != std::end(kMethods),
             "QConfig: unknown activation method '", activation_method,
             "' (expected minmax, moving_average, percentile or entropy)");
  LOOM_CHECK(bits >= 2 && bits <= 8, "QConfig: bits must be in [2, 8], got ", bits);
  LOOM_CHECK(percentile > 50 && percentile <= 100, "QConfig: percentile must be in (50, 100], got ", percentile);
}

std::unique_ptr<Observer> QConfig::activation_observer() const {
  validate();
  ObserverOptions options{.dtype = DType::UInt8, .symmetric = false, .bits = bits};
  if (activation_method == "percentile") return std::make_unique<PercentileObserver>(options, percentile);
  return make_observer(activation_method, options);
}

std::unique_ptr<Observer> QConfig::weight_observer() const {
  validate();
  return make_observer("minmax", ObserverOptions{.dtype = DType::Int8,
                                                 .symmetric = true,
                                                 .axis = per_channel ? 0 : -1,
                                                 .bits = bits});
}

std::string QConfig::to_string() const {
  std::ostringstream os;
  os << activation_method;
  if (activation_method == "percentile") os << " " << percentile;
  os << (learnable_ranges ? " (learnable)" : "") << ", " << (per_channel ? "per-channel" : "per-tensor")
     << " weights, " << bits << " bits";
  return os.str();
}

}  // namespace loom::quant
