#include "server/settings.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace ipupod::server {
namespace {

using json::Json;
using json::JsonPath;
using K = SettingKind;
using SC = ServerConfig;

absl::Status CheckListen(absl::string_view text) { return ParseListenAddress(text).status(); }

absl::Status CheckMetricsListen(absl::string_view text) {
  if (text == "off") return absl::OkStatus();
  const absl::Status address = ParseListenAddress(text).status();
  if (address.ok()) return address;
  return absl::InvalidArgumentError(absl::StrCat(address.message(), ", or \"off\" for no metrics"));
}

absl::Status ParsePodText(absl::string_view text, ServerConfig& config) {
  IPUPOD_ASSIGN_OR_RETURN(config.pod, ParsePod(text));
  return absl::OkStatus();
}

std::string ShowPod(const ServerConfig& config) { return config.pod.name; }

// ParseLogFormat's message, which tells what each format is, and the choice.
absl::Status ParseLogFormatText(absl::string_view text, ServerConfig& config) {
  absl::StatusOr<LogFormat> format = ParseLogFormat(text);
  if (!format.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(format.status().message(), "; expected \"text\" or \"json\""));
  }
  config.log_format = *format;
  return absl::OkStatus();
}

std::string ShowLogFormat(const ServerConfig& config) {
  return std::string(LogFormatName(config.log_format));
}

constexpr absl::string_view kStringExpected = "a non-empty string of at most 4096 bytes";

// The table. Each row's default is its member's initializer in server/config.h.
constexpr Setting kSettings[] = {
    {.key = "listen",
     .flag = "--listen",
     .value_name = "ADDR",
     .kind = K::kString,
     .string_member = &SC::listen,
     .check = CheckListen,
     .expected = kStringExpected,
     .help = "address to serve on, host:port ([::1]:PORT for IPv6; port 0 = any free port, "
             "printed at start)",
     .details = "Open mode, and tokens without `tls`, need a loopback address"},
    {.key = "pod",
     .flag = "--pod",
     .value_name = "NAME|N",
     .kind = K::kCustom,
     .parse = ParsePodText,
     .show = ShowPod,
     .expected = "a pod name such as \"POD16\" or an IPU count such as 16",
     .json_integer = true,
     .help = "pod to simulate: POD4, POD16, POD64, another PODn, or an IPU count (a power of two "
             "1..256)"},
    {.key = "state_dir",
     .flag = "--state-dir",
     .value_name = "DIR",
     .kind = K::kString,
     .string_member = &SC::state_dir,
     .expected = kStringExpected,
     .packaged = "/var/lib/ipupod",
     .help = "directory of the durable state (state.db)",
     .details = "`state.db` (SQLite) keeps partitions, failed IPUs, the boot counter, the batch "
                "jobs' records and the usage ledger; `blobs/` and `server/jobs/` hold the jobs' "
                "files"},
    {.key = "session_lease_seconds",
     .flag = "--lease-seconds",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::session_lease_seconds,
     .min = 1,
     .max = kLeaseSecondsMax,
     .unit = "seconds",
     .help = "a silent client loses its session after this long (keepalive and heartbeats "
             "follow it)"},
    {.key = "max_waiters",
     .flag = "--max-waiters",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::max_waiters,
     .min = 1,
     .max = kMaxWaitersMax,
     .unit = "waiters",
     .help = "bound on queued attach requests",
     .details = "Every pending batch job waits in the same queue"},
    {.key = "max_backfill_waiters",
     .flag = "--max-backfill-waiters",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::max_backfill_waiters,
     .min = 0,
     .max = kMaxWaitersMax,
     .unit = "waiters",
     .help = "how far a walk of the queue looks past its first waiter that cannot start; 0 = no "
             "bound",
     .details = "Slurm's `bf_max_job_test`: those further back neither start nor reserve in "
                "that walk and keep the reason a walk last gave them "
                "([scheduling](scheduling.md#speed))"},
    {.key = "check_invariants",
     .flag = "--check-invariants",
     .value_name = "BOOL",
     .kind = K::kBool,
     .bool_member = &SC::check_invariants,
     .help = "after every change to the pod's state, check its invariants and stop the server "
             "on a breach (slow: for soak runs and debugging)",
     .details = "Every IPU in one state, no IPU in two sessions, the free IPUs exactly those "
                "idle and held by none, the queue in order. A breach is a bug in ipupodd: it "
                "writes what broke to stderr and aborts rather than serve a wrong pod. The "
                "sanitizer builds always check"},
    {.key = "executable_cache_mb",
     .flag = "--executable-cache-mb",
     .value_name = "MB",
     .kind = K::kInt64,
     .int64_member = &SC::executable_cache_mb,
     .min = 1,
     .max = kExecutableCacheMbMax,
     .unit = "MB",
     .help = "uploaded executables kept in memory plus uploads in progress, least recently "
             "used evicted first",
     .details = "A loaded one stays alive. An upload is refused RESOURCE_EXHAUSTED at once if "
                "it declares more than this, more than uploads in progress leave, or more than "
                "any executable can be (3 GiB + 80 B)"},
    {.key = "load_memory_mb",
     .flag = "--load-memory-mb",
     .value_name = "MB",
     .kind = K::kInt64,
     .int64_member = &SC::load_memory_mb,
     .min = 0,
     .max = kLoadMemoryMbMax,
     .unit = "MB",
     .help = "host memory all loaded programs may hold together; a load over it is refused; 0 = "
             "half of this host's memory (at least 1 GiB)",
     .details = "Counts weights, optimizer state, activations of one replica each, and with "
                "`broadcast_buffers` false the other replicas' buffer copies, from the "
                "executable's memory plan; a Load over it gets RESOURCE_EXHAUSTED saying what "
                "is held"},
    {.key = "max_execution_threads",
     .flag = "--max-execution-threads",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::max_execution_threads,
     .min = kExecutionThreadsMin,
     .max = kExecutionThreadsMax,
     .unit = "calls",
     .help = "uploads, loads, weight transfers and runs served at once",
     .details = "Each holds a gRPC sync-pool thread; one more gets RESOURCE_EXHAUSTED naming "
                "this bound, logged as a warning. A client making one call after another is "
                "never refused"},
    {.key = "max_execution_threads_per_user",
     .flag = "--max-execution-threads-per-user",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::max_execution_threads_per_user,
     .min = 0,
     .max = kExecutionThreadsMax,
     .unit = "calls",
     .help = "of those, the most one user may hold; 0 = half of them, at least 1",
     .details = "One more from that user gets RESOURCE_EXHAUSTED naming this bound while other "
                "users are still served. With `max_execution_threads` 1 the one call is "
                "everyone's"},
    {.key = "execution_stream_idle_seconds",
     .flag = "--execution-stream-idle-seconds",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::execution_stream_idle_seconds,
     .min = 1,
     .max = kStreamIdleSecondsMax,
     .unit = "seconds",
     .help = "an upload, weight transfer or run whose client sends nothing this long is ended "
             "DEADLINE_EXCEEDED",
     .details = "It names this key's flag, and what the call held is freed (checked about once "
                "a second). Time the server spends waiting for the session or for compute does "
                "not count"},
    {.key = "upload_min_bytes_per_second",
     .flag = "--upload-min-bytes-per-second",
     .value_name = "N",
     .kind = K::kInt64,
     .int64_member = &SC::upload_min_bytes_per_second,
     .min = 0,
     .max = kUploadMinBytesPerSecondMax,
     .unit = "bytes/s",
     .help = "an upload slower than this, once the server has waited "
             "execution_stream_idle_seconds for it, is ended DEADLINE_EXCEEDED; 0 = no bound",
     .details = "Uploads are `PutBlob` (blobs and the models compiled from them), "
                "`UploadExecutable` and `WriteWeights`; the rate is measured over the time the "
                "server has waited for the bytes, and what the upload reserved is freed: a "
                "client trickling a byte every few seconds is never idle, but no longer keeps "
                "its call and its reservation for as long as it likes"},
    {.key = "compute_threads",
     .flag = "--compute-threads",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::compute_threads,
     .min = 0,
     .max = kComputeThreadsMax,
     .unit = "threads",
     .help = "BLAS threads each run may use; 0 = every CPU of this host",
     .details = "Convolutions and pooling run on oneDNN's OpenMP threads, which this key does "
                "not set: bound them with `OMP_NUM_THREADS` in ipupodd's environment"},
    {.key = "compile_max_model_mb",
     .flag = "--compile-max-model-mb",
     .value_name = "MB",
     .kind = K::kInt64,
     .int64_member = &SC::compile_max_model_mb,
     .min = 1,
     .max = kCompileModelMbMax,
     .unit = "MB",
     .help = "the largest ONNX model the server compiles (CompileService)",
     .details = "`ipupod compile --remote` and the Python client use it; a larger model gets "
                "RESOURCE_EXHAUSTED before it is read, saying to compile locally and upload "
                "the executable"},
    {.key = "compile_max_concurrent",
     .flag = "--compile-max-concurrent",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::compile_max_concurrent,
     .min = 1,
     .max = kCompileConcurrentMax,
     .unit = "compiles",
     .help = "compiles at once on the server, one per user",
     .details = "One more gets RESOURCE_EXHAUSTED naming this key. Each also reserves 4x its "
                "model plus its fold budget (at least 256 MiB) in `load_memory_mb` while it "
                "runs"},
    {.key = "compile_time_limit_seconds",
     .flag = "--compile-time-limit-seconds",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::compile_time_limit_seconds,
     .min = 1,
     .max = kCompileTimeLimitSecondsMax,
     .unit = "seconds",
     .help = "a compile still folding constants after this long is stopped DEADLINE_EXCEEDED",
     .details = "Within a fraction of a second, even inside one long node. A client that goes "
                "away stops its compile too, and so does the server's shutdown (UNAVAILABLE)"},
    {.key = "log_level",
     .flag = "--log-level",
     .value_name = "LEVEL",
     .kind = K::kString,
     .string_member = &SC::log_level,
     .check = ValidateLogLevel,
     .expected = "one of trace, debug, info, warn, error, critical, off",
     .help = "trace, debug, info, warn, error, critical or off"},
    {.key = "log_format",
     .flag = "--log-format",
     .value_name = "FORMAT",
     .kind = K::kCustom,
     .parse = ParseLogFormatText,
     .show = ShowLogFormat,
     .expected = "\"text\" or \"json\"",
     .help = "text, or json: every stderr line one JSON object, e.g. "
             "{\"time\":...,\"level\":\"info\",\"event\":\"rpc\",\"user\":...}",
     .details = "`text` is spdlog's lines; `json` makes the request log's fields keys "
                "([operations](operations.md#log-format)). The ready line on stdout does not "
                "change"},
    {.key = "jobs_blob_store_mb",
     .flag = "--jobs-blob-store-mb",
     .value_name = "MB",
     .kind = K::kInt64,
     .int64_member = &SC::jobs_blob_store_mb,
     .min = 1,
     .max = kBlobStoreMbMax,
     .unit = "MB",
     .help = "the batch jobs' blob store (state_dir/blobs) holds at most this much, uploads "
             "in progress included",
     .details = "Executables, inputs and weights, each stored once by content hash; an upload "
                "over it is refused RESOURCE_EXHAUSTED on its first message, saying how much "
                "is used"},
    {.key = "jobs_blob_store_user_mb",
     .flag = "--jobs-blob-store-user-mb",
     .value_name = "MB",
     .kind = K::kInt64,
     .int64_member = &SC::jobs_blob_store_user_mb,
     .min = 1,
     .max = kBlobStoreMbMax,
     .unit = "MB",
     .help = "of that, the most one user holds (at most jobs_blob_store_mb)",
     .details = "The distinct blobs their jobs use and what they uploaded in the last hour"},
    {.key = "jobs_retention_hours",
     .flag = "--jobs-retention-hours",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_retention_hours,
     .min = 1,
     .max = kRetentionHoursMax,
     .unit = "hours",
     .help = "a finished job's results (state_dir/jobs/ID/) are purged this long after it "
             "ends",
     .details = "Its record stays and says so (`ipupod job delete` removes both at once)"},
    {.key = "jobs_default_time_limit_minutes",
     .flag = "--jobs-default-time-limit-minutes",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_default_time_limit_minutes,
     .min = 1,
     .max = kTimeLimitMinutesMax,
     .unit = "minutes",
     .help = "the time limit of a job submitted without --time-limit; past it the job ends "
             "TIMEOUT"},
    {.key = "jobs_max_requeues",
     .flag = "--jobs-max-requeues",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_max_requeues,
     .min = 0,
     .max = kJobRequeuesMax,
     .unit = "requeues",
     .help = "how often a job goes back to the queue after a device fault before it ends FAILED",
     .details = "Counts faults its attempt could not recover, and sessions taken away"},
    {.key = "jobs_max_records",
     .flag = "--jobs-max-records",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_max_records,
     .min = 1,
     .max = kJobRecordsMax,
     .unit = "jobs",
     .help = "jobs the server keeps, in every state",
     .details = "A submit past it is RESOURCE_EXHAUSTED until finished jobs are deleted or "
                "purged"},
    {.key = "jobs_max_active_per_user",
     .flag = "--jobs-max-active-per-user",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_max_active_per_user,
     .min = 1,
     .max = kJobRecordsMax,
     .unit = "jobs",
     .help = "PENDING and RUNNING jobs one user may have; a submit past it is RESOURCE_EXHAUSTED",
     .details = "Every pending job also waits in the scheduler's queue, so `max_waiters` bounds "
                "all users' pending jobs together"},
    {.key = "jobs_max_calls",
     .flag = "--jobs-max-calls",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_max_calls,
     .min = 1,
     .max = kJobCallsMax,
     .unit = "calls",
     .help = "JobService calls served at once, every user's together",
     .details = "Submits, listings, `job show`, cancels, uploads (`PutBlob`), fetches; each "
                "holds a gRPC sync-pool thread while it runs. One more gets RESOURCE_EXHAUSTED "
                "naming this key. Waits on jobs are not among them (`jobs_max_watchers`)"},
    {.key = "jobs_max_calls_per_user",
     .flag = "--jobs-max-calls-per-user",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_max_calls_per_user,
     .min = 1,
     .max = kJobCallsMax,
     .unit = "calls",
     .help = "of those, the most one user may have in flight (at most "
             "jobs_max_calls)",
     .details = "One more from that user gets RESOURCE_EXHAUSTED naming this key while other "
                "users are served. A silent upload or fetch ends after "
                "`execution_stream_idle_seconds`"},
    {.key = "jobs_max_watchers",
     .flag = "--jobs-max-watchers",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_max_watchers,
     .min = 1,
     .max = kJobWatchersMax,
     .unit = "watches",
     .help = "waits on jobs open at once, every user's together (job wait, job logs --follow)",
     .details = "Python `wait_job` and `job_events` too (JobService `WatchJob`). A watch holds "
                "no thread and no call slot (gRPC's callback API), so however many are open, "
                "submits, listings and `job show` still get through; one more watch gets "
                "RESOURCE_EXHAUSTED naming this key"},
    {.key = "jobs_max_watchers_per_user",
     .flag = "--jobs-max-watchers-per-user",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_max_watchers_per_user,
     .min = 1,
     .max = kJobWatchersMax,
     .unit = "watches",
     .help = "of those, the most one user may have open (at most jobs_max_watchers)",
     .details = "One more gets RESOURCE_EXHAUSTED naming this key while other users still "
                "watch"},
    {.key = "jobs_watch_max_seconds",
     .flag = "--jobs-watch-max-seconds",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::jobs_watch_max_seconds,
     .min = 1,
     .max = kJobWatchSecondsMax,
     .unit = "seconds",
     .help = "a watch that has lasted this long ends (OK) and frees its watcher",
     .details = "The CLI and the Python client, seeing the job unfinished, watch again from the "
                "next event, so nothing is printed twice or lost. A watch whose client takes no "
                "event for `execution_stream_idle_seconds` ends DEADLINE_EXCEEDED"},
    {.key = "accounting_retention_days",
     .flag = "--accounting-retention-days",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::accounting_retention_days,
     .min = 0,
     .max = kAccountingRetentionDaysMax,
     .unit = "days",
     .help = "usage records that ended longer ago are purged; 0 keeps them forever",
     .details = "Purged at start and once a day, in bounded batches "
                "([accounting](accounting.md))"},
    {.key = "accounting_heartbeat_seconds",
     .flag = "--accounting-heartbeat-seconds",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::accounting_heartbeat_seconds,
     .min = 1,
     .max = kAccountingHeartbeatSecondsMax,
     .unit = "seconds",
     .help = "how often the server records that it is alive",
     .details = "After a `kill -9` or a crash, the sessions that were open end `SERVER_RESTART` "
                "at the last such record, so at most this much of their use is lost"},
    {.key = "accounting_public",
     .flag = "--accounting-public",
     .value_name = "BOOL",
     .kind = K::kBool,
     .bool_member = &SC::accounting_public,
     .help = "whether every user may read everyone's usage records",
     .details = "`ipupod history --user`, `ipupod usage`; by default users see only their own, "
                "admins everyone's"},
    {.key = "accounting_max_calls",
     .flag = "--accounting-max-calls",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::accounting_max_calls,
     .min = 1,
     .max = kQueryCallsMax,
     .unit = "calls",
     .help = "AccountingService calls served at once, every user's together (ipupod usage, "
             "ipupod history)",
     .details = "One more gets RESOURCE_EXHAUSTED naming this key"},
    {.key = "accounting_max_calls_per_user",
     .flag = "--accounting-max-calls-per-user",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::accounting_max_calls_per_user,
     .min = 1,
     .max = kQueryCallsMax,
     .unit = "calls",
     .help = "of those, the most one user may have in flight (at most accounting_max_calls)",
     .details = "One more from that user gets RESOURCE_EXHAUSTED naming this key while others "
                "are served"},
    {.key = "audit_max_calls",
     .flag = "--audit-max-calls",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::audit_max_calls,
     .min = 1,
     .max = kQueryCallsMax,
     .unit = "calls",
     .help = "AuditService calls served at once (ipupod audit)",
     .details = "One more gets RESOURCE_EXHAUSTED naming this key"},
    {.key = "audit_max_calls_per_user",
     .flag = "--audit-max-calls-per-user",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::audit_max_calls_per_user,
     .min = 1,
     .max = kQueryCallsMax,
     .unit = "calls",
     .help = "of those, one user's at most (at most audit_max_calls)"},
    {.key = "audit_retention_days",
     .flag = "--audit-retention-days",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::audit_retention_days,
     .min = 0,
     .max = kAuditRetentionDaysMax,
     .unit = "days",
     .help = "audit records older than this are purged, oldest first; 0 keeps them forever",
     .details = "Purged at start and after every `accounting_heartbeat_seconds` "
                "([operations](operations.md#audit-log))"},
    {.key = "audit_max_records",
     .flag = "--audit-max-records",
     .value_name = "N",
     .kind = K::kInt64,
     .int64_member = &SC::audit_max_records,
     .min = 1,
     .max = kAuditMaxRecordsMax,
     .unit = "records",
     .help = "the audit log keeps at most this many records, plain users' refusals purged first",
     .details = "Purged at the same times: plain users' refused calls first, oldest first, and "
                "the other records (admins', the server's, privileged actions that happened) "
                "only when they alone are over the cap, so no user can push them out; between "
                "two purges it can exceed this by what one interval appends"},
    {.key = "audit_refusal_window_seconds",
     .flag = "--audit-refusal-window-seconds",
     .value_name = "N",
     .kind = K::kInt,
     .int_member = &SC::audit_refusal_window_seconds,
     .min = 1,
     .max = kAuditRefusalWindowSecondsMax,
     .unit = "seconds",
     .help = "a user's repeated refused privileged calls: one record, then one summary per window",
     .details = "Summarised per user, action and code: the first in this window is recorded, "
                "the rest counted, and one record says how many when the window has ended (or "
                "when an admin lists the log, or at stop); so a user refusing in a loop adds at "
                "most two records per action per window"},
    {.key = "metrics_listen",
     .flag = "--metrics-listen",
     .value_name = "ADDR|off",
     .kind = K::kString,
     .string_member = &SC::metrics_listen,
     .check = CheckMetricsListen,
     .expected = kStringExpected,
     .default_shown = kMetricsListenDefault,
     .help = "where to serve the status page, Prometheus metrics (/metrics) and liveness "
             "(/healthz) over HTTP, host:port, or off; port 0 when listen's port is 0",
     .details = "An IPv6 host goes in brackets (`[::1]:9464`). It obeys the API's identity "
                "rules: loopback in open mode; with tokens, `/metrics` needs one (Bearer, or "
                "Basic's password) and a non-loopback address needs TLS. A port in use stops "
                "the server at start (exit 2). [operations](operations.md) lists the metrics"},
};

// Where a value came from: the start of every error about it.
std::string FromFile(const Setting& setting, const JsonPath& at) {
  return absl::StrCat(at.Name(), " (flag ", setting.flag, ")");
}
std::string FromFlag(const Setting& setting) {
  return absl::StrCat("flag ", setting.flag, " (config key '", setting.key, "')");
}
std::string FromCode(const Setting& setting) {
  return absl::StrCat("setting '", setting.key, "' (flag ", setting.flag, ")");
}

// The one wording of a bad value: where, what is expected, what was given.
absl::Status BadValue(absl::string_view where, absl::string_view expected, absl::string_view got) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": expected ", expected, ", got ", got));
}

std::string Expected(const Setting& setting) {
  switch (setting.kind) {
    case K::kInt:
    case K::kInt64:
      return absl::StrCat("an integer from ", setting.min, " to ", setting.max,
                          setting.unit.empty() ? "" : absl::StrCat(" (", setting.unit, ")"));
    case K::kBool:
      return "true or false";
    case K::kString:
    case K::kCustom:
      break;
  }
  return std::string(setting.expected);
}

bool IsInteger(SettingKind kind) { return kind == K::kInt || kind == K::kInt64; }

void StoreInt(const Setting& setting, int64_t n, ServerConfig& config) {
  if (setting.kind == K::kInt) {
    config.*setting.int_member = static_cast<int>(n);
  } else {
    config.*setting.int64_member = n;
  }
}

int64_t LoadInt(const Setting& setting, const ServerConfig& config) {
  return setting.kind == K::kInt ? config.*setting.int_member : config.*setting.int64_member;
}

bool IsStringValue(absl::string_view text) {
  return !text.empty() && text.size() <= kStringLengthMax &&
         text.find('\0') == absl::string_view::npos;
}

// Stores text into a kString or kCustom setting; the error message only
// (the caller says where the text came from).
absl::Status StoreText(const Setting& setting, absl::string_view text, ServerConfig& config) {
  if (setting.kind == K::kCustom) return setting.parse(text, config);
  if (setting.check != nullptr) IPUPOD_RETURN_IF_ERROR(setting.check(text));
  config.*setting.string_member = std::string(text);
  return absl::OkStatus();
}

std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", text.substr(0, 40), text.size() > 40 ? "...\"" : "\"");
}

bool JsonIntegerFits(const Json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() ||
          v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

absl::Status ReadTextJson(const Setting& setting, const Json& v, const JsonPath& at,
                          ServerConfig& config) {
  std::string text;
  if (v.is_string() && IsStringValue(v.get_ref<const std::string&>())) {
    text = v.get<std::string>();
  } else if (setting.json_integer && v.is_number_integer()) {
    text = v.dump();
  } else {
    return BadValue(FromFile(setting, at), Expected(setting), json::Describe(v));
  }
  const absl::Status stored = StoreText(setting, text, config);
  if (stored.ok()) return stored;
  return absl::InvalidArgumentError(absl::StrCat(FromFile(setting, at), ": ", stored.message()));
}

}  // namespace

absl::Span<const Setting> Settings() { return kSettings; }

const Setting* FindSetting(absl::string_view key) {
  for (const Setting& setting : kSettings) {
    if (setting.key == key) return &setting;
  }
  return nullptr;
}

absl::Status ReadSettingJson(const Setting& setting, const Json& v, const JsonPath& at,
                             ServerConfig& config) {
  if (IsInteger(setting.kind)) {
    if (!JsonIntegerFits(v) || v.get<int64_t>() < setting.min || v.get<int64_t>() > setting.max) {
      return BadValue(FromFile(setting, at), Expected(setting), json::Describe(v));
    }
    StoreInt(setting, v.get<int64_t>(), config);
    return absl::OkStatus();
  }
  if (setting.kind == K::kBool) {
    if (!v.is_boolean()) {
      return BadValue(FromFile(setting, at), Expected(setting), json::Describe(v));
    }
    config.*setting.bool_member = v.get<bool>();
    return absl::OkStatus();
  }
  return ReadTextJson(setting, v, at, config);
}

absl::Status ApplySettingFlag(const Setting& setting, absl::string_view text,
                              ServerConfig& config) {
  if (IsInteger(setting.kind)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(text, &n)) {
      return BadValue(FromFlag(setting), Expected(setting), Quoted(text));
    }
    if (n < setting.min || n > setting.max) {
      return BadValue(FromFlag(setting), Expected(setting), absl::StrCat(n));
    }
    StoreInt(setting, n, config);
    return absl::OkStatus();
  }
  if (setting.kind == K::kBool) {
    if (text != "true" && text != "false") {
      return BadValue(FromFlag(setting), Expected(setting), Quoted(text));
    }
    config.*setting.bool_member = text == "true";
    return absl::OkStatus();
  }
  if (!IsStringValue(text)) {
    return BadValue(FromFlag(setting), Expected(setting), Quoted(text));
  }
  const absl::Status stored = StoreText(setting, text, config);
  if (stored.ok()) return stored;
  return absl::InvalidArgumentError(absl::StrCat(FromFlag(setting), ": ", stored.message()));
}

absl::Status CheckSettingRanges(const ServerConfig& config) {
  for (const Setting& setting : kSettings) {
    if (IsInteger(setting.kind)) {
      const int64_t n = LoadInt(setting, config);
      if (n < setting.min || n > setting.max) {
        return BadValue(FromCode(setting), Expected(setting), absl::StrCat(n));
      }
    } else if (setting.kind == K::kString) {
      const std::string& text = config.*setting.string_member;
      if (text.empty() && !setting.default_shown.empty()) continue;  // the computed default
      if (!IsStringValue(text)) {
        return BadValue(FromCode(setting), Expected(setting), Quoted(text));
      }
      if (setting.check == nullptr) continue;
      const absl::Status checked = setting.check(text);
      if (!checked.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(FromCode(setting), ": ", checked.message()));
      }
    }
  }
  return absl::OkStatus();
}

std::string SettingText(const Setting& setting, const ServerConfig& config) {
  switch (setting.kind) {
    case K::kInt:
    case K::kInt64:
      return absl::StrCat(LoadInt(setting, config));
    case K::kBool:
      return config.*setting.bool_member ? "true" : "false";
    case K::kString:
      return config.*setting.string_member;
    case K::kCustom:
      break;
  }
  return setting.show(config);
}

std::string SettingDefault(const Setting& setting) {
  if (!setting.default_shown.empty()) return std::string(setting.default_shown);
  static const ServerConfig* const defaults = new ServerConfig();  // never destroyed
  return SettingText(setting, *defaults);
}

std::string SettingRange(const Setting& setting) {
  if (IsInteger(setting.kind)) {
    return absl::StrCat(setting.min, " to ", setting.max,
                        setting.unit.empty() ? "" : absl::StrCat(" ", setting.unit));
  }
  if (setting.kind == K::kBool) return "true or false";
  return "";
}

std::string SettingHelp(const Setting& setting) {
  const std::string range = SettingRange(setting);
  return absl::StrCat(setting.help, " (", range.empty() ? "" : absl::StrCat(range, "; "),
                      "default ", SettingDefault(setting), "; config key ", setting.key, ")");
}

namespace {

std::string TableCell(absl::string_view text) { return absl::StrReplaceAll(text, {{"|", "\\|"}}); }

std::string Code(absl::string_view text) { return absl::StrCat("`", text, "`"); }

}  // namespace

std::string RenderSettingsTable() {
  std::string out =
      "| key | flag | default | range | meaning |\n"
      "|---|---|---|---|---|\n";
  for (const Setting& setting : kSettings) {
    std::string meaning(setting.help);
    if (!setting.details.empty()) absl::StrAppend(&meaning, ". ", setting.details);
    const std::string range = SettingRange(setting);
    absl::StrAppend(&out, "| ", Code(setting.key), " | ", Code(setting.flag), " | ",
                    Code(SettingDefault(setting)), " | ", range.empty() ? "" : range, " | ",
                    TableCell(meaning), " |\n");
  }
  return out;
}

namespace {

constexpr absl::string_view kDefaultConfigHeader =
    R"(// ipupodd's configuration (JSON with comments; every key is optional, flags win over it).
// Installed as /etc/ipupod/ipupodd.json, root:ipupod 0640: it may hold tokens.
// Every scalar setting is here at its default but state_dir (the package's /var/lib/ipupod,
// which ipupodd.service also passes), generated from server/settings.cc (`ipupodd
// --print-settings json`; tests/server/settings_test.cc checks this file). Their ranges and
// the structured keys (tokens, tls, sharing, ...): configuration.md in
// /usr/share/doc/ipupod/docs/.
// After editing the "sharing" section, `systemctl reload ipupodd` puts it in force; any
// other key takes effect at the next `systemctl restart ipupodd`.
{
  // Open mode (no "tokens"): clients name themselves, so the server listens on loopback
  // only. To serve the network, add tokens and TLS (docs/configuration.md):
  //   "listen": "0.0.0.0:50051",
  //   "tokens": [{"token": "...", "user": "alice"}, {"token": "...", "user": "ops", "role": "admin"}],
  //   "tls": {"cert": "/etc/ipupod/server.pem", "key": "/etc/ipupod/server.key"},
)";

// `text` as // comments of at most about 100 columns, indented by two.
void AppendComment(std::string& out, absl::string_view text) {
  std::string line = "  //";
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > 4 && line.size() + 1 + word.size() > 98) {
      absl::StrAppend(&out, line, "\n");
      line = "  //";
    }
    absl::StrAppend(&line, " ", word);
  }
  absl::StrAppend(&out, line, "\n");
}

std::string JsonValue(const Setting& setting) {
  const std::string text =
      setting.packaged.empty() ? SettingDefault(setting) : std::string(setting.packaged);
  if (setting.kind == K::kString || setting.kind == K::kCustom) return Json(text).dump();
  return text;  // an integer, true or false
}

}  // namespace

std::string RenderDefaultConfig() {
  std::string out(kDefaultConfigHeader);
  const absl::Span<const Setting> settings = Settings();
  for (size_t i = 0; i < settings.size(); ++i) {
    const Setting& setting = settings[i];
    const std::string range = SettingRange(setting);
    AppendComment(out,
                  absl::StrCat(setting.help, range.empty() ? "" : absl::StrCat(" (", range, ")")));
    absl::StrAppend(&out, "  \"", setting.key, "\": ", JsonValue(setting),
                    i + 1 < settings.size() ? ",\n" : "\n");
  }
  out += "}\n";
  return out;
}

}  // namespace ipupod::server
