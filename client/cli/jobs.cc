// `ipupod jobs` and `ipupod job show|logs|cancel|hold|release|delete|wait|
// fetch` (JobService). `ipupod submit` lives in submit.cc.
//
// Following a job (`job logs --follow`, `job wait`) outlives a server
// restart: the server keeps jobs across it, so an UNAVAILABLE stream is
// opened again from the next event (from_event) for up to
// kReconnectWindow before the command gives up. Ctrl-C ends them with the
// default disposition (the shell reports 130); nothing is left to clean up.
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cli/args.h"
#include "client/cli/commands.h"
#include "client/cli/exit_codes.h"
#include "client/cli/job_output.h"
#include "client/files.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include <unistd.h>

namespace ipupod::cli {
namespace {

// How long a follower keeps reconnecting to a server that went away (a
// restart takes seconds), and the pause between attempts.
constexpr absl::Duration kReconnectWindow = absl::Minutes(2);
constexpr absl::Duration kReconnectPause = absl::Seconds(1);
// A follow stream the server ended while the job was not finished (it was
// shutting down, or the watch reached the server's jobs_watch_max_seconds)
// is opened again after this pause.
constexpr absl::Duration kRewatchPause = absl::Seconds(1);
// Result names are file names; longer ones are refused with the rest.
constexpr size_t kFileNameBytesMax = 255;

struct JobArgs {
  std::string id;
  bool all = false;       // jobs --all
  std::string user;       // jobs --user
  std::string states;     // jobs --state
  uint32_t limit = 0;     // jobs --limit (0: kJobRowsShown for text, every one for --json)
  bool follow = false;    // job logs --follow
  std::string timeout;    // job wait --timeout
  std::string directory;  // job fetch -o
};

absl::Time Deadline(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
}

// WatchJob from `next_seq`, again after a lost connection (see the file
// comment); `next_seq` moves past every event seen. OK when the server
// ended the stream; DEADLINE_EXCEEDED once `deadline` passed.
absl::Status FollowEvents(client::Client& client, const std::string& id, bool follow,
                          absl::Time deadline, uint64_t& next_seq,
                          const std::function<void(const v1::JobEvent&)>& on_event) {
  absl::Time failing_since = absl::InfiniteFuture();
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("the wait ran out");
    absl::Status watched = client.WatchJob(
        id, next_seq, follow,
        [&](const v1::JobEvent& event) {
          failing_since = absl::InfiniteFuture();
          if (event.seq() < next_seq) return;  // sent again after a reconnect
          next_seq = event.seq() + 1;
          on_event(event);
        },
        deadline == absl::InfiniteFuture() ? absl::InfiniteDuration() : left);
    if (!follow || !absl::IsUnavailable(watched)) return watched;
    const absl::Time now = absl::Now();
    if (failing_since == absl::InfiniteFuture()) failing_since = now;
    if (now - failing_since > kReconnectWindow) return watched;
    absl::SleepFor(std::min(kReconnectPause, deadline - now));
  }
}

// ---------------------------------------------------------------- jobs

// `ipupod jobs` in text shows the first this many (a long listing says how
// many more match); --json has every one unless --limit is given.
inline constexpr uint32_t kJobRowsShown = 100;

// The table, and when it holds only the first of the matching jobs, how many more match.
std::string JobsText(const v1::ListJobsResponse& list, const std::vector<v1::Job>& jobs, bool all) {
  std::string text =
      JobsTable(jobs, absl::Now(), absl::LocalTimeZone(),
                all ? "no jobs\n" : "no pending or running jobs (--all shows finished ones too)\n");
  const int64_t more = int64_t{list.total()} - list.jobs_size();
  if (more > 0) {
    absl::StrAppend(&text, "... and ", more, " more (", list.total(),
                    " in all); --limit N shows more, --json every one\n");
  }
  return text;
}

int RunList(Context& ctx, const JobArgs& args) {
  v1::ListJobsRequest request;
  request.set_all(args.all);
  request.set_user(args.user);
  request.set_limit(args.limit > 0 ? args.limit : ctx.json() ? 0 : kJobRowsShown);
  if (!args.states.empty()) {
    absl::StatusOr<std::vector<v1::JobState>> states = ParseJobStates(args.states);
    if (!states.ok()) return ctx.UsageError(states.status().message());
    for (v1::JobState state : *states) {
      request.add_states(state);
      if (JobFinished(state)) request.set_all(true);  // asked for by name
    }
  }
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<v1::ListJobsResponse> list = (*client)->ListJobs(request);
  if (!list.ok()) return ctx.Fail(list.status());
  const std::vector<v1::Job> jobs(list->jobs().begin(), list->jobs().end());
  return ctx.Print(
      [&] {
        Json doc = JobsJson(jobs);
        doc["total"] = list->total();
        return doc;
      },
      [&] { return JobsText(*list, jobs, request.all()); });
}

// ---------------------------------------------------------------- job ...

int RunJobShow(Context& ctx, const JobArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<v1::Job> job = (*client)->GetJob(args.id);
  if (!job.ok()) return ctx.Fail(job.status());
  return ctx.Print(JobJson(*job), JobText(*job, absl::Now(), absl::LocalTimeZone()));
}

// `job logs --follow`: the server ends a watch after jobs_watch_max_seconds
// (and when shutting down); while the job has not finished it is watched
// again from the next event, so nothing is printed twice or lost.
absl::Status FollowLog(client::Client& client, const std::string& id, bool follow,
                       const std::function<void(const v1::JobEvent&)>& on_event) {
  uint64_t next_seq = 0;
  while (true) {
    IPUPOD_RETURN_IF_ERROR(
        FollowEvents(client, id, follow, absl::InfiniteFuture(), next_seq, on_event));
    if (!follow) return absl::OkStatus();
    IPUPOD_ASSIGN_OR_RETURN(const v1::Job job, client.GetJob(id));
    if (JobFinished(job.state())) {  // the events of its end, if this watch missed them
      return FollowEvents(client, id, /*follow=*/false, absl::InfiniteFuture(), next_seq, on_event);
    }
    absl::SleepFor(kRewatchPause);
  }
}

int RunLogs(Context& ctx, const JobArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  const absl::TimeZone zone = absl::LocalTimeZone();
  absl::Status followed =
      FollowLog(**client, args.id, args.follow, [&ctx, zone](const v1::JobEvent& event) {
        ctx.out() << (ctx.json() ? JsonLine(JobEventJson(event)) : JobEventText(event, zone));
        ctx.out().flush();
      });
  if (!followed.ok()) return ctx.Fail(followed);
  return kExitOk;
}

// cancel, hold, release: the call, then the job as it is now.
using JobCall = absl::StatusOr<v1::Job> (client::Client::*)(absl::string_view);

int RunChange(Context& ctx, const JobArgs& args, JobCall call, absl::string_view done) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<v1::Job> job = ((**client).*call)(args.id);
  if (!job.ok()) return ctx.Fail(job.status());
  std::string text = absl::StrCat(done, " job ", job->id(), "; it is ", JobStateText(job->state()));
  if (!job->reason().empty()) absl::StrAppend(&text, " (", job->reason(), ")");
  if (job->state() == v1::RUNNING) absl::StrAppend(&text, " until its current step ends");
  return ctx.Print(JobJson(*job), text + "\n");
}

int RunDelete(Context& ctx, const JobArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<v1::DeleteJobResponse> deleted = (*client)->DeleteJob(args.id);
  if (!deleted.ok()) return ctx.Fail(deleted.status());
  return ctx.Print({{"id", args.id}, {"deleted", true}, {"freed_bytes", deleted->freed_bytes()}},
                   absl::StrCat("deleted job ", args.id, "; freed ",
                                FormatBytesTrimmed(deleted->freed_bytes()), "\n"));
}

// ---------------------------------------------------------------- job wait

// Follows the job quietly until it has finished or `deadline`; returns its
// record as it is then.
absl::StatusOr<v1::Job> AwaitJob(client::Client& client, const std::string& id,
                                 absl::Time deadline) {
  uint64_t next_seq = 0;
  while (true) {
    IPUPOD_ASSIGN_OR_RETURN(v1::Job job, client.GetJob(id));
    if (JobFinished(job.state()) || absl::Now() >= deadline) return job;
    absl::Status followed =
        FollowEvents(client, id, /*follow=*/true, deadline, next_seq, [](const v1::JobEvent&) {});
    const bool ran_out = absl::IsDeadlineExceeded(followed) && deadline != absl::InfiniteFuture();
    if (!followed.ok() && !ran_out) return followed;
    // The stream ended: the job finished, the wait ran out, or the server is
    // going away. GetJob tells; the pause keeps a server that ends streams
    // early from making this a hot loop.
    IPUPOD_ASSIGN_OR_RETURN(job, client.GetJob(id));
    if (JobFinished(job.state()) || absl::Now() >= deadline) return job;
    absl::SleepFor(std::min(kRewatchPause, deadline - absl::Now()));
  }
}

int RunWait(Context& ctx, const JobArgs& args) {
  absl::Duration timeout = absl::InfiniteDuration();
  if (!args.timeout.empty()) {
    absl::StatusOr<absl::Duration> parsed = ParseDuration(args.timeout, "--timeout", kJobWaitMax);
    if (!parsed.ok()) return ctx.UsageError(parsed.status().message());
    timeout = *parsed;
  }
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<v1::Job> job = AwaitJob(**client, args.id, Deadline(timeout));
  if (!job.ok()) return ctx.Fail(job.status());
  if (!JobFinished(job->state())) {
    ctx.Note(nullptr, absl::StrCat("gave up waiting after ", args.timeout, " (--timeout)\n"));
  }
  ctx.Print(JobJson(*job), JobEndText(*job));
  return ExitCodeForJobState(job->state());
}

// ---------------------------------------------------------------- job fetch

// A result name the server sent becomes a path under -o DIR: only a plain
// file name may (never "../x" or "/etc/x").
absl::Status CheckResultName(absl::string_view name, absl::string_view id) {
  if (name.empty() || name == "." || name == ".." || name.size() > kFileNameBytesMax ||
      name.find('/') != absl::string_view::npos || name.find('\0') != absl::string_view::npos) {
    return absl::InternalError(absl::StrCat("ipupodd named a result of job ", id, " '",
                                            EchoName(name),
                                            "', which is not a plain file name; nothing was "
                                            "written for it (please report this as a bug)"));
  }
  return absl::OkStatus();
}

absl::Status JobHasResults(const v1::Job& job) {
  if (job.details_hidden()) {  // the server's own answer to another user's fetch
    return absl::PermissionDeniedError(
        absl::StrCat("job ", job.id(), " belongs to ", job.user(),
                     ": only its owner or an admin may see its details or change it"));
  }
  if (job.results_purged()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the results of job ", job.id(), " were removed by the server's retention period"));
  }
  if (!job.results().empty()) return absl::OkStatus();
  if (!JobFinished(job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), " is ", JobStateText(job.state()),
        " and has no results yet; wait for it with `ipupod job wait ", job.id(), "`, then fetch"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("job ", job.id(), " ended ", JobStateText(job.state()),
                   " without results; `ipupod job show ", job.id(), "` says why"));
}

// On a terminal: one status line on stderr, rewritten as bytes arrive.
client::FetchProgress ProgressLine(Context& ctx, const std::string& name) {
  if (ctx.json() || isatty(STDERR_FILENO) != 1) return {};
  auto last_percent = std::make_shared<int>(-1);
  return [&ctx, name = EscapeControls(name), last_percent](uint64_t done, uint64_t total) {
    const int percent = total == 0 ? 100 : static_cast<int>(done * 100 / total);
    if (percent == *last_percent) return;
    *last_percent = percent;
    ctx.err() << "\rfetching " << name << " " << percent << "% (" << FormatBytesTrimmed(done)
              << " of " << FormatBytesTrimmed(total) << ")" << (done == total ? "\n" : "")
              << std::flush;
  };
}

// One result into DIR; a file already there with the right hash is kept.
absl::StatusOr<Json> FetchOne(Context& ctx, client::Client& client, const v1::Job& job,
                              const v1::ResultFile& file, const std::string& directory) {
  IPUPOD_RETURN_IF_ERROR(CheckResultName(file.name(), job.id()));
  const std::string path = (std::filesystem::path(directory) / file.name()).string();
  Json doc = {{"name", file.name()},
              {"path", path},
              {"size_bytes", file.size_bytes()},
              {"sha256", file.sha256()}};
  absl::StatusOr<client::FileDigest> existing = client::Sha256OfFile(path, "result");
  if (existing.ok() && existing->sha256 == file.sha256()) {
    doc["already_there"] = true;
    if (!ctx.json()) ctx.out() << "up to date: " << EscapeControls(path) << "\n" << std::flush;
    return doc;
  }
  IPUPOD_ASSIGN_OR_RETURN(client::FetchedResult fetched,
                          client.FetchResult(job.id(), file, path, ProgressLine(ctx, file.name())));
  doc["already_there"] = false;
  doc["resumed_from"] = fetched.resumed_from;
  if (!ctx.json()) {
    ctx.out() << "wrote " << EscapeControls(path) << " (" << FormatBytesTrimmed(file.size_bytes())
              << (fetched.resumed_from > 0
                      ? absl::StrCat(", resumed at ", FormatBytesTrimmed(fetched.resumed_from))
                      : "")
              << ")\n"
              << std::flush;
  }
  return doc;
}

int RunFetch(Context& ctx, const JobArgs& args) {
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<v1::Job> job = (*client)->GetJob(args.id);
  if (!job.ok()) return ctx.Fail(job.status());
  if (absl::Status has = JobHasResults(*job); !has.ok()) return ctx.Fail(has);
  std::error_code error;
  std::filesystem::create_directories(args.directory, error);
  if (error) {
    return ctx.Fail(absl::FailedPreconditionError(
        absl::StrCat("cannot create directory '", args.directory, "': ", error.message(),
                     "; choose another -o DIR")));
  }
  Json files = Json::array();
  for (const v1::ResultFile& file : job->results()) {
    absl::StatusOr<Json> fetched = FetchOne(ctx, **client, *job, file, args.directory);
    if (!fetched.ok()) return ctx.Fail(fetched.status());
    files.push_back(*std::move(fetched));
  }
  if (!ctx.json()) return kExitOk;  // the files were listed as they came
  return ctx.Print({{"id", job->id()}, {"directory", args.directory}, {"files", files}}, "");
}

// ---------------------------------------------------------------- help

constexpr char kJobsFooter[] =
    "One row per job: ID (J, or J.N in a sweep), NAME, USER, ACCOUNT and QOS (what it is\n"
    "charged to and ordered by), STATE, REASON (why it waits: a limit such as\n"
    "UserMaxJobsRunning when one holds it; or what ended it; #N is its place in the pod's\n"
    "queue), IPUS, SUBMITTED, STARTED,\n"
    "ELAPSED and PROGRESS (runs done of the runs it makes). Without --all only PENDING and\n"
    "RUNNING jobs are listed; naming a finished state in --state lists those too. Other\n"
    "users' jobs show only their queue line. (--user here filters; given before the\n"
    "command, --user is still your identity in open mode.) A long listing shows its first\n"
    "100 and how many more match (--limit N for more); --json has every job unless --limit\n"
    "is given.\n"
    "\n";

constexpr char kJobFooter[] =
    "A batch job's life after `ipupod submit`: show its record, follow its events, cancel,\n"
    "hold or release it, wait for it, fetch its results, delete it. Only its owner and admins\n"
    "see its details, events and results.\n"
    "\n";

constexpr char kWaitFooter[] =
    "Follows the job quietly until it has finished, then prints how it ended (--json: its\n"
    "record) and exits with a code that says so: 0 COMPLETED, 30 FAILED, 31 CANCELLED,\n"
    "32 TIMEOUT (its --time-limit), 33 when --timeout DURATION (90s, 30m, 2h, 1d, 1h30m)\n"
    "ran out first (the job goes on). A server restart while waiting is ridden out. Here\n"
    "--timeout is how long to wait; the per-call deadline is the global --timeout given\n"
    "before the command.\n"
    "\n"
    "Examples:\n"
    "  ipupod job wait 17 && ipupod job fetch 17 -o results/\n"
    "  ipupod job wait 17.2 --timeout 2h; echo \"exit $?\"";

void AddList(CLI::App& app, Selection& selection, const std::shared_ptr<JobArgs>& args) {
  CLI::App* jobs = app.add_subcommand("jobs", "List batch jobs, like squeue");
  jobs->add_flag("--all", args->all, "Finished jobs too");
  jobs->add_option("--user", args->user, "Only this user's jobs")->type_name("USER");
  jobs->add_option("--state", args->states, "Only jobs in these states (comma list)")
      ->type_name("STATE");
  jobs->add_option("--limit", args->limit, "The first N matching jobs (text shows 100)")
      ->type_name("N")
      ->check(CLI::Range(1u, 1000000u));
  jobs->footer(absl::StrCat(kJobsFooter, kJobStatesHelp,
                            "\nExamples:\n  ipupod jobs\n  ipupod jobs --all --user alice\n"
                            "  ipupod jobs --state failed,timeout\n  ipupod jobs --limit 500\n"
                            "  ipupod --json jobs | jq -r '.jobs[] | select(.state == "
                            "\"PENDING\") | .id'"));
  OnSelected(jobs, selection, "jobs", [args](Context& ctx) { return RunList(ctx, *args); });
}

CLI::App* AddOnJob(CLI::App* group, Selection& selection, const std::shared_ptr<JobArgs>& args,
                   const char* name, const char* description, std::string footer,
                   std::function<int(Context&, const JobArgs&)> run) {
  CLI::App* sub = group->add_subcommand(name, description);
  sub->add_option("ID", args->id, "Job id, e.g. 17 or 17.3")->type_name("ID")->required();
  sub->footer(std::move(footer));
  OnSelected(sub, selection, absl::StrCat("job ", name),
             [args, run = std::move(run)](Context& ctx) {
               if (absl::Status id = CheckJobId(args->id, "ID"); !id.ok()) {
                 return ctx.UsageError(id.message());
               }
               return run(ctx, *args);
             });
  return sub;
}

void AddChanges(CLI::App* group, Selection& selection, const std::shared_ptr<JobArgs>& args) {
  AddOnJob(group, selection, args, "cancel", "Cancel a pending or running job",
           "A PENDING job leaves the queue; a RUNNING one stops after its current step (a\n"
           "training job keeps its last checkpoint among its results). Jobs waiting for it\n"
           "with --after are cancelled too. A finished job cannot be cancelled (exit 7).\n\n"
           "Example:\n  ipupod job cancel 17",
           [](Context& ctx, const JobArgs& a) {
             return RunChange(ctx, a, &client::Client::CancelJob, "cancelled");
           });
  AddOnJob(group, selection, args, "hold", "Keep a pending job from starting",
           "The job stays PENDING with reason Held, keeping its place, until `ipupod job\n"
           "release`.\n\nExample:\n  ipupod job hold 17",
           [](Context& ctx, const JobArgs& a) {
             return RunChange(ctx, a, &client::Client::HoldJob, "held");
           });
  AddOnJob(group, selection, args, "release", "Let a held job start",
           "Example:\n  ipupod job release 17", [](Context& ctx, const JobArgs& a) {
             return RunChange(ctx, a, &client::Client::ReleaseJob, "released");
           });
  AddOnJob(group, selection, args, "delete", "Delete a finished job and its results",
           "Removes the record and the results of a COMPLETED, FAILED, CANCELLED or TIMEOUT job\n"
           "(cancel a pending or running one first: exit 7), and says how much it freed.\n\n"
           "Example:\n  ipupod job fetch 17 -o out/ && ipupod job delete 17",
           RunDelete);
}

}  // namespace

void AddJobsCommands(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<JobArgs>();
  AddList(app, selection, args);
  CLI::App* group = app.add_subcommand("job", "Show, follow, wait for, fetch or change a job");
  group->require_subcommand(1);
  group->footer(absl::StrCat(kJobFooter, kJobStatesHelp,
                             "\nExamples:\n  ipupod job show 17\n  ipupod job logs 17 --follow\n"
                             "  ipupod job wait 17 --timeout 1h\n  ipupod job fetch 17 -o out/"));
  AddOnJob(group, selection, args, "show", "Show everything about a job",
           absl::StrCat("The whole record: state and reason, IPUs and session, times, progress,\n"
                        "faults recovered and requeues, the spec it was submitted with, and its\n"
                        "results (--json: the record).\n\n",
                        kJobStatesHelp, "\nExample:\n  ipupod job show 17"),
           RunJobShow);
  CLI::App* logs = AddOnJob(
      group, selection, args, "logs", "Print a job's events",
      "One line per event: time, kind (state, run, recovery, requeue, checkpoint, note) and\n"
      "text; a training run's line has the loss of each of its weight updates. --follow\n"
      "keeps printing until the job has finished. --json: one JSON line per event.\n\n"
      "Examples:\n  ipupod job logs 17\n  ipupod job logs 17 --follow",
      RunLogs);
  logs->add_flag("--follow,-f", args->follow, "Keep printing events until the job finishes");
  CLI::App* wait = AddOnJob(group, selection, args, "wait", "Wait for a job to finish",
                            absl::StrCat(kWaitFooter), RunWait);
  wait->add_option("--timeout", args->timeout, "Give up waiting after this long (exit 33)")
      ->type_name("DURATION");
  CLI::App* fetch =
      AddOnJob(group, selection, args, "fetch", "Download a job's results into a directory",
               "Downloads every result file of the job into DIR (made if missing): outputs.npz\n"
               "(inference), weights.npz, model.onnx and checkpoint.npz (training), report.json.\n"
               "Each file goes to FILE.part first and is renamed once its size and SHA-256 match;\n"
               "run the command again after a dropped connection and it resumes where it stopped\n"
               "(files already complete are kept). Results stay on the server until `ipupod job\n"
               "delete` or the retention period.\n\n"
               "Example:\n  ipupod job fetch 17 -o results/17",
               RunFetch);
  fetch->add_option("-o,--output", args->directory, "The directory to write into")
      ->type_name("DIR")
      ->required();
  AddChanges(group, selection, args);
}

}  // namespace ipupod::cli
