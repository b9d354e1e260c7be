// File: server/status_routes.h
//
// The status page on the HTTP listener: `/` serves the page
// (server/status/status_page.h) and `/status.json` the pod as server/status/status_json.h
// builds it, for the viewer who asked. PodServer::StartHttp adds Routes() to
// the listener beside /metrics and /healthz.
//
// Identity is the API's. In token mode the listener has already checked the
// token (401 without one) and the viewer is its user and role; in open mode
// (loopback only, where any local user may call itself an admin through the
// CLI) the viewer sees what an admin sees. Then the API's visibility rules
// apply: client labels only to their owner and admins, job details only to
// the job's owner and admins, everyone's usage only to admins or with
// accounting_public (otherwise the viewer's own).
//
// Cost: each request copies the scheduler's views and the job list (both
// bounded by the server's own limits) and builds a bounded document
// (status::kMaxRows rows per list). Usage per user comes from the ledger,
// read at most once per kUsageCacheTime for all viewers and at most
// kMaxUsageRecords records per read.
//
// Thread safety: Json() runs on the listener's threads, concurrently; the
// usage cache is guarded by its own mutex (a leaf: nothing else is locked
// while it is held but the ledger's own).
#ifndef IPUPOD_SERVER_STATUS_ROUTES_H_
#define IPUPOD_SERVER_STATUS_ROUTES_H_

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/accounting/ledger.h"
#include "scheduler/accounting/usage_report.h"
#include "scheduler/scheduler.h"
#include "server/batch/job_manager.h"
#include "server/http/http_listener.h"
#include "server/status/recent_events.h"
#include "server/status/status_json.h"

namespace ipupod::server {

// What the page reads. Every pointer outlives the StatusRoutes; jobs and
// ledger may be null (no jobs, no usage shown).
struct StatusSources {
  const scheduler::Scheduler* scheduler = nullptr;
  const batch::JobManager* jobs = nullptr;
  accounting::Ledger* ledger = nullptr;
  const status::RecentEvents* events = nullptr;
  status::ServerInfo info;
  bool open_mode = true;
  bool accounting_public = false;
};

class StatusRoutes {
 public:
  // The viewer's name in open mode (not a valid user name, so never a user's).
  static constexpr absl::string_view kOpenModeViewer = "anyone on this machine (open mode)";
  static constexpr absl::Duration kUsageCacheTime = absl::Seconds(10);
  static constexpr int kMaxUsageRecords = 100000;
  static constexpr double kUsageWindowHours = 24;
  static constexpr size_t kRecentJobs = 20;

  explicit StatusRoutes(StatusSources sources) : sources_(std::move(sources)) {}
  StatusRoutes(const StatusRoutes&) = delete;
  StatusRoutes& operator=(const StatusRoutes&) = delete;

  // "/" (text/html) and "/status.json" (application/json), not public.
  std::vector<http::Route> Routes();

  // The document `request`'s viewer sees now.
  http::HttpResponse Json(const http::HttpRequest& request);

 private:
  scheduler::Caller Viewer(const http::HttpRequest& request) const;
  status::StatusInputs Gather(const scheduler::Caller& viewer);
  void AddJobs(const scheduler::Caller& viewer, status::StatusInputs& in) const;
  // Usage by user over the last kUsageWindowHours: every user's when
  // `everyone`, otherwise only the viewer's.
  std::vector<accounting::UsageRow> Usage(const scheduler::Caller& viewer, bool everyone);
  void RefreshUsageLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(usage_mu_);

  const StatusSources sources_;
  absl::Mutex usage_mu_;
  absl::Time usage_read_ ABSL_GUARDED_BY(usage_mu_) = absl::InfinitePast();
  std::vector<accounting::UsageRow> usage_ ABSL_GUARDED_BY(usage_mu_);  // every user's
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_STATUS_ROUTES_H_
