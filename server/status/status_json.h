// File: server/status/status_json.h
//
// The pod as the status page shows it: one JSON document, built from
// snapshots the server copies out (the scheduler's views, the jobs one
// viewer may see, recent faults and resets, usage by user). The page at
// `/` renders it and `/status.json` serves it as it is, for scripts, so a
// script and a person see the same thing. The document's keys are
// documented in docs/operations.md ("Status page").
//
// Bounded: lists that grow with use (the queue, sessions, jobs, usage
// rows) show at most kMaxRows entries each beside their full count, so a
// queue of ten thousand makes a page of the same size as one of two
// hundred. The IPU map always has every IPU (at most 256).
//
// Visibility is the API's (server/ applies it before calling): client
// labels only to their owner and admins, job details only to the job's
// owner and admins, everyone's usage only to admins or with
// accounting_public; this code shows what it is given.
//
// Thread safety: pure functions.
#ifndef IPUPOD_STATUS_STATUS_JSON_H_
#define IPUPOD_STATUS_STATUS_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/accounting/usage_report.h"
#include "scheduler/scheduler.h"
#include "server/batch/job_manager.h"
#include "server/status/recent_events.h"

namespace ipupod::status {

inline constexpr size_t kMaxRows = 200;

struct ServerInfo {
  std::string version;
  std::string address;  // the gRPC listener, host:port
  std::string mode;     // "open" or "token"
  bool tls = false;
  int64_t started_unix_ms = 0;
};

struct StatusInputs {
  ServerInfo server;
  scheduler::Caller viewer;
  int64_t now_unix_ms = 0;
  scheduler::PodView pod;
  std::vector<scheduler::QueueEntryView> queue;  // in walk order
  std::vector<batch::JobView> active_jobs;       // PENDING and RUNNING
  std::vector<batch::JobView> recent_jobs;       // finished, newest first
  std::vector<PodEvent> events;                  // newest first
  // Usage by user over the last usage_window_hours; every user's when
  // usage_everyone, otherwise only the viewer's own.
  std::vector<accounting::UsageRow> usage;
  double usage_window_hours = 24;
  bool usage_everyone = false;
};

nlohmann::json StatusJson(const StatusInputs& in);

}  // namespace ipupod::status

#endif  // IPUPOD_STATUS_STATUS_JSON_H_
