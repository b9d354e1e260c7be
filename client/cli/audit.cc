// `ipupod audit`: the server's audit log (admins only), oldest first,
// read page by page until --limit records. Bad values (a time, an empty
// window, an unknown --action, a --limit out of range) are usage errors,
// found before anything is sent; the server checks them again.
#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cli/args.h"
#include "client/cli/audit_output.h"
#include "client/cli/commands.h"
#include "common/status_macros.h"
#include "scheduler/audit/audit_log.h"

namespace ipupod::cli {
namespace {

struct AuditArgs {
  std::string since = "-7d";
  std::string until;
  std::string user;
  std::string action;
  std::string limit = "100";
  std::string page_token;
};

constexpr int64_t kAuditLimitMax = 100000;

absl::StatusOr<v1::ListAuditRequest> AuditRequest(const AuditArgs& args, int64_t* limit) {
  v1::ListAuditRequest request;
  IPUPOD_ASSIGN_OR_RETURN(const TimeWindow w, ParseTimeWindow(args.since, args.until));
  request.set_since_unix_ms(w.since_ms);
  request.set_until_unix_ms(w.until_ms);
  request.set_user(args.user);
  if (!args.action.empty()) IPUPOD_RETURN_IF_ERROR(audit::CheckAction(args.action));
  request.set_action(args.action);
  IPUPOD_ASSIGN_OR_RETURN(*limit, ParseInteger(args.limit, "--limit", 1, kAuditLimitMax));
  request.set_page_token(args.page_token);
  return request;
}

// Pages until `limit` records or the end; the token of what is left.
struct AuditRead {
  AuditRecords records;
  std::string next_page_token;
};

absl::StatusOr<AuditRead> ReadAudit(client::Client& client, v1::ListAuditRequest request,
                                    int64_t limit) {
  AuditRead read;
  while (true) {
    const int64_t left = limit - read.records.size();
    request.set_limit(static_cast<uint32_t>(std::min<int64_t>(left, audit::kMaxQueryLimit)));
    IPUPOD_ASSIGN_OR_RETURN(v1::ListAuditResponse page, client.ListAudit(request));
    for (v1::AuditRecord& r : *page.mutable_records()) *read.records.Add() = std::move(r);
    read.next_page_token = page.next_page_token();
    if (read.next_page_token.empty() || read.records.size() >= limit) return read;
    request.set_page_token(read.next_page_token);
  }
}

int RunAudit(Context& ctx, const AuditArgs& args) {
  int64_t limit = 0;
  absl::StatusOr<v1::ListAuditRequest> request = AuditRequest(args, &limit);
  if (!request.ok()) return ctx.UsageError(request.status().message());
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<AuditRead> read = ReadAudit(**client, *std::move(request), limit);
  if (!read.ok()) return ctx.Fail(read.status());
  return ctx.Print(AuditJson(read->records, read->next_page_token),
                   AuditText(read->records, read->next_page_token, absl::LocalTimeZone()));
}

std::string ActionsHelp() {
  std::string names;
  size_t line = 2;
  for (absl::string_view action : audit::Actions()) {
    if (line + action.size() + 2 > 88) {
      absl::StrAppend(&names, "\n ");
      line = 2;
    }
    absl::StrAppend(&names, " ", action);
    line += action.size() + 1;
  }
  return names;
}

constexpr char kAuditFooter[] =
    "The server's audit log, oldest first: every privileged or destructive action,\n"
    "allowed or refused, with who (user, admin or not, the peer's address), what, on\n"
    "which target, and the result (OK, or the error's code and message). Records with\n"
    "no peer are the server's own: its start and stop (user ipupodd) and reloads of\n"
    "its config (user SIGHUP). Only admins may read it (others get exit 4).\n"
    "\n"
    "The window is [--since, --until) (default: the last 7 days). At most --limit\n"
    "records (100; at most 100000) are shown; when more match, the last line (or\n"
    "next_page_token in --json) says how to go on with --page-token.\n"
    "\n"
    "Times: RFC 3339 (2026-11-26T10:00:00Z), a date (2026-11-26, midnight UTC), now, or\n"
    "a time ago: -90m, -2h, -7d, -1d12h. See docs/operations.md, \"Audit log\".\n"
    "\n"
    "Actions:";

constexpr char kAuditExamples[] =
    "\n"
    "\n"
    "Examples:\n"
    "  ipupod --user admin audit                           # the last 7 days\n"
    "  ipupod --user admin audit --since 2026-11-01 --until 2026-12-01\n"
    "  ipupod --user admin audit --action fault.inject --since -1d\n"
    "  ipupod --user admin audit --user alice --limit 1000\n"
    "  ipupod --user admin --json audit --since -30d | jq '.records[] | select(.code != \"OK\")'";

}  // namespace

void AddAuditCommand(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<AuditArgs>();
  CLI::App* audit = app.add_subcommand("audit", "The audit log of privileged actions (admins)");
  audit->add_option("--since", args->since, "Records at or after this (default -7d)")
      ->type_name("TIME");
  audit->add_option("--until", args->until, "Records before this (default: no end)")
      ->type_name("TIME");
  audit->add_option("--user", args->user, "Only what this user did")->type_name("NAME");
  audit->add_option("--action", args->action, "Only this action (the list below)")
      ->type_name("ACTION");
  audit->add_option("--limit", args->limit, "At most this many records (default 100)")
      ->type_name("N");
  audit
      ->add_option("--page-token", args->page_token,
                   "Go on after the records a previous call showed (its next_page_token)")
      ->type_name("TOKEN");
  audit->footer(absl::StrCat(kAuditFooter, ActionsHelp(), kAuditExamples));
  OnSelected(audit, selection, "audit", [args](Context& ctx) { return RunAudit(ctx, *args); });
}

}  // namespace ipupod::cli
