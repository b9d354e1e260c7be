// File: scheduler/accounting/usage_report.h
//
// What `ipupod usage` (like Slurm's sreport) and `ipupod history` (like
// sacct) compute from ledger records, as pure functions of the records, a
// window and the time now, so they are unit-tested without a server.
//
// UsageReport sums a window [since, until) grouped by user, account, QoS
// or UTC day:
//   * IPU-seconds come from session records only (every IPU a job held was
//     held by one of its sessions, which carry the job's id, so nothing is
//     counted twice): a record overlapping the window counts the part
//     inside it, at its own rate (its IPU-seconds over its duration); an
//     open record counts its IPUs from its start up to min(until, now). By
//     day, a record's part is split at UTC midnights. job_ipu_seconds is
//     the part of it held for batch jobs.
//   * sessions counts interactive session records (no job) overlapping the
//     window, jobs the job records whose [start (or submit), end] overlaps
//     it; by day each is counted on the day it starts within the window, so
//     the rows add up to the total.
// Memory: one row per group; Add refuses a record that would make more than
// kMaxUsageGroups (RESOURCE_EXHAUSTED saying to narrow the window).
//
// Thread safety: a UsageReport is used by one thread; the rest is pure.
#ifndef IPUPOD_ACCOUNTING_USAGE_REPORT_H_
#define IPUPOD_ACCOUNTING_USAGE_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/accounting/ledger.h"

namespace ipupod::accounting {

enum class UsageGroupBy { kUser, kAccount, kQos, kDay };
// "user", "account", "qos", "day"; INVALID_ARGUMENT naming the choices.
absl::StatusOr<UsageGroupBy> ParseUsageGroupBy(absl::string_view text);
absl::string_view UsageGroupByName(UsageGroupBy by);

// Every state a record can have: RUNNING (open), the session end states
// and the job states. NormalizeState upper-cases a known one and is
// INVALID_ARGUMENT naming them otherwise.
std::vector<std::string> AllStates();
absl::StatusOr<std::string> NormalizeState(absl::string_view text);

inline constexpr int kMaxUsageGroups = 10000;

struct UsageRow {
  std::string key;  // the user, account, QoS, or the UTC day "2026-11-26"
  double ipu_seconds = 0;
  double job_ipu_seconds = 0;  // of which held by batch jobs' sessions
  int64_t sessions = 0;        // interactive sessions
  int64_t jobs = 0;
};

class UsageReport {
 public:
  // REQUIRES: since_unix_ms < until_unix_ms.
  UsageReport(UsageGroupBy by, int64_t since_unix_ms, int64_t until_unix_ms, int64_t now_unix_ms);

  // RESOURCE_EXHAUSTED when it would make more than kMaxUsageGroups rows
  // (what was added before stays).
  absl::Status Add(const UsageRecord& record);
  // By day in date order; otherwise most IPU-seconds first, then by key.
  std::vector<UsageRow> Rows() const;
  UsageRow Total() const;

 private:
  UsageRow* RowFor(const std::string& key);
  // The record's IPU-seconds within [from, to).
  double IpuSecondsWithin(const UsageRecord& r, int64_t from, int64_t to) const;
  absl::Status AddDays(const UsageRecord& r);

  const UsageGroupBy by_;
  const int64_t since_;
  const int64_t until_;
  const int64_t now_;
  std::map<std::string, UsageRow> rows_;
};

// The UTC day of a time, "2026-11-26".
std::string UtcDay(int64_t unix_ms);

// A record as `history` shows it: an open one's IPU-seconds so far, up to
// `now` (its end stays 0 and its state RUNNING).
UsageRecord AsOf(const UsageRecord& record, int64_t now_unix_ms);

}  // namespace ipupod::accounting

#endif  // IPUPOD_ACCOUNTING_USAGE_REPORT_H_
