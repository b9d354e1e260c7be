// File: server/server.h
//
// PodServer: a running ipupodd. Start() opens the durable store
// (store/SqliteStateStore in config.state_dir), brings its usage ledger up to
// date (server/accounting_upkeep.h: sessions a kill -9 left open end
// SERVER_RESTART), creates the scheduler with the store as its ledger, and
// serves PodService, PartitionService and SessionService (callback API),
// ExecutionService (sync API on a pool of config.max_execution_threads
// threads, bounded by a grpc::ResourceQuota; see server/execution_service.h),
// JobService, AccountingService and AuditService (the same pool, each with
// its own call bound; JobService's WatchJob on the callback API with its own
// watcher bound, server/job_watch.h),
// gRPC health checking and server reflection on config.listen (port 0 picks a
// free port; port() reports it). Sessions that end drop their loaded
// programs (scheduler's on_session_ended -> LoadedPrograms::Drop).
//
// HTTP (server/http/http_listener.h) on MetricsListenAddress(config), unless "off":
// GET /metrics, the Prometheus metrics (server/metrics/pod_metrics.h), behind the
// API's identity rules (with tokens, a token as Bearer or Basic password),
// and GET /healthz, "ok" without credentials (liveness). metrics_url() says
// where; the ready line ends with it.
//
// Liveness: HTTP/2 keepalive pings every lease/2 with a lease/2 timeout, so a
// client whose process died, whose connection dropped silently, or that is
// stopped (SIGSTOP) is disconnected, and its attach stream released, within
// about one lease. Attach streams also carry heartbeats every lease/2.
//
// Errors from Start (the caller prints them and exits 2):
//   INVALID_ARGUMENT / FAILED_PRECONDITION  bad config, open mode off loopback,
//                                           tokens off loopback without TLS,
//                                           a stored state that does not fit
//   NOT_FOUND / PERMISSION_DENIED /         a TLS file missing, unreadable,
//   INVALID_ARGUMENT / FAILED_PRECONDITION  malformed, mismatched or expired
//                                           (server/tls_files.h; checked first)
//   FAILED_PRECONDITION / DATA_LOSS         the store cannot be opened
//   UNAVAILABLE                             the address (or the metrics
//                                           listener's) cannot be bound
//
// Readiness: the gRPC address is bound first, by a StartingServer
// (server/starting_server.h) whose health service says NOT_SERVING and whose
// every other method is UNAVAILABLE "ipupodd is starting"; once the state is
// restored the real server takes the port over, with gRPC's default health
// service SERVING, until Shutdown sets it NOT_SERVING first of all.
//
// The audit log (server/audit_trail.h) records the server's start (once
// serving), its stop (at the end of Shutdown, the last record before the
// store closes) and each SIGHUP reload with its result.
//
// Thread safety: port(), Wait() and Shutdown() are safe from any thread.
// Shutdown() ends every attach stream with UNAVAILABLE, stops accepting
// calls, and waits up to kShutdownGrace for calls in flight; an execution
// call whose work ends in that time answers UNAVAILABLE "ipupodd is shutting
// down" (its session has ended: device memory does not outlive the server),
// and gRPC cancels what is still running after it. It is idempotent and the
// destructor calls it; the destructor then closes the store (WAL
// checkpointed, clean stop recorded).
#ifndef IPUPOD_SERVER_SERVER_H_
#define IPUPOD_SERVER_SERVER_H_

#include <atomic>
#include <memory>
#include <string>

#include <grpcpp/server.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "device/customop/library_registry.h"
#include "device/runtime/compute_gate.h"
#include "device/runtime/executable_cache.h"
#include "scheduler/accounting/background_ledger.h"
#include "scheduler/pod_events.h"
#include "scheduler/scheduler.h"
#include "server/accounting_service.h"
#include "server/accounting_upkeep.h"
#include "server/audit_service.h"
#include "server/audit_trail.h"
#include "server/batch/job_manager.h"
#include "server/compile_service.h"
#include "server/config.h"
#include "server/execution/loaded_programs.h"
#include "server/execution/memory_budget.h"
#include "server/execution/remote_compile.h"
#include "server/execution/session_execution.h"
#include "server/execution_service.h"
#include "server/http/http_listener.h"
#include "server/job_service.h"
#include "server/jobs/blob_store.h"
#include "server/metrics/pod_metrics.h"
#include "server/service_env.h"
#include "server/services.h"
#include "server/starting_server.h"
#include "server/status_routes.h"
#include "server/store/sqlite_state_store.h"
#include "server/stream_ticker.h"
#include "server/tls_files.h"

namespace ipupod::server {

class PodServer {
 public:
  static constexpr absl::Duration kShutdownGrace = absl::Seconds(3);

  static absl::StatusOr<std::unique_ptr<PodServer>> Start(ServerConfig config);
  ~PodServer();
  PodServer(const PodServer&) = delete;
  PodServer& operator=(const PodServer&) = delete;

  // The bound port (never 0 once started).
  int port() const { return port_; }
  // host:port as bound, e.g. "127.0.0.1:41234" or "[::1]:41234".
  const std::string& address() const { return address_; }
  const ServerConfig& config() const { return config_; }
  // Steps holding the compute gate now (device/runtime/compute_gate.h): what tests
  // wait for before they queue another step behind one.
  int ComputeStepsRunning() const { return compute_->running(); }
  // The listeners' TLS material, read and checked at start (empty without TLS).
  const TlsMaterial& tls() const { return tls_; }
  // "ipupodd listening on 127.0.0.1:41234 (POD16, 16 IPUs, open mode);
  // http://127.0.0.1:41235 serves the status page, /metrics and /healthz" (no "; ..." when
  // metrics_listen is "off"); "(..., token mode, TLS)" or "mutual TLS" and
  // https:// with TLS.
  std::string ReadyLine() const;
  // "http://127.0.0.1:41235" (https with TLS); "" when off.
  std::string metrics_url() const;

  // SIGHUP: re-reads config().config_path and puts its sharing section in
  // force. Any error (no file, one that is not a regular file or is over
  // kConfigFileBytesMax, a malformed or invalid config) is returned and
  // changes nothing; sessions and waiters carry on either way. Other keys
  // (tokens among them) take effect at the next start: the log (a warning)
  // and the audit record's details name the keys it applied and those that
  // changed in the file since the start but wait for a restart. Audited
  // (config.reload by "SIGHUP").
  absl::Status ReloadSharing();

  // Blocks until Shutdown() has completed.
  void Wait();
  // `reason` goes into the server.stop audit record ("received SIGTERM").
  void Shutdown(absl::string_view reason = "shutdown requested");

 private:
  explicit PodServer(ServerConfig config);
  absl::Status Init();
  absl::Status StartStarting();
  absl::Status BuildGrpcServer();
  absl::Status StartJobs();
  // Puts the file's sharing section in force; `changes` says what changed.
  absl::Status LoadSharing(ConfigChanges* changes);
  // A record of the server's own action (start, stop, reload).
  void AuditServer(absl::string_view user, absl::string_view action, absl::string_view target,
                   std::string details, const absl::Status& status);
  void CreateServices();
  absl::Status StartHttp();
  StatusSources StatusSourcesOf() const;

  const ServerConfig config_;
  TlsMaterial tls_;
  // Before everything that reports to it (the scheduler's events, the
  // compute gate's waits, the RPC interceptor), so it outlives them.
  std::unique_ptr<metrics::PodMetrics> metrics_;
  // The status page's recent faults, resets and repairs, told by the
  // scheduler beside the metrics (events_ hands each event to both).
  status::RecentEvents recent_events_;
  std::unique_ptr<scheduler::PodEventFanout> events_;
  // Destroyed in reverse order: the gRPC server (and every RPC) goes first,
  // the store last. programs_ outlives the scheduler, which calls it when
  // sessions end (also from its destructor).
  std::unique_ptr<store::SqliteStateStore> store_;
  // The audit log's writer, over store_; goes after everything that records.
  std::unique_ptr<AuditTrail> audit_;
  // The usage ledger's heartbeat and retention; stopped after the scheduler
  // has closed its sessions' records.
  std::unique_ptr<AccountingUpkeep> accounting_;
  // Sessions' usage records, written in the background so that no attach or
  // release waits for their commits (scheduler/accounting/background_ledger.h); the
  // scheduler writes and the reports read through it. Stopped (drained)
  // after the scheduler's shutdown closed its sessions' records.
  std::unique_ptr<accounting::BackgroundLedger> ledger_;
  std::unique_ptr<runtime::ExecutableCache> cache_;
  // outlives programs_, whose states hold charges
  std::unique_ptr<execution::MemoryBudget> load_memory_;
  // Runs custom op libraries in helper processes (device/customop/library_registry.h); before
  // programs_, which may hold its libraries' processes.
  std::unique_ptr<customop::LibraryRegistry> custom_ops_;
  std::unique_ptr<execution::LoadedPrograms> programs_;
  std::unique_ptr<runtime::ComputeGate> compute_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::unique_ptr<execution::SessionExecution> execution_;
  std::unique_ptr<execution::RemoteCompiler> compiler_;
  // Batch jobs: the manager goes before everything it uses.
  std::unique_ptr<jobs::BlobStore> blobs_;
  std::unique_ptr<batch::JobManager> jobs_;
  std::unique_ptr<StreamTicker> ticker_;
  ServiceEnv env_;
  std::unique_ptr<PodServiceImpl> pod_service_;
  std::unique_ptr<PartitionServiceImpl> partition_service_;
  std::unique_ptr<SessionServiceImpl> session_service_;
  std::unique_ptr<ExecutionServiceImpl> execution_service_;
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<AccountingServiceImpl> accounting_service_;
  std::unique_ptr<AuditServiceImpl> audit_service_;
  std::unique_ptr<CompileServiceImpl> compile_service_;
  // The address while the state is restored; stopped by BuildGrpcServer.
  std::unique_ptr<StartingServer> starting_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  const absl::Time started_ = absl::Now();
  std::unique_ptr<StatusRoutes> status_routes_;
  // Last: it reads the scheduler, jobs, cache, metrics and status routes
  // while it serves, so it stops first.
  std::unique_ptr<http::HttpListener> http_;

  std::atomic<bool> shutting_down_{false};  // ServiceEnv::shutting_down points here
  // The config file's keys in force (ServerConfig::file_keys): those read at
  // the start, with the reloadable ones as the last reload applied them.
  absl::Mutex reload_mu_;
  std::map<std::string, std::string> file_keys_ ABSL_GUARDED_BY(reload_mu_);
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_SERVER_H_
