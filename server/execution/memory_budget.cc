#include "server/execution/memory_budget.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/format.h"
#include "common/sync.h"
#include <unistd.h>

namespace ipupod::execution {

MemoryBudget::Charge::~Charge() { budget_->Release(bytes_); }

absl::StatusOr<std::shared_ptr<const MemoryBudget::Charge>> MemoryBudget::Reserve(
    int64_t bytes, absl::string_view what) {
  sync::MutexLock lock(&mu_);
  if (bytes < 0 || bytes > max_bytes_ - used_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "loading ", what, " needs ", FormatBytesFixed(bytes),
        " of host memory, but loaded programs ", "hold ", FormatBytesFixed(used_bytes_),
        " of the server's ", FormatBytesFixed(max_bytes_),
        " for them; detach sessions that no longer need their programs, or ask the admin to "
        "raise ipupodd --load-memory-mb"));
  }
  used_bytes_ += bytes;
  return std::shared_ptr<const Charge>(new Charge(this, bytes));
}

int64_t MemoryBudget::used_bytes() const {
  sync::MutexLock lock(&mu_);
  return used_bytes_;
}

void MemoryBudget::Release(int64_t bytes) {
  sync::MutexLock lock(&mu_);
  used_bytes_ -= bytes;
}

int64_t DefaultLoadMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  const int64_t physical = pages > 0 && page_size > 0 ? int64_t{pages} * page_size : 0;
  return std::max(int64_t{1} << 30, physical / 2);
}

}  // namespace ipupod::execution
