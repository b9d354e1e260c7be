#include "device/pod_config.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "device/device_ids.h"

namespace ipupod::device {
namespace {

constexpr absl::string_view kValidPods =
    "POD4, POD16, POD64, or POD<n> with n a power of two from 1 to 256";

// "use 16 or 32" for a size between two valid ones; one bound at the edges.
std::string NearestSizes(int64_t n) {
  if (n < 1) return "use 1 or more";
  if (n > kMaxPodIpus) return absl::StrCat("use ", kMaxPodIpus, " or fewer");
  const int down = RoundDownToPowerOfTwo(static_cast<int>(n));
  return absl::StrCat("use ", down, " or ", down * 2);
}

}  // namespace

absl::StatusOr<PodConfig> PodFromSize(int64_t num_ipus) {
  if (num_ipus < 1 || num_ipus > kMaxPodIpus) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pod size %d is out of range; pods have 1 to %d IPUs (%s)", num_ipus,
                        kMaxPodIpus, NearestSizes(num_ipus)));
  }
  if (!IsPowerOfTwo(num_ipus)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pod size %d is not a power of two; %s", num_ipus, NearestSizes(num_ipus)));
  }
  PodConfig config;
  config.num_ipus = static_cast<int>(num_ipus);
  config.name = absl::StrCat("POD", num_ipus);
  config.ipu = &kGc200;
  return config;
}

absl::StatusOr<PodConfig> PodFromName(absl::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(name);
  absl::string_view digits = upper;
  int64_t n = 0;
  if (!absl::ConsumePrefix(&digits, "POD") || digits.empty() ||
      !absl::ascii_isdigit(static_cast<unsigned char>(digits[0])) ||
      !absl::SimpleAtoi(digits, &n)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown pod '%s'; use %s", name, kValidPods));
  }
  absl::StatusOr<PodConfig> config = PodFromSize(n);
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("pod '%s' is not valid: %s; use %s", name,
                                                      config.status().message(), kValidPods));
  }
  return config;
}

}  // namespace ipupod::device
