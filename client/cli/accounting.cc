// `ipupod usage` (like Slurm's sreport) and `ipupod history` (like sacct):
// the usage ledger, summed and listed. Bad values (a --by, a --state, a
// time, a window that ends before it starts, --json with --csv) are usage
// errors, found before anything is sent; the server checks them again.
#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cli/accounting_output.h"
#include "client/cli/args.h"
#include "client/cli/commands.h"
#include "common/status_macros.h"
#include "scheduler/accounting/usage_report.h"

namespace ipupod::cli {
namespace {

struct UsageArgs {
  std::string by = "user";
  std::string since = "-7d";
  std::string until = "now";
  std::string user;
  bool csv = false;
};

struct HistoryArgs {
  std::string user;
  std::string state;
  std::string since;
  std::string until;
  std::string limit = "100";
  bool csv = false;
};

constexpr int64_t kHistoryLimitMax = 10000;

absl::Status CheckFormat(const Context& ctx, bool csv) {
  if (ctx.json() && csv) {
    return absl::InvalidArgumentError("--json and --csv both given: choose one output format");
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::GetUsageRequest> UsageRequest(const UsageArgs& args) {
  v1::GetUsageRequest request;
  IPUPOD_ASSIGN_OR_RETURN(const accounting::UsageGroupBy by,
                          accounting::ParseUsageGroupBy(args.by));
  request.set_group_by(std::string(accounting::UsageGroupByName(by)));
  IPUPOD_ASSIGN_OR_RETURN(const TimeWindow w, ParseTimeWindow(args.since, args.until));
  request.set_since_unix_ms(w.since_ms);
  request.set_until_unix_ms(w.until_ms);
  request.set_user(args.user);
  return request;
}

absl::StatusOr<v1::ListHistoryRequest> HistoryRequest(const HistoryArgs& args) {
  v1::ListHistoryRequest request;
  request.set_user(args.user);
  if (!args.state.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(const std::string state, accounting::NormalizeState(args.state));
    request.set_state(state);
  }
  IPUPOD_ASSIGN_OR_RETURN(const TimeWindow w, ParseTimeWindow(args.since, args.until));
  request.set_since_unix_ms(w.since_ms);
  request.set_until_unix_ms(w.until_ms);
  IPUPOD_ASSIGN_OR_RETURN(const int64_t limit,
                          ParseInteger(args.limit, "--limit", 1, kHistoryLimitMax));
  request.set_limit(static_cast<uint32_t>(limit));
  return request;
}

int RunUsage(Context& ctx, const UsageArgs& args) {
  absl::StatusOr<v1::GetUsageRequest> request = UsageRequest(args);
  if (absl::Status format = CheckFormat(ctx, args.csv); !format.ok()) {
    return ctx.UsageError(format.message());
  }
  if (!request.ok()) return ctx.UsageError(request.status().message());
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<v1::GetUsageResponse> usage = (*client)->GetUsage(*request);
  if (!usage.ok()) return ctx.Fail(usage.status());
  if (args.csv) {
    ctx.out() << UsageCsv(*usage);
    return 0;
  }
  return ctx.Print(UsageJson(*usage), UsageText(*usage, absl::LocalTimeZone()));
}

int RunHistory(Context& ctx, const HistoryArgs& args) {
  absl::StatusOr<v1::ListHistoryRequest> request = HistoryRequest(args);
  if (absl::Status format = CheckFormat(ctx, args.csv); !format.ok()) {
    return ctx.UsageError(format.message());
  }
  if (!request.ok()) return ctx.UsageError(request.status().message());
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<v1::ListHistoryResponse> history = (*client)->ListHistory(*request);
  if (!history.ok()) return ctx.Fail(history.status());
  if (args.csv) {
    ctx.out() << HistoryCsv(*history);
    return 0;
  }
  return ctx.Print(HistoryJson(*history), HistoryText(*history, absl::LocalTimeZone()));
}

constexpr char kTimesHelp[] =
    "Times (--since, --until): RFC 3339 (2026-11-26T10:00:00Z, 2026-11-26T11:00:00+01:00),\n"
    "a date (2026-11-26, midnight UTC), now, or a time ago: -90m, -2h, -7d, -1d12h.\n"
    "Admins see everyone's records; others only their own, unless the server's config\n"
    "sets accounting_public (then --user names anyone). See docs/accounting.md.\n";

constexpr char kUsageFooter[] =
    "Like Slurm's sreport: the IPU-hours used in the window [--since, --until) (default:\n"
    "the last 7 days), grouped --by user (default), account, qos or day (UTC days).\n"
    "IPU-HOURS counts every session, interactive or run for a batch job, clipped to the\n"
    "window (a session still running counts up to now); JOB IPU-HOURS is the part held\n"
    "by batch jobs. SESSIONS counts interactive sessions and JOBS batch jobs that\n"
    "overlap the window (by day: on the day each starts). --csv prints one line per group\n"
    "after a header; --json one document.\n"
    "\n";

constexpr char kUsageExamples[] =
    "\n"
    "Examples:\n"
    "  ipupod usage                                  # your (or everyone's) last 7 days\n"
    "  ipupod usage --by account --since 2026-11-01 --until 2026-12-01\n"
    "  ipupod usage --by day --since -30d --csv > usage.csv\n"
    "  ipupod --user admin usage --by qos --user alice\n"
    "  ipupod --json usage --by account | jq '.groups[] | {key, ipu_hours}'";

constexpr char kHistoryFooter[] =
    "Like Slurm's sacct: one line per usage record, newest first, at most --limit (100;\n"
    "at most 10000). A record is a session (id s<boot>-<n>; JOB names the batch job it\n"
    "ran) or a batch job (its id). STATE: RUNNING (still open: IPU-SECONDS so far),\n"
    "RELEASED, DETACHED, PREEMPTED, TIMEOUT, SHUTDOWN (the server stopped in order),\n"
    "SERVER_RESTART (the server died; the session ends at its last heartbeat), or a job's\n"
    "COMPLETED, FAILED, CANCELLED, TIMEOUT. --since keeps records that ended at or after\n"
    "it (and open ones), --until those that started before it.\n"
    "\n";

constexpr char kHistoryExamples[] =
    "\n"
    "Examples:\n"
    "  ipupod history\n"
    "  ipupod history --since -1d --state server_restart\n"
    "  ipupod --user admin history --user alice --limit 1000 --csv > alice.csv\n"
    "  ipupod --json history --state running | jq '.records[].id'";

void AddUsageCommand(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<UsageArgs>();
  CLI::App* usage = app.add_subcommand("usage", "IPU-hours used per user, account, QoS or day");
  usage->add_option("--by", args->by, "Group by user (default), account, qos or day")
      ->type_name("user|account|qos|day");
  usage->add_option("--since", args->since, "Start of the window (default -7d)")->type_name("TIME");
  usage->add_option("--until", args->until, "End of the window (default now)")->type_name("TIME");
  usage->add_option("--user", args->user, "Only this user's usage")->type_name("NAME");
  usage->add_flag("--csv", args->csv, "Print CSV: a header, then one line per group");
  usage->footer(absl::StrCat(kUsageFooter, kTimesHelp, kUsageExamples));
  OnSelected(usage, selection, "usage", [args](Context& ctx) { return RunUsage(ctx, *args); });
}

void AddHistoryCommand(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<HistoryArgs>();
  CLI::App* history = app.add_subcommand("history", "Usage records of sessions and batch jobs");
  history->add_option("--user", args->user, "Only this user's records")->type_name("NAME");
  history->add_option("--state", args->state, "Only records in this state (e.g. completed)")
      ->type_name("STATE");
  history->add_option("--since", args->since, "Records that ended at or after this")
      ->type_name("TIME");
  history->add_option("--until", args->until, "Records that started before this")
      ->type_name("TIME");
  history->add_option("--limit", args->limit, "At most this many records (default 100)")
      ->type_name("N");
  history->add_flag("--csv", args->csv, "Print CSV: a header, then one line per record");
  history->footer(absl::StrCat(kHistoryFooter, kTimesHelp, kHistoryExamples));
  OnSelected(history, selection, "history",
             [args](Context& ctx) { return RunHistory(ctx, *args); });
}

}  // namespace

void AddAccountingCommands(CLI::App& app, Selection& selection) {
  AddUsageCommand(app, selection);
  AddHistoryCommand(app, selection);
}

}  // namespace ipupod::cli
