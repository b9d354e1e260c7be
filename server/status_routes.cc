#include "server/status_routes.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/sync.h"
#include "server/jobs/job.h"
#include "server/status/status_page.h"
#include "spdlog/spdlog.h"

namespace ipupod::server {

std::vector<http::Route> StatusRoutes::Routes() {
  std::vector<http::Route> routes;
  routes.push_back({"/", [](const http::HttpRequest&) {
                      return http::HttpResponse{200, "text/html; charset=utf-8",
                                                std::string(status::StatusPageHtml())};
                    }});
  routes.push_back(
      {"/status.json", [this](const http::HttpRequest& request) { return Json(request); }});
  return routes;
}

http::HttpResponse StatusRoutes::Json(const http::HttpRequest& request) {
  const scheduler::Caller viewer = Viewer(request);
  return http::HttpResponse{200, "application/json",
                            status::StatusJson(Gather(viewer)).dump() + "\n"};
}

scheduler::Caller StatusRoutes::Viewer(const http::HttpRequest& request) const {
  // Open mode: anyone on this machine may call themselves an admin through
  // the CLI, so the page shows them what an admin sees.
  if (sources_.open_mode) return scheduler::Caller{std::string(kOpenModeViewer), /*admin=*/true};
  return scheduler::Caller{request.user, request.admin};
}

status::StatusInputs StatusRoutes::Gather(const scheduler::Caller& viewer) {
  status::StatusInputs in;
  in.server = sources_.info;
  in.viewer = viewer;
  in.now_unix_ms = absl::ToUnixMillis(absl::Now());
  in.pod = sources_.scheduler->GetPod();
  scheduler::HideClientLabels(viewer, in.pod);
  in.queue = sources_.scheduler->ListQueue();
  scheduler::HideClientLabels(viewer, in.queue);
  AddJobs(viewer, in);
  if (sources_.events != nullptr) in.events = sources_.events->Snapshot();
  in.usage_window_hours = kUsageWindowHours;
  in.usage_everyone = viewer.admin || sources_.accounting_public;
  in.usage = Usage(viewer, in.usage_everyone);
  return in;
}

void StatusRoutes::AddJobs(const scheduler::Caller& viewer, status::StatusInputs& in) const {
  if (sources_.jobs == nullptr) return;
  batch::JobFilter every;
  every.all = true;  // finished ones too, for the most recent
  for (batch::JobView& job : sources_.jobs->List(viewer, every)) {
    if (jobs::IsFinished(job.record.state)) {
      in.recent_jobs.push_back(std::move(job));
    } else {
      in.active_jobs.push_back(std::move(job));
    }
  }
  const size_t recent = std::min(kRecentJobs, in.recent_jobs.size());
  std::partial_sort(in.recent_jobs.begin(), in.recent_jobs.begin() + recent, in.recent_jobs.end(),
                    [](const batch::JobView& a, const batch::JobView& b) {
                      return a.record.ended_unix_ms > b.record.ended_unix_ms;
                    });
  in.recent_jobs.resize(recent);
}

std::vector<accounting::UsageRow> StatusRoutes::Usage(const scheduler::Caller& viewer,
                                                      bool everyone) {
  if (sources_.ledger == nullptr) return {};
  sync::MutexLock lock(&usage_mu_);
  const absl::Time now = absl::Now();
  if (now - usage_read_ >= kUsageCacheTime) RefreshUsageLocked(now);
  if (everyone) return usage_;
  std::vector<accounting::UsageRow> own;
  for (const accounting::UsageRow& row : usage_) {
    if (row.key == viewer.user) own.push_back(row);
  }
  return own;
}

void StatusRoutes::RefreshUsageLocked(absl::Time now) {
  const int64_t now_ms = absl::ToUnixMillis(now);
  const int64_t since_ms = now_ms - static_cast<int64_t>(kUsageWindowHours * 3600 * 1000);
  accounting::LedgerQuery query;
  query.since_unix_ms = since_ms;
  query.until_unix_ms = now_ms;
  query.limit = kMaxUsageRecords;
  accounting::UsageReport report(accounting::UsageGroupBy::kUser, since_ms, now_ms, now_ms);
  absl::Status added;
  const absl::Status read = sources_.ledger->Scan(query, [&](const accounting::UsageRecord& r) {
    added = report.Add(r);
    return added.ok();
  });
  usage_read_ = now;  // a failed read is not retried before kUsageCacheTime either
  if (!read.ok() || !added.ok()) {
    spdlog::warn("status page: usage by user not shown: {}", (read.ok() ? added : read).ToString());
    usage_.clear();
    return;
  }
  usage_ = report.Rows();
}

}  // namespace ipupod::server
