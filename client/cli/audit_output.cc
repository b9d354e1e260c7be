#include "client/cli/audit_output.h"

#include "absl/strings/str_cat.h"

namespace ipupod::cli {
namespace {

std::string Who(const v1::AuditRecord& r) {
  return r.admin() ? absl::StrCat(r.user(), " (admin)") : r.user();
}

std::string Result(const v1::AuditRecord& r) {
  return r.message().empty() ? r.code() : absl::StrCat(r.code(), ": ", r.message());
}

}  // namespace

Json AuditJson(const AuditRecords& records, const std::string& next_page_token) {
  Json list = Json::array();
  for (const v1::AuditRecord& r : records) {
    list.push_back(
        {{"seq", r.seq()},
         {"time_unix_ms", r.time_unix_ms()},
         {"time", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(r.time_unix_ms()),
                                   absl::UTCTimeZone())},
         {"user", r.user()},
         {"admin", r.admin()},
         {"peer", r.peer()},
         {"action", r.action()},
         {"target", r.target()},
         {"details", r.details()},
         {"code", r.code()},
         {"message", r.message()}});
  }
  return {{"records", std::move(list)}, {"next_page_token", next_page_token}};
}

std::string AuditText(const AuditRecords& records, const std::string& next_page_token,
                      absl::TimeZone zone) {
  if (records.empty()) return "no audit records match\n";
  Table table({{"SEQ", Table::Align::kRight},
               {"TIME"},
               {"WHO"},
               {"PEER"},
               {"ACTION"},
               {"TARGET"},
               {"DETAILS"},
               {"RESULT"}});
  for (const v1::AuditRecord& r : records) {
    table.AddRow(
        {absl::StrCat(r.seq()),
         absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::FromUnixMillis(r.time_unix_ms()), zone),
         Who(r), OrDash(r.peer()), r.action(), OrDash(r.target()), OrDash(r.details()), Result(r)});
  }
  std::string text = table.Render();
  if (!next_page_token.empty()) {
    absl::StrAppend(&text,
                    "(more records match: raise --limit, narrow --since/--until, or go on "
                    "with --page-token ",
                    next_page_token, ")\n");
  }
  return text;
}

}  // namespace ipupod::cli
