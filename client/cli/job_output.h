// File: client/cli/job_output.h
//
// What the batch-job commands print (submit, jobs, job ...): the job table,
// one job's record, its events, and their JSON documents. Pure functions of
// protos, a clock value (elapsed times) and a time zone (dates; the CLI
// passes the local one, tests UTC), so the output is deterministic and
// unit-tested. The conventions of client/cli/output.h hold: "-" marks an
// empty cell, JSON keys are the proto field names and states their wire
// names ("PENDING", ...).
//
// Thread safety: pure functions.
#ifndef IPUPOD_CLIENT_CLI_JOB_OUTPUT_H_
#define IPUPOD_CLIENT_CLI_JOB_OUTPUT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/output.h"
#include "ipupod/v1/jobs.pb.h"

namespace ipupod::cli {

// "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT";
// "UNKNOWN" for anything else.
absl::string_view JobStateText(v1::JobState state);
// COMPLETED, FAILED, CANCELLED or TIMEOUT.
bool JobFinished(v1::JobState state);

// What `--help` says about states and reasons (shared by the commands).
extern const char kJobStatesHelp[];

// ---------------------------------------------------------------- JSON

// Every field of the record; "spec" is null when the server left it out
// (another user's job: only its queue line is visible).
Json JobJson(const v1::Job& job);
Json JobsJson(const std::vector<v1::Job>& jobs);  // {"jobs": [...]}
Json JobEventJson(const v1::JobEvent& event);     // {"seq", "unix_ms", "kind", "text", ...}

// ---------------------------------------------------------------- text

// The `ipupod jobs` table (like squeue): ID, NAME, USER, STATE, REASON,
// IPUS, SUBMITTED, STARTED, ELAPSED, PROGRESS (runs_done/runs_total).
// Long names and reasons are shortened ("..."); `job show` has them whole.
// `empty_text` is printed instead of an empty table.
std::string JobsTable(const std::vector<v1::Job>& jobs, absl::Time now, absl::TimeZone zone,
                      absl::string_view empty_text);
// Everything in the record as "key: value" lines (`job show`).
std::string JobText(const v1::Job& job, absl::Time now, absl::TimeZone zone);
// One event: "2026-11-26 07:18:16  run         run 3 of 10; losses 0.693 0.651".
std::string JobEventText(const v1::JobEvent& event, absl::TimeZone zone);
// "submitted job 17\n", one line per job.
std::string SubmittedText(const std::vector<v1::Job>& jobs);
// How a job ended, for `job wait`: "job 17 COMPLETED after 2m05s\n"; a
// FAILED job adds its reason and error kind.
std::string JobEndText(const v1::Job& job);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_JOB_OUTPUT_H_
