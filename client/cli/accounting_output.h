// File: client/cli/accounting_output.h
//
// What `ipupod usage` (like sreport) and `ipupod history` (like sacct)
// print: a table, one JSON document (--json), or CSV (--csv: a header
// line, then one line per group or record, RFC 4180 quoting, times as RFC
// 3339 UTC, "" for none). Pure functions of the server's answer (and a time
// zone for the table's times), unit-tested.
//
// JSON: usage is {"group_by", "since_unix_ms", "until_unix_ms", "user",
// "groups": [{"key", "ipu_hours", "ipu_seconds", "job_ipu_seconds",
// "sessions", "jobs"}], "total": {...}}; history is {"records": [{"id",
// "kind", "user", "account", "qos", "job", "partition", "ipus",
// "submit_unix_ms", "start_unix_ms", "end_unix_ms", "ipu_seconds",
// "state"}], "truncated"}.
//
// Thread safety: pure functions.
#ifndef IPUPOD_CLIENT_CLI_ACCOUNTING_OUTPUT_H_
#define IPUPOD_CLIENT_CLI_ACCOUNTING_OUTPUT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/output.h"
#include "ipupod/v1/accounting.pb.h"

namespace ipupod::cli {

Json UsageJson(const v1::GetUsageResponse& usage);
std::string UsageText(const v1::GetUsageResponse& usage, absl::TimeZone zone);
std::string UsageCsv(const v1::GetUsageResponse& usage);

Json HistoryJson(const v1::ListHistoryResponse& history);
std::string HistoryText(const v1::ListHistoryResponse& history, absl::TimeZone zone);
std::string HistoryCsv(const v1::ListHistoryResponse& history);

// One CSV field: quoted when it holds a comma, a quote or a line break
// (quotes doubled).
std::string CsvField(absl::string_view text);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_ACCOUNTING_OUTPUT_H_
