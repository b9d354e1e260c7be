#include "scheduler/accounting/usage_report.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace ipupod::accounting {
namespace {

constexpr int64_t kDayMs = 24 * 3600 * 1000;

// Where a record lies in time: a session from its grant, a job from its
// first start (or its submit, if it never started); open ones up to now.
struct Span {
  int64_t from = 0;
  int64_t to = 0;
};

Span SpanOf(const UsageRecord& r, int64_t now) {
  Span s;
  s.from = r.start_unix_ms > 0 ? r.start_unix_ms : r.submit_unix_ms;
  s.to = r.end_unix_ms > 0 ? r.end_unix_ms : std::max(now, s.from);
  return s;
}

absl::Status TooManyGroups() {
  return absl::ResourceExhaustedError(
      absl::StrCat("the report would have more than ", kMaxUsageGroups,
                   " rows; narrow the window (--since, --until) or group by something else"));
}

int64_t DayStart(int64_t unix_ms) {
  const int64_t day = unix_ms >= 0 ? unix_ms / kDayMs : (unix_ms - kDayMs + 1) / kDayMs;
  return day * kDayMs;
}

}  // namespace

absl::StatusOr<UsageGroupBy> ParseUsageGroupBy(absl::string_view text) {
  for (UsageGroupBy by :
       {UsageGroupBy::kUser, UsageGroupBy::kAccount, UsageGroupBy::kQos, UsageGroupBy::kDay}) {
    if (absl::EqualsIgnoreCase(text, UsageGroupByName(by))) return by;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot group usage by '", text.substr(0, 40),
                   "': use user, account, qos or day (e.g. --by account)"));
}

absl::string_view UsageGroupByName(UsageGroupBy by) {
  switch (by) {
    case UsageGroupBy::kUser:
      return "user";
    case UsageGroupBy::kAccount:
      return "account";
    case UsageGroupBy::kQos:
      return "qos";
    case UsageGroupBy::kDay:
      return "day";
  }
  return "user";
}

std::vector<std::string> AllStates() {
  return {std::string(kStateRunning),
          std::string(kStateReleased),
          std::string(kStateDetached),
          std::string(kStatePreempted),
          std::string(kStateShutdown),
          std::string(kStateServerRestart),
          "COMPLETED",
          "FAILED",
          "CANCELLED",
          std::string(kStateTimeout)};  // a session's end and a job's
}

absl::StatusOr<std::string> NormalizeState(absl::string_view text) {
  const std::string upper = absl::AsciiStrToUpper(text);
  for (const std::string& state : AllStates()) {
    if (upper == state) return state;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", text.substr(0, 40),
                                                 "' is not a usage record state: use one of ",
                                                 absl::StrJoin(AllStates(), ", ")));
}

std::string UtcDay(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

UsageRecord AsOf(const UsageRecord& record, int64_t now_unix_ms) {
  UsageRecord r = record;
  if (r.end_unix_ms == 0 && r.start_unix_ms > 0 && now_unix_ms > r.start_unix_ms) {
    r.ipu_seconds = r.ipus * static_cast<double>(now_unix_ms - r.start_unix_ms) / 1000;
  }
  return r;
}

UsageReport::UsageReport(UsageGroupBy by, int64_t since_unix_ms, int64_t until_unix_ms,
                         int64_t now_unix_ms)
    : by_(by), since_(since_unix_ms), until_(until_unix_ms), now_(now_unix_ms) {}

UsageRow* UsageReport::RowFor(const std::string& key) {
  auto it = rows_.find(key);
  if (it != rows_.end()) return &it->second;
  if (rows_.size() >= static_cast<size_t>(kMaxUsageGroups)) return nullptr;
  UsageRow& row = rows_[key];
  row.key = key;
  return &row;
}

double UsageReport::IpuSecondsWithin(const UsageRecord& r, int64_t from, int64_t to) const {
  if (r.kind != RecordKind::kSession) return 0;
  const Span span = SpanOf(r, now_);
  const int64_t lo = std::max(span.from, from);
  const int64_t hi = std::min(span.to, to);
  if (hi <= lo) return 0;
  if (r.end_unix_ms == 0) return r.ipus * static_cast<double>(hi - lo) / 1000;
  // A closed record at its own rate: equal to IPUs x time, as recorded.
  return r.ipu_seconds * static_cast<double>(hi - lo) / static_cast<double>(span.to - span.from);
}

absl::Status UsageReport::Add(const UsageRecord& r) {
  const Span span = SpanOf(r, now_);
  const bool overlaps = span.from < until_ && (span.to > since_ || span.from >= since_);
  if (!overlaps) return absl::OkStatus();
  if (by_ == UsageGroupBy::kDay) return AddDays(r);
  const std::string& key = by_ == UsageGroupBy::kUser      ? r.user
                           : by_ == UsageGroupBy::kAccount ? r.account
                                                           : r.qos;
  UsageRow* row = RowFor(key);
  if (row == nullptr) return TooManyGroups();
  const double used = IpuSecondsWithin(r, since_, until_);
  row->ipu_seconds += used;
  if (!r.job.empty()) row->job_ipu_seconds += used;
  if (r.kind == RecordKind::kJob) row->jobs += 1;
  if (r.kind == RecordKind::kSession && r.job.empty()) row->sessions += 1;
  return absl::OkStatus();
}

absl::Status UsageReport::AddDays(const UsageRecord& r) {
  const Span span = SpanOf(r, now_);
  const int64_t first = std::max(span.from, since_);
  UsageRow* row = RowFor(UtcDay(first));
  if (row == nullptr) return TooManyGroups();
  if (r.kind == RecordKind::kJob) row->jobs += 1;
  if (r.kind == RecordKind::kSession && r.job.empty()) row->sessions += 1;
  const int64_t last = std::min(span.to, until_);
  for (int64_t day = DayStart(first); day < last; day += kDayMs) {
    const double used = IpuSecondsWithin(r, std::max(day, since_), std::min(day + kDayMs, until_));
    if (used <= 0) continue;
    row = RowFor(UtcDay(day));
    if (row == nullptr) return TooManyGroups();
    row->ipu_seconds += used;
    if (!r.job.empty()) row->job_ipu_seconds += used;
  }
  return absl::OkStatus();
}

std::vector<UsageRow> UsageReport::Rows() const {
  std::vector<UsageRow> rows;
  for (const auto& [key, row] : rows_) rows.push_back(row);
  if (by_ != UsageGroupBy::kDay) {
    std::stable_sort(rows.begin(), rows.end(), [](const UsageRow& a, const UsageRow& b) {
      return a.ipu_seconds > b.ipu_seconds;
    });
  }
  return rows;
}

UsageRow UsageReport::Total() const {
  UsageRow total;
  total.key = "TOTAL";
  for (const auto& [key, row] : rows_) {
    total.ipu_seconds += row.ipu_seconds;
    total.job_ipu_seconds += row.job_ipu_seconds;
    total.sessions += row.sessions;
    total.jobs += row.jobs;
  }
  return total;
}

}  // namespace ipupod::accounting
