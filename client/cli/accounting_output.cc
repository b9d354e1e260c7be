#include "client/cli/accounting_output.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/utf8.h"

namespace ipupod::cli {
namespace {

std::string Hours(double ipu_seconds) { return absl::StrFormat("%.3f", ipu_seconds / 3600); }

std::string LocalTime(int64_t unix_ms, absl::TimeZone zone) {
  if (unix_ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms), zone);
}

std::string UtcTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string CsvLine(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    absl::StrAppend(&line, i == 0 ? "" : ",", CsvField(fields[i]));
  }
  return absl::StrCat(line, "\n");
}

std::string GroupHeader(absl::string_view group_by) {
  if (group_by == "qos") return "QOS";
  if (group_by.empty()) return "USER";
  return absl::AsciiStrToUpper(group_by);
}

Json GroupJson(const v1::UsageGroup& g) {
  return {{"key", g.key()},
          {"ipu_hours", g.ipu_seconds() / 3600},
          {"ipu_seconds", g.ipu_seconds()},
          {"job_ipu_seconds", g.job_ipu_seconds()},
          {"sessions", g.sessions()},
          {"jobs", g.jobs()}};
}

}  // namespace

std::string CsvField(absl::string_view raw) {
  // Control characters a user chose (a job name's escape sequence) reach a
  // terminal as text, as in every other output; line breaks stay, quoted.
  const std::string text = EscapeControls(raw, "\r\n");
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return absl::StrCat(quoted, "\"");
}

Json UsageJson(const v1::GetUsageResponse& usage) {
  Json groups = Json::array();
  for (const v1::UsageGroup& g : usage.groups()) groups.push_back(GroupJson(g));
  return {{"group_by", usage.group_by()},
          {"since_unix_ms", usage.since_unix_ms()},
          {"until_unix_ms", usage.until_unix_ms()},
          {"user", usage.user()},
          {"groups", std::move(groups)},
          {"total", GroupJson(usage.total())}};
}

std::string UsageText(const v1::GetUsageResponse& usage, absl::TimeZone zone) {
  std::string text =
      absl::StrCat("usage from ", LocalTime(usage.since_unix_ms(), zone), " to ",
                   LocalTime(usage.until_unix_ms(), zone), " by ", usage.group_by(),
                   usage.user().empty() ? "" : absl::StrCat(", of ", usage.user(), " only"),
                   usage.group_by() == "day" ? " (UTC days)" : "", "\n");
  if (usage.groups().empty()) return absl::StrCat(text, "nothing was used in that window\n");
  Table table({{GroupHeader(usage.group_by())},
               {"IPU-HOURS", Table::Align::kRight},
               {"JOB IPU-HOURS", Table::Align::kRight},
               {"SESSIONS", Table::Align::kRight},
               {"JOBS", Table::Align::kRight}});
  const auto add = [&table](const v1::UsageGroup& g) {
    table.AddRow({OrDash(g.key()), Hours(g.ipu_seconds()), Hours(g.job_ipu_seconds()),
                  absl::StrCat(g.sessions()), absl::StrCat(g.jobs())});
  };
  for (const v1::UsageGroup& g : usage.groups()) add(g);
  add(usage.total());
  return absl::StrCat(text, table.Render());
}

std::string UsageCsv(const v1::GetUsageResponse& usage) {
  std::string csv = CsvLine({usage.group_by().empty() ? "user" : usage.group_by(), "ipu_hours",
                             "ipu_seconds", "job_ipu_seconds", "sessions", "jobs"});
  for (const v1::UsageGroup& g : usage.groups()) {
    absl::StrAppend(&csv, CsvLine({g.key(), absl::StrFormat("%.6f", g.ipu_seconds() / 3600),
                                   absl::StrFormat("%.3f", g.ipu_seconds()),
                                   absl::StrFormat("%.3f", g.job_ipu_seconds()),
                                   absl::StrCat(g.sessions()), absl::StrCat(g.jobs())}));
  }
  return csv;
}

Json HistoryJson(const v1::ListHistoryResponse& history) {
  Json records = Json::array();
  for (const v1::UsageRecord& r : history.records()) {
    records.push_back({{"id", r.id()},
                       {"kind", r.kind()},
                       {"user", r.user()},
                       {"account", r.account()},
                       {"qos", r.qos()},
                       {"job", r.job()},
                       {"partition", r.partition()},
                       {"ipus", r.ipus()},
                       {"submit_unix_ms", r.submit_unix_ms()},
                       {"start_unix_ms", r.start_unix_ms()},
                       {"end_unix_ms", r.end_unix_ms()},
                       {"ipu_seconds", r.ipu_seconds()},
                       {"state", r.state()}});
  }
  return {{"records", std::move(records)}, {"truncated", history.truncated()}};
}

std::string HistoryText(const v1::ListHistoryResponse& history, absl::TimeZone zone) {
  if (history.records().empty()) return "no usage records match\n";
  Table table({{"ID"},
               {"KIND"},
               {"USER"},
               {"ACCOUNT"},
               {"QOS"},
               {"JOB"},
               {"IPUS", Table::Align::kRight},
               {"SUBMIT"},
               {"START"},
               {"END"},
               {"IPU-SECONDS", Table::Align::kRight},
               {"STATE"}});
  for (const v1::UsageRecord& r : history.records()) {
    table.AddRow({r.id(), r.kind(), OrDash(r.user()), OrDash(r.account()), OrDash(r.qos()),
                  OrDash(r.job()), absl::StrCat(r.ipus()), LocalTime(r.submit_unix_ms(), zone),
                  LocalTime(r.start_unix_ms(), zone), LocalTime(r.end_unix_ms(), zone),
                  absl::StrFormat("%.1f", r.ipu_seconds()), r.state()});
  }
  std::string text = table.Render();
  if (history.truncated()) {
    absl::StrAppend(&text, "(older records not shown: raise --limit or narrow --since)\n");
  }
  return text;
}

std::string HistoryCsv(const v1::ListHistoryResponse& history) {
  std::string csv = CsvLine({"id", "kind", "user", "account", "qos", "job", "partition", "ipus",
                             "submit", "start", "end", "ipu_seconds", "state"});
  for (const v1::UsageRecord& r : history.records()) {
    absl::StrAppend(
        &csv,
        CsvLine({r.id(), r.kind(), r.user(), r.account(), r.qos(), r.job(), r.partition(),
                 absl::StrCat(r.ipus()), UtcTime(r.submit_unix_ms()), UtcTime(r.start_unix_ms()),
                 UtcTime(r.end_unix_ms()), absl::StrFormat("%.3f", r.ipu_seconds()), r.state()}));
  }
  return csv;
}

}  // namespace ipupod::cli
