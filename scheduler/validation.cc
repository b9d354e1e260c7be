#include "scheduler/validation.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "device/device_ids.h"

namespace ipupod::scheduler {
namespace {

bool NameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

// The two powers of two around `n`. REQUIRES: 1 < n < 2^30, n not a power of two.
std::pair<int, int> Neighbours(int64_t n) {
  const int down = device::RoundDownToPowerOfTwo(static_cast<int>(n));
  return {down, down * 2};
}

}  // namespace

absl::Status ValidateName(absl::string_view what, absl::string_view name, int max_length) {
  bool ok = !name.empty() && static_cast<int64_t>(name.size()) <= max_length &&
            absl::ascii_isalnum(static_cast<unsigned char>(name[0]));
  for (char c : name) ok = ok && NameChar(c);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s '%s' is not valid: use 1 to %d characters from A-Z a-z 0-9 . _ -, starting with a "
      "letter or digit",
      what, absl::CHexEscape(name.substr(0, 80)), max_length));
}

absl::StatusOr<int> CheckAttachSize(int64_t n, int pool_size, absl::string_view pool_name,
                                    bool auto_round) {
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("num_ipus must be at least 1 (got %d)", n));
  }
  if (n > pool_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d IPUs requested but %s has %d; ask for %d or fewer", n, pool_name,
                        pool_size, pool_size));
  }
  if (device::IsPowerOfTwo(n)) return static_cast<int>(n);
  if (auto_round) return device::RoundUpToPowerOfTwo(static_cast<int>(n));
  const auto [down, up] = Neighbours(n);
  return absl::InvalidArgumentError(absl::StrFormat(
      "%d IPUs is not a power of two; ask for %d or %d, or use --auto-round", n, down, up));
}

absl::Status CheckPartitionSize(int64_t size, int pod_size, absl::string_view pod_name) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("partition size must be at least 1 (got %d)", size));
  }
  if (size > pod_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "partition size %d is larger than the pod (%s has %d IPUs)", size, pod_name, pod_size));
  }
  if (device::IsPowerOfTwo(size)) return absl::OkStatus();
  const auto [down, up] = Neighbours(size);
  return absl::InvalidArgumentError(
      absl::StrFormat("partition size %d is not a power of two; use %d or %d", size, down, up));
}

}  // namespace ipupod::scheduler
