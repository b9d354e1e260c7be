// File: server/config.h
//
// ServerConfig: everything ipupodd is configured with, parsed from a JSON file
// and overridden by command-line flags (server/flags.h). Every key is
// optional; an unknown key, a wrong type, a negative or out-of-range number or
// an over-long string is an INVALID_ARGUMENT that names the key, what it
// expects and what it got, so a typo in a server config never passes silently.
// The scalar keys ("max_waiters": 4096) are the rows of server/settings.h,
// which reads, checks and documents them; each one's default is its member's
// initializer below. The structured keys are read here:
//   {
//     "tokens": [{"token": "...", "user": "alice", "role": "user"|"admin"}],
//     "open_mode_admins": ["admin"],        used only without tokens
//     "reset_ms": {"ipu": 200, "partition": 500, "pod": 1000},
//     "random_faults": {"seed": 1, "probability_per_operation": 0.01,
//                       "kinds": ["ipu-reset", "link-reset", "partition-reset",
//                                 "full-reset", "unrecoverable"]},
//     "sharing": {...},                     accounts, QoS, limits, priority
//                                           (server/sharing_config.h); reloaded on SIGHUP
//     "tls": {"cert": "server.pem", "key": "server.key", "client_ca": "clients.pem"},
//                                           TLS for the listeners; client_ca = mutual TLS
//     "custom_ops": {                       custom op libraries (PopTorch 4.9;
//                                           device/customop/library_registry.h)
//       "library_dirs": ["/opt/ipupod/custom-ops"],  where they may come from; empty (the
//                                           default): none is run
//       "host": "/usr/libexec/ipupod/ipupod-custom-op-host",  the helper that runs them;
//                                           unset: the one beside ipupodd
//       "memory_mb": 4096,                  address space of one helper (64-1048576)
//       "call_timeout_seconds": 60,         one call of a library (1-3600)
//       "max_hosts": 64}                    helpers running at once (1-4096)
//   }
//
// Without tokens the server runs in open mode: callers name themselves, so it
// must listen on loopback only (ValidateConfig enforces it). With tokens but
// without "tls" it must listen on loopback too: tokens would cross the
// network in clear text.
//
// Thread safety: plain values and pure functions.
#ifndef IPUPOD_SERVER_CONFIG_H_
#define IPUPOD_SERVER_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/loopback.h"
#include "common/user_name.h"
#include "device/pod_config.h"
#include "scheduler/scheduler.h"
#include "scheduler/sharing/policy.h"
#include "server/log_format.h"

namespace ipupod::server {

struct TokenEntry {
  std::string token;
  std::string user;
  bool admin = false;
};

// TLS for the listeners (server/tls_files.h reads and checks them at start).
struct TlsFiles {
  std::string cert;       // PEM certificate (chain) of the server
  std::string key;        // PEM private key matching `cert`
  std::string client_ca;  // PEM CA bundle; non-empty = mutual TLS on the gRPC listener
  bool enabled() const { return !cert.empty(); }
};

// Custom op libraries ("custom_ops"; device/customop/library_registry.h, docs/operations.md): the
// directories they may come from (absolute; empty: none is run), the helper that runs
// them ("": customop::DefaultHostBinary, beside ipupodd), and each helper's limits:
// address space, wall time of one call (its CPU time is bounded at that times the host's
// CPUs), and how many run at once.
struct CustomOpsConfig {
  std::vector<std::string> library_dirs;
  std::string host;
  int64_t memory_mb = 4096;
  int call_timeout_seconds = 60;
  int max_hosts = 64;
};

struct ServerConfig {
  std::string listen = "127.0.0.1:50051";
  device::PodConfig pod;  // POD16
  std::string state_dir = "./ipupod-state";
  std::vector<TokenEntry> tokens;
  std::vector<std::string> open_mode_admins = {"admin"};
  int session_lease_seconds = 10;
  int ipu_reset_ms = 200;
  int partition_reset_ms = 500;
  int pod_reset_ms = 1000;
  int max_waiters = 4096;
  int max_backfill_waiters = 1000;  // scheduler::SchedulerOptions::max_backfill_waiters
  bool check_invariants = false;    // scheduler::SchedulerOptions::check_invariants
  int64_t executable_cache_mb = 4096;
  int max_execution_threads = 8;
  int max_execution_threads_per_user = 0;  // 0: ExecutionThreadsPerUser's default
  int execution_stream_idle_seconds = 30;
  // An upload (PutBlob, UploadExecutable, WriteWeights) whose bytes arrive
  // slower than this, measured over the time the server waited for them once
  // that reaches execution_stream_idle_seconds, is ended (0 = no bound).
  int64_t upload_min_bytes_per_second = 16384;
  int64_t load_memory_mb = 0;  // 0: DefaultLoadMemoryBytes (server/execution/memory_budget.h)
  int compute_threads = 0;     // 0: every CPU of the host (kernels::MaxBlasThreads)
  // Compiles on the server (server/execution/remote_compile.h).
  int64_t compile_max_model_mb = 1024;
  int compile_max_concurrent = 2;
  int compile_time_limit_seconds = 600;
  scheduler::RandomFaults random_faults{.seed = 0, .probability_per_operation = 0.0};
  std::string log_level = "info";
  // Batch jobs (server/batch/job_manager.h): the blob store's bounds, how long
  // results are kept, the time limit of a job that names none, and how
  // often a job goes back to the queue after device faults before FAILED.
  int64_t jobs_blob_store_mb = 65536;
  int64_t jobs_blob_store_user_mb = 16384;
  int jobs_retention_hours = 168;
  int jobs_default_time_limit_minutes = 1440;
  int jobs_max_requeues = 3;
  int jobs_max_records = 20000;         // jobs kept, every state
  int jobs_max_active_per_user = 2000;  // PENDING and RUNNING, per user
  // JobService's bounds (server/job_service.h): its calls at once, and its
  // watches (job wait, job logs --follow) at once, each server-wide and per
  // user, and how long one watch lasts before the server ends it.
  int jobs_max_calls = 16;
  int jobs_max_calls_per_user = 4;
  int jobs_max_watchers = 256;
  int jobs_max_watchers_per_user = 32;
  int jobs_watch_max_seconds = 600;
  // The usage ledger (scheduler/accounting/ledger.h, server/accounting_upkeep.h):
  // how long ended records are kept (0 = forever), how often the server
  // records that it is alive (the end of sessions a kill -9 left open), and
  // whether users may read each other's usage and history (admins always
  // may).
  int accounting_retention_days = 365;
  int accounting_heartbeat_seconds = 60;
  bool accounting_public = false;
  // AccountingService's and AuditService's calls at once, server-wide and
  // per user (server/call_limit.h): each holds a sync-pool thread.
  int accounting_max_calls = 4;
  int accounting_max_calls_per_user = 2;
  int audit_max_calls = 2;
  int audit_max_calls_per_user = 2;
  // The audit log (scheduler/audit/audit_log.h, server/audit_trail.h): how long its
  // records are kept (0 = forever) and how many at most (the oldest go
  // first); and the form of the log lines (server/log_format.h).
  int audit_retention_days = 365;
  int64_t audit_max_records = 1'000'000;
  int audit_refusal_window_seconds = 60;
  LogFormat log_format = LogFormat::kText;
  // Fair sharing (scheduler/sharing/policy.h); SIGHUP re-reads it from config_path.
  sharing::SharingPolicy sharing = sharing::DefaultPolicy();
  // TLS files ("tls", --tls-cert, --tls-key, --tls-client-ca).
  TlsFiles tls;
  // The file the config was read from ("" = none); set by the flags, never a
  // key. SIGHUP reloads the sharing section from it.
  std::string config_path;
  // Each top-level key of that file as read, as compact JSON text (set by
  // LoadConfigFile): SIGHUP compares them to tell which keys changed
  // (DiffConfigKeys).
  std::map<std::string, std::string> file_keys;
  // The HTTP listener of metrics and health (server/http/, server/metrics/): host:port,
  // "off", or "" = the default (MetricsListenAddress).
  std::string metrics_listen;
  CustomOpsConfig custom_ops;
  // ipupodd --reinitialise only (never a config key: a config file is read
  // at every start): discard the state in state_dir and start a new pod.
  bool reinitialise = false;

  bool open_mode() const { return tokens.empty(); }
};

// The per-user share of max_execution_threads this config gives: the
// configured value (at most max_execution_threads), or half of them (at
// least 1) when it is 0.
int ExecutionThreadsPerUser(const ServerConfig& config);

// Bounds of the settings (server/settings.cc's rows) and of the structured keys.
inline constexpr int kLeaseSecondsMax = 3600;
inline constexpr int kResetMsMax = 60'000;
inline constexpr int kMaxWaitersMax = 1'000'000;
inline constexpr int64_t kExecutableCacheMbMax = int64_t{1} << 20;  // 1 TiB
inline constexpr int64_t kLoadMemoryMbMax = int64_t{1} << 24;       // 16 TiB
// gRPC's sync server needs a thread to poll and one to work.
inline constexpr int kExecutionThreadsMin = 1;
inline constexpr int kExecutionThreadsMax = 1024;
inline constexpr int kComputeThreadsMax = 1024;
inline constexpr int kStreamIdleSecondsMax = 3600;
inline constexpr int64_t kUploadMinBytesPerSecondMax = int64_t{1} << 30;
inline constexpr int64_t kBlobStoreMbMax = int64_t{1} << 24;  // 16 TiB
inline constexpr int kRetentionHoursMax = 24 * 365;
inline constexpr int kTimeLimitMinutesMax = 60 * 24 * 30;
inline constexpr int kJobRequeuesMax = 100;
inline constexpr int kJobRecordsMax = 1'000'000;
inline constexpr int kJobCallsMax = 1024;
inline constexpr int kQueryCallsMax = 64;  // accounting_max_calls, audit_max_calls
inline constexpr int kJobWatchersMax = 65536;
inline constexpr int kJobWatchSecondsMax = 86400;
inline constexpr int64_t kCompileModelMbMax = 65536;  // 64 GiB
inline constexpr int kCompileConcurrentMax = 64;
inline constexpr int kCompileTimeLimitSecondsMax = 86400;
inline constexpr int kAccountingRetentionDaysMax = 36500;  // a century
inline constexpr int kAccountingHeartbeatSecondsMax = 3600;
inline constexpr int kAuditRetentionDaysMax = 36500;
inline constexpr int64_t kAuditMaxRecordsMax = 1'000'000'000;
inline constexpr int kAuditRefusalWindowSecondsMax = 86400;
inline constexpr size_t kStringLengthMax = 4096;  // paths, addresses
inline constexpr size_t kTokenLengthMax = 512;
inline constexpr size_t kTokensMax = 1024;
inline constexpr int64_t kCustomOpMemoryMbMin = 64;
inline constexpr int64_t kCustomOpMemoryMbMax = int64_t{1} << 20;  // 1 TiB
inline constexpr int kCustomOpCallTimeoutSecondsMax = 3600;
inline constexpr int kCustomOpMaxHostsMax = 4096;
inline constexpr size_t kCustomOpLibraryDirsMax = 64;

inline constexpr int64_t kConfigFileBytesMax = int64_t{4} << 20;  // 4 MiB

// The top-level keys a SIGHUP reload applies; every other key takes effect
// at the next start only (docs/configuration.md, "Reloading").
inline constexpr absl::string_view kReloadableConfigKeys[] = {"sharing"};

// What a reload found changed in the config file, by top-level key (added,
// removed or with another value), sorted.
struct ConfigChanges {
  std::vector<std::string> applied;       // among kReloadableConfigKeys
  std::vector<std::string> need_restart;  // every other key
};
ConfigChanges DiffConfigKeys(const std::map<std::string, std::string>& running,
                             const std::map<std::string, std::string>& fresh);

// Parses a JSON document (an object). Missing keys keep their defaults.
absl::StatusOr<ServerConfig> ParseConfigJson(absl::string_view json_text);
// Reads and parses `path`; NOT_FOUND / FAILED_PRECONDITION when unreadable,
// INVALID_ARGUMENT (prefixed with the path) when invalid, when it is not a
// regular file (a FIFO, a device such as /dev/zero, a directory: opened
// without blocking and refused before anything is read) or when it is over
// kConfigFileBytesMax.
absl::StatusOr<ServerConfig> LoadConfigFile(const std::string& path);

// Pod from "POD16", "pod64" or a decimal count such as "16".
absl::StatusOr<device::PodConfig> ParsePod(absl::string_view text);
// One of trace, debug, info, warn, error, critical, off.
absl::Status ValidateLogLevel(absl::string_view level);
// A user name: IsValidUserName of common/user_name.h (1..64 characters
// from [A-Za-z0-9._@-]), the rule the client library checks too.

struct ListenAddress {
  std::string host;  // without brackets: "127.0.0.1", "::1", "localhost"
  int port = 0;      // 0 = ephemeral
  bool ipv6 = false;
};
// "host:port" or "[v6]:port". INVALID_ARGUMENT naming the expected form.
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view listen);
// 127.0.0.0/8, "localhost" or ::1 (common/loopback.h: the client's rule too).
using ::ipupod::IsLoopbackHost;

// Checks run after flags are applied: the listen address parses;
// open mode, and token mode without TLS, listen on loopback only
// (FAILED_PRECONDITION otherwise); a TLS key or client CA needs a certificate
// and a certificate a key (INVALID_ARGUMENT naming the flags and keys); every
// setting of server/settings.h within its range (CheckSettingRanges); per-user
// shares at most their totals; ValidateMetricsListen.
absl::Status ValidateConfig(const ServerConfig& config);

// The metrics listener's address: metrics_listen as given; unset,
// 127.0.0.1:9464, except 127.0.0.1:0 when listen's port is 0 (an ephemeral
// server, as tests start, must not collide on a fixed port); "" when "off".
inline constexpr absl::string_view kMetricsListenDefault = "127.0.0.1:9464";
std::string MetricsListenAddress(const ServerConfig& config);

// The metrics listener obeys the gRPC listener's identity rules: open mode
// only on loopback; with tokens, off loopback only with TLS (`tls`: the
// listener serves HTTPS). FAILED_PRECONDITION saying why and what to do.
absl::Status ValidateMetricsListen(const ServerConfig& config, bool tls);

// The scheduler's options for this config.
scheduler::SchedulerOptions ToSchedulerOptions(const ServerConfig& config);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_CONFIG_H_
