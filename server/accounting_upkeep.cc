#include "server/accounting_upkeep.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/sync.h"

namespace ipupod::server {

constexpr int AccountingUpkeep::kPurgeBatch;
constexpr int AccountingUpkeep::kPurgeBatches;

namespace {

constexpr absl::Duration kPurgeEvery = absl::Hours(24);

}  // namespace

AccountingUpkeep::AccountingUpkeep(store::SqliteStateStore* store, AccountingUpkeepOptions options)
    : store_(store), options_(std::move(options)) {}

absl::Time AccountingUpkeep::Now() const { return options_.clock ? options_.clock() : absl::Now(); }

absl::StatusOr<std::unique_ptr<AccountingUpkeep>> AccountingUpkeep::Start(
    store::SqliteStateStore* store, AccountingUpkeepOptions options) {
  if (options.heartbeat <= absl::ZeroDuration() || options.retention < absl::ZeroDuration() ||
      options.audit_retention < absl::ZeroDuration() || options.audit_max_records < 0) {
    return absl::InvalidArgumentError(
        "the ledger's heartbeat must be positive, and no retention or cap negative");
  }
  std::unique_ptr<AccountingUpkeep> upkeep(new AccountingUpkeep(store, std::move(options)));
  IPUPOD_RETURN_IF_ERROR(upkeep->EndOpenRecords());
  const absl::Time next_purge = upkeep->Purge() ? upkeep->Now() : upkeep->Now() + kPurgeEvery;
  upkeep->PurgeAudit();
  upkeep->Heartbeat();
  upkeep->thread_ = std::thread([u = upkeep.get(), next_purge] { u->Run(next_purge); });
  return upkeep;
}

AccountingUpkeep::~AccountingUpkeep() { Stop(); }

absl::Status AccountingUpkeep::EndOpenRecords() {
  absl::StatusOr<int64_t> alive = store_->LastHeartbeat();
  if (!alive.ok()) return alive.status();
  absl::StatusOr<int> closed = store_->CloseOpenRecords(*alive);
  if (!closed.ok()) {
    return absl::Status(closed.status().code(),
                        absl::StrCat("cannot end the usage records the last run left open: ",
                                     closed.status().message()));
  }
  if (*closed > 0) {
    spdlog::warn(
        "accounting: {} usage records were open when the last server stopped without shutting "
        "down; ended SERVER_RESTART at its last heartbeat ({})",
        *closed, absl::FormatTime(absl::FromUnixMillis(*alive), absl::UTCTimeZone()));
  }
  return absl::OkStatus();
}

bool AccountingUpkeep::Purge() {
  if (options_.retention == absl::ZeroDuration()) return false;
  const int64_t cut = absl::ToUnixMillis(Now() - options_.retention);
  int total = 0;
  for (int batch = 0; batch < kPurgeBatches; ++batch) {
    absl::StatusOr<int> purged = store_->PurgeUsage(cut, kPurgeBatch);
    if (!purged.ok()) {
      spdlog::error("accounting: purging usage records past retention: {}",
                    std::string(purged.status().message()));
      return true;  // try again at the next tick
    }
    total += *purged;
    if (*purged < kPurgeBatch) {
      if (total > 0) spdlog::info("accounting: {} usage records past retention purged", total);
      return false;
    }
  }
  spdlog::info("accounting: {} usage records past retention purged; more at the next pass", total);
  return true;
}

void AccountingUpkeep::PurgeAudit() {
  const int64_t cut =
      options_.audit_retention == absl::ZeroDuration()
          ? 0
          : std::max<int64_t>(1, absl::ToUnixMillis(Now() - options_.audit_retention));
  int total = 0;
  for (int batch = 0; batch < kPurgeBatches; ++batch) {
    // One transaction even when nothing is due (the write point is reached
    // at every start: tests/integration/crash_points_test.cc).
    absl::StatusOr<int> purged = store_->PurgeAudit(cut, options_.audit_max_records, kPurgeBatch);
    if (!purged.ok()) {
      spdlog::error("audit: purging records past retention or the cap: {}",
                    std::string(purged.status().message()));
      return;  // again at the next tick
    }
    total += *purged;
    if (*purged < kPurgeBatch) break;
  }
  if (total > 0) spdlog::info("audit: {} records past retention or the cap purged", total);
}

void AccountingUpkeep::Heartbeat() {
  const absl::Status written = store_->PutHeartbeat(absl::ToUnixMillis(Now()));
  if (!written.ok()) {
    spdlog::error("accounting: heartbeat not written: {}", std::string(written.message()));
  }
}

void AccountingUpkeep::Run(absl::Time next_purge) {
  while (true) {
    {
      sync::MutexLock lock(&mu_);
      if (!stop_) sync::WaitWithTimeout(&cv_, &mu_, options_.heartbeat);
      if (stop_) return;
    }
    Heartbeat();
    PurgeAudit();
    if (Now() >= next_purge) {
      next_purge = Purge() ? Now() : Now() + kPurgeEvery;
    }
  }
}

void AccountingUpkeep::Stop() {
  {
    sync::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    cv_.Signal();
  }
  if (!thread_.joinable()) return;  // Start failed: the server never ran, vouch for nothing
  thread_.join();
  Heartbeat();  // the clean stop: the server was alive until now
}

}  // namespace ipupod::server
