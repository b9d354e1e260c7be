#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "device/kernels/threads.h"
#include "scheduler/audit/audit_log.h"
#include "server/call_limit.h"
#include "server/request_parse_errors.h"
#include "server/rpc_metrics_interceptor.h"
#include "server/secret_files.h"
#include "server/starting_server.h"

namespace ipupod::server {
namespace {

// "tokens,max_waiters", or "none".
template <typename Keys>
std::string KeyList(const Keys& keys) {
  std::string list;
  for (const auto& key : keys) absl::StrAppend(&list, list.empty() ? "" : ",", key);
  return list.empty() ? "none" : list;
}

// The custom op resolver of the config's "custom_ops" (device/customop/library_registry.h): a
// call's CPU time is bounded at its wall time on every CPU.
absl::StatusOr<std::unique_ptr<customop::LibraryRegistry>> CustomOpRegistry(
    const CustomOpsConfig& config) {
  customop::RegistryOptions options;
  options.library_dirs = config.library_dirs;
  options.limits.host_binary = config.host.empty() ? customop::DefaultHostBinary() : config.host;
  options.limits.address_space_bytes = config.memory_mb << 20;
  options.limits.call_timeout = absl::Seconds(config.call_timeout_seconds);
  options.limits.cpu_seconds_per_call =
      int64_t{config.call_timeout_seconds} * std::max(1u, std::thread::hardware_concurrency());
  options.max_hosts = config.max_hosts;
  if (!config.library_dirs.empty()) {
    spdlog::info("custom op libraries from {} run in {}", absl::StrJoin(config.library_dirs, ", "),
                 options.limits.host_binary);
  }
  return customop::LibraryRegistry::Create(std::move(options));
}

// How often the ticker visits attach streams: fine enough for heartbeats
// every lease/2 and stall checks against the lease.
absl::Duration TickPeriod(absl::Duration lease) {
  return std::clamp(lease / 4, absl::Milliseconds(50), absl::Seconds(1));
}

void SetLivenessOptions(grpc::ServerBuilder& builder, absl::Duration lease) {
  int half_lease_ms = static_cast<int>(absl::ToInt64Milliseconds(lease / 2));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, half_lease_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, half_lease_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Clients ping too (to notice a dead server); let them, as often as each
  // second, without being told to calm down.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             std::min(half_lease_ms, 1000));
  // Never share a port with another process: two servers on one port would
  // split the clients between two pods.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

// AccountingService calls at once: each is one ledger query.
// AuditService calls at once (admins only): each is one page of the log.

// A second operation of one session waits this long for the first.
constexpr absl::Duration kOperationWait = absl::Seconds(30);

// gRPC's sync pool: one completion queue, one to two pollers.
constexpr int kMinPollers = 1;
constexpr int kMaxPollers = 2;
// Threads the quota holds beyond the calls CallLimit admits: the pollers,
// one to refuse a call over the limit, one still exiting after its call.
constexpr int kQuotaHeadroom = kMaxPollers + 2;

// ExecutionService's sync handlers run on gRPC's sync thread pool (the
// callback services do not use it). Its quota counts pollers and threads
// winding down after a call as well as handlers, so a quota equal to the
// calls allowed could refuse a lone client whose previous call's thread had
// not exited yet ("Server Threadpool Exhausted", with nothing logged).
// CallLimit (server/call_limit.h) is the bound clients meet; the quota sits
// above it and only caps threads under a burst. Two pollers let a thread that finishes a
// call go back to polling instead of exiting, so a client making calls one
// after another does not make a thread per call. SetInterceptors logs any
// call gRPC itself refuses.
void SetExecutionThreads(grpc::ServerBuilder& builder, int max_calls) {
  grpc::ResourceQuota quota("ipupodd-execution");
  quota.SetMaxThreads(max_calls + kQuotaHeadroom);
  builder.SetResourceQuota(quota);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, kMinPollers);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, kMaxPollers);
}

// The logger of gRPC's own thread-pool refusals, INVALID_ARGUMENT for
// requests that do not parse (server/request_parse_errors.h), and the RPC
// metrics, last so that they count the status the client gets.
void SetInterceptors(grpc::ServerBuilder& builder, metrics::RpcMetrics* rpcs) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<ThreadpoolRefusalLoggerFactory>());
  creators.push_back(std::make_unique<RequestParseErrorsFactory>());
  creators.push_back(std::make_unique<RpcMetricsFactory>(rpcs));
  builder.experimental().SetInterceptorCreators(std::move(creators));
}

// The metrics' options for this config: in open mode anyone names
// themselves, so the user labels are capped; with tokens the config bounds
// them.
metrics::PodMetricsOptions MetricsOptions(const ServerConfig& config) {
  metrics::PodMetricsOptions options;
  options.version = IPUPOD_VERSION;
  options.pod = config.pod.name;
  options.rpc_methods = KnownRpcMethods();
  options.user_labels_max = config.open_mode() ? metrics::kOpenModeUserLabelsMax : 0;
  return options;
}

// The HTTP listener's token check: the gRPC API's (server/auth.h).
http::TokenCheck HttpTokenCheck(const ServerConfig& config) {
  if (config.open_mode()) return nullptr;
  return [policy = AuthPolicy::FromConfig(config)](
             absl::string_view token) -> std::optional<http::HttpIdentity> {
    const TokenEntry* entry = FindToken(policy, token);
    if (entry == nullptr) return std::nullopt;
    return http::HttpIdentity{entry->user, entry->admin};
  };
}

absl::StatusOr<std::unique_ptr<store::SqliteStateStore>> OpenStore(const ServerConfig& config) {
  store::StoreOptions options;
  options.reinitialise = config.reinitialise;
  if (options.reinitialise) {
    spdlog::warn("--reinitialise: DISCARDING the state in '{}' and starting a NEW, EMPTY pod",
                 config.state_dir);
  }
  IPUPOD_ASSIGN_OR_RETURN(options.fault, store::WriteFaultFromEnvironment());
  if (options.fault) {
    spdlog::warn("{} is set: the state store will crash or fail at write point {} #{} (TEST-ONLY)",
                 store::kWriteFaultEnv, std::string(store::WritePointName(options.fault->point)),
                 options.fault->nth);
  }
  IPUPOD_ASSIGN_OR_RETURN(auto store, store::SqliteStateStore::Open(config.state_dir, options));
  spdlog::info("state store {}: pod {}", store->path(), store->pod_id());
  return store;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PodServer>> PodServer::Start(ServerConfig config) {
  IPUPOD_RETURN_IF_ERROR(ValidateConfig(config));
  // Before anything is opened: a bad certificate or key stops the start here.
  IPUPOD_ASSIGN_OR_RETURN(TlsMaterial tls, LoadTlsMaterial(config.tls));
  if (tls.enabled()) spdlog::info("TLS: {}", tls.summary);
  WarnAboutSecretFiles(config);
  std::unique_ptr<PodServer> server(new PodServer(std::move(config)));
  server->tls_ = std::move(tls);
  const absl::Status started = server->Init();
  if (server->audit_ != nullptr) {  // the store is open: a failed start is recorded too
    server->AuditServer(audit::kServerUser, audit::kServerStart, "server",
                        started.ok() ? server->ReadyLine() : "", started);
  }
  IPUPOD_RETURN_IF_ERROR(started);
  spdlog::info("{}", server->ReadyLine());
  return server;
}

PodServer::PodServer(ServerConfig config) : config_(std::move(config)) {
  sync::MutexLock lock(&reload_mu_);
  file_keys_ = config_.file_keys;
}

PodServer::~PodServer() {
  Shutdown();
  server_.reset();  // waits for every RPC; then the scheduler and store go
}

absl::Status PodServer::Init() {
  spdlog::set_level(spdlog::level::from_str(config_.log_level));
  const int threads =
      config_.compute_threads == 0 ? kernels::MaxBlasThreads() : config_.compute_threads;
  IPUPOD_RETURN_IF_ERROR(kernels::SetBlasThreads(threads));
  metrics_ = std::make_unique<metrics::PodMetrics>(MetricsOptions(config_));
  // As many steps compute at once as fit in the host's cores at `threads`
  // each; every sync thread may wait for one.
  compute_ = std::make_unique<runtime::ComputeGate>(
      std::max(1, kernels::MaxBlasThreads() / threads), config_.max_execution_threads,
      [metrics = metrics_.get()](absl::Duration waited) { metrics->ObserveComputeWait(waited); });
  IPUPOD_ASSIGN_OR_RETURN(custom_ops_, CustomOpRegistry(config_.custom_ops));
  IPUPOD_RETURN_IF_ERROR(StartStarting());  // NOT_SERVING until the state is restored
  IPUPOD_ASSIGN_OR_RETURN(store_, OpenStore(config_));
  audit_ = std::make_unique<AuditTrail>(store_.get(), nullptr,
                                        absl::Seconds(config_.audit_refusal_window_seconds));
  // Before the scheduler, which rebuilds fair-share usage from the ledger.
  AccountingUpkeepOptions upkeep;
  upkeep.heartbeat = absl::Seconds(config_.accounting_heartbeat_seconds);
  upkeep.retention = absl::Hours(24) * config_.accounting_retention_days;
  upkeep.audit_retention = absl::Hours(24) * config_.audit_retention_days;
  upkeep.audit_max_records = config_.audit_max_records;
  IPUPOD_ASSIGN_OR_RETURN(accounting_, AccountingUpkeep::Start(store_.get(), upkeep));
  cache_ = std::make_unique<runtime::ExecutableCache>(config_.executable_cache_mb << 20);
  load_memory_ = std::make_unique<execution::MemoryBudget>(
      config_.load_memory_mb > 0 ? config_.load_memory_mb << 20
                                 : execution::DefaultLoadMemoryBytes());
  programs_ = std::make_unique<execution::LoadedPrograms>(kOperationWait);
  scheduler::SchedulerOptions options = ToSchedulerOptions(config_);
  execution::LoadedPrograms* programs = programs_.get();
  options.on_session_ended = [programs](const std::string& session) { programs->Drop(session); };
  ledger_ = std::make_unique<accounting::BackgroundLedger>(
      store_.get(), accounting::BackgroundLedgerOptions{.on_error = [](const std::string& id,
                                                                       const absl::Status& error) {
        spdlog::error("scheduler: usage record of {} not written: {}", id, error.ToString());
      }});
  options.ledger = ledger_.get();
  events_ = std::make_unique<scheduler::PodEventFanout>(
      std::vector<scheduler::PodEventObserver*>{metrics_.get(), &recent_events_});
  options.events = events_.get();
  IPUPOD_ASSIGN_OR_RETURN(scheduler_,
                          scheduler::Scheduler::Create(std::move(options), store_.get()));
  execution_ = std::make_unique<execution::SessionExecution>(
      execution::ExecutionResources{scheduler_.get(), cache_.get(), programs_.get(),
                                    load_memory_.get(), compute_.get(), custom_ops_.get()});
  absl::Status jobs = StartJobs();
  if (!jobs.ok()) {
    scheduler_->Shutdown();
    return jobs;
  }
  CreateServices();
  metrics_->SetSources({scheduler_.get(), jobs_.get(), cache_.get(), &execution_->counters(),
                        compute_.get(), ledger_.get()});
  absl::Status status = BuildGrpcServer();
  if (status.ok()) status = StartHttp();
  if (!status.ok()) {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    jobs_->Shutdown();
    scheduler_->Shutdown();
    ticker_->Stop();
  }
  return status;
}

// The gRPC services, over what Init made.
void PodServer::CreateServices() {
  absl::Duration lease = absl::Seconds(config_.session_lease_seconds);
  ticker_ = std::make_unique<StreamTicker>(TickPeriod(lease));
  env_ = ServiceEnv{scheduler_.get(), AuthPolicy::FromConfig(config_),
                    config_.pod,      lease,
                    ticker_.get(),    absl::Seconds(config_.execution_stream_idle_seconds),
                    &shutting_down_};
  env_.audit = audit_.get();
  env_.upload_min_bytes_per_second = config_.upload_min_bytes_per_second;
  env_.usage_public = config_.accounting_public;
  pod_service_ = std::make_unique<PodServiceImpl>(env_);
  partition_service_ = std::make_unique<PartitionServiceImpl>(env_);
  session_service_ = std::make_unique<SessionServiceImpl>(env_);
  execution_service_ = std::make_unique<ExecutionServiceImpl>(
      env_, execution_.get(), config_.max_execution_threads, ExecutionThreadsPerUser(config_));
  job_service_ = std::make_unique<JobServiceImpl>(
      env_, blobs_.get(), jobs_.get(),
      JobServiceLimits{.max_calls = config_.jobs_max_calls,
                       .max_calls_per_user = config_.jobs_max_calls_per_user,
                       .max_watchers = config_.jobs_max_watchers,
                       .max_watchers_per_user = config_.jobs_max_watchers_per_user,
                       .watch_max = absl::Seconds(config_.jobs_watch_max_seconds)});
  accounting_service_ = std::make_unique<AccountingServiceImpl>(
      env_, ledger_.get(), config_.accounting_public, config_.accounting_max_calls,
      config_.accounting_max_calls_per_user);
  audit_service_ = std::make_unique<AuditServiceImpl>(env_, store_.get(), config_.audit_max_calls,
                                                      config_.audit_max_calls_per_user);
  compiler_ = std::make_unique<execution::RemoteCompiler>(
      execution::RemoteCompileLimits{
          .max_model_bytes = config_.compile_max_model_mb << 20,
          .time_limit = absl::Seconds(config_.compile_time_limit_seconds)},
      cache_.get(), load_memory_.get(), custom_ops_.get());
  compile_service_ = std::make_unique<CompileServiceImpl>(env_, blobs_.get(), compiler_.get(),
                                                          config_.compile_max_concurrent);
}

// GET /metrics, /healthz and the status page (/, /status.json) on the
// HTTP listener (nothing when "off"). A route more is one push_back.
absl::Status PodServer::StartHttp() {
  const std::string address = MetricsListenAddress(config_);
  if (address.empty()) return absl::OkStatus();
  IPUPOD_ASSIGN_OR_RETURN(ListenAddress listen, ParseListenAddress(address));
  http::HttpListenerOptions options;
  options.host = listen.host;
  options.port = listen.port;
  options.check_token = HttpTokenCheck(config_);
  // The gRPC listener's certificate and key: HTTPS only when TLS is on (the
  // client CA is the gRPC listener's; here the token is the identity).
  options.cert_pem = tls_.cert_pem;
  options.key_pem = tls_.key_pem;
  metrics::PodMetrics* metrics = metrics_.get();
  // Usage is private unless accounting_public (docs/accounting.md, "Who sees
  // what"): a user's token scrapes only their own per-user series. Open mode
  // serves loopback, whose users may all call themselves admins.
  const bool everyone = config_.open_mode() || config_.accounting_public;
  options.routes.push_back({"/metrics", [metrics, everyone](const http::HttpRequest& request) {
                              return http::HttpResponse{200, std::string(metrics::kContentType),
                                                        everyone || request.admin
                                                            ? metrics->Scrape()
                                                            : metrics->ScrapeFor(request.user)};
                            }});
  options.routes.push_back({"/healthz",
                            [](const http::HttpRequest&) {
                              return http::HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
                            },
                            /*public_route=*/true});
  status_routes_ = std::make_unique<StatusRoutes>(StatusSourcesOf());
  for (http::Route& route : status_routes_->Routes()) options.routes.push_back(std::move(route));
  absl::StatusOr<std::unique_ptr<http::HttpListener>> listener =
      http::HttpListener::Start(std::move(options));
  if (!listener.ok()) {
    return absl::Status(listener.status().code(),
                        absl::StrCat("the metrics listener (metrics_listen '", address,
                                     "'): ", listener.status().message(),
                                     "; pick another --metrics-listen ADDR, or \"off\""));
  }
  http_ = *std::move(listener);
  return absl::OkStatus();
}

// What the status page reads (server/status_routes.h).
StatusSources PodServer::StatusSourcesOf() const {
  StatusSources sources;
  sources.scheduler = scheduler_.get();
  sources.jobs = jobs_.get();
  sources.ledger = ledger_.get();
  sources.events = &recent_events_;
  sources.info =
      status::ServerInfo{IPUPOD_VERSION, address_, config_.open_mode() ? "open" : "token",
                         tls_.enabled(), absl::ToUnixMillis(started_)};
  sources.open_mode = config_.open_mode();
  sources.accounting_public = config_.accounting_public;
  return sources;
}

std::string PodServer::metrics_url() const { return http_ != nullptr ? http_->url() : ""; }

// The blob store under <state_dir>/blobs and the job manager, which resumes
// the jobs the last run left (server/batch/job_manager.h).
absl::Status PodServer::StartJobs() {
  const std::filesystem::path state_dir(config_.state_dir);
  jobs::BlobStoreLimits limits;
  limits.max_total_bytes = static_cast<uint64_t>(config_.jobs_blob_store_mb) << 20;
  limits.max_user_bytes = static_cast<uint64_t>(config_.jobs_blob_store_user_mb) << 20;
  IPUPOD_ASSIGN_OR_RETURN(blobs_, jobs::BlobStore::Open(state_dir / "blobs", limits));
  batch::JobManagerOptions options;
  options.jobs_dir = state_dir / "jobs";
  options.retention = absl::Hours(config_.jobs_retention_hours);
  options.default_time_limit = absl::Minutes(config_.jobs_default_time_limit_minutes);
  options.max_requeues = config_.jobs_max_requeues;
  options.max_jobs = config_.jobs_max_records;
  options.max_active_jobs_per_user = config_.jobs_max_active_per_user;
  options.ledger_retention = absl::Hours(24) * config_.accounting_retention_days;
  IPUPOD_ASSIGN_OR_RETURN(
      jobs_,
      batch::JobManager::Start(std::move(options), {scheduler_.get(), execution_.get(),
                                                    store_.get(), blobs_.get(), store_.get()}));
  return absl::OkStatus();
}

// Binds the address for the restore (server/starting_server.h); with the
// test-only restore delay, waits that long serving it.
absl::Status PodServer::StartStarting() {
  IPUPOD_ASSIGN_OR_RETURN(starting_,
                          StartingServer::Start(config_.listen, GrpcServerCredentials(tls_)));
  const char* delay = std::getenv(kRestoreDelayEnv);
  int delay_ms = 0;
  if (delay != nullptr && absl::SimpleAtoi(delay, &delay_ms) && delay_ms > 0) {
    spdlog::warn("{}={}: waiting before restoring the state (TEST-ONLY)", kRestoreDelayEnv,
                 delay_ms);
    absl::SleepFor(absl::Milliseconds(std::min(delay_ms, 60000)));
  }
  return absl::OkStatus();
}

absl::Status PodServer::BuildGrpcServer() {
  IPUPOD_ASSIGN_OR_RETURN(ListenAddress listen, ParseListenAddress(config_.listen));
  // The port the starting server holds (config_.listen's port 0 picked it).
  const std::string host = listen.ipv6 ? absl::StrCat("[", listen.host, "]") : listen.host;
  const std::string bind = absl::StrCat(host, ":", starting_->port());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(bind, GrpcServerCredentials(tls_), &port_);
  SetLivenessOptions(builder, env_.lease);
  builder.RegisterService(pod_service_.get());
  builder.RegisterService(partition_service_.get());
  builder.RegisterService(session_service_.get());
  builder.RegisterService(execution_service_.get());
  builder.RegisterService(job_service_.get());
  builder.RegisterService(accounting_service_.get());
  builder.RegisterService(audit_service_.get());
  builder.RegisterService(compile_service_.get());
  SetExecutionThreads(builder, config_.max_execution_threads + config_.jobs_max_calls +
                                   config_.accounting_max_calls + config_.audit_max_calls +
                                   config_.compile_max_concurrent);
  SetInterceptors(builder, &metrics_->rpcs());
  starting_->Stop();  // the state is restored: the port goes to the real server
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", bind,
                     " after restoring the state: another process took the port; start again"));
  }
  address_ = absl::StrCat(host, ":", port_);
  return absl::OkStatus();
}

std::string PodServer::ReadyLine() const {
  return absl::StrCat(
      "ipupodd listening on ", address_, " (", config_.pod.name, ", ", config_.pod.num_ipus,
      " IPUs, ", config_.open_mode() ? "open mode" : "token mode",
      !tls_.enabled()              ? ""
      : tls_.client_ca_pem.empty() ? ", TLS"
                                   : ", mutual TLS",
      ")",
      http_ != nullptr
          ? absl::StrCat("; ", http_->url(), " serves the status page, /metrics and /healthz")
          : "");
}

void PodServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

absl::Status PodServer::ReloadSharing() {
  ConfigChanges changes;
  const absl::Status reloaded = LoadSharing(&changes);
  const std::shared_ptr<const sharing::SharingPolicy> policy = scheduler_->policy();
  AuditServer(audit::kSighupUser, audit::kConfigReload,
              config_.config_path.empty() ? "-" : config_.config_path,
              reloaded.ok()
                  ? absl::StrCat("accounts=", policy->accounts.size(), " qos=", policy->qos.size(),
                                 " order=", sharing::QueueOrderName(policy->order),
                                 " applied=", KeyList(changes.applied),
                                 " restart_needed=", KeyList(changes.need_restart))
                  : "",
              reloaded);
  return reloaded;
}

void PodServer::AuditServer(absl::string_view user, absl::string_view action,
                            absl::string_view target, std::string details,
                            const absl::Status& status) {
  audit::AuditRecord record;
  record.user = std::string(user);
  record.action = std::string(action);
  record.target = std::string(target);
  record.details = std::move(details);
  audit::SetResult(record, status);
  (void)audit_->Record(std::move(record));
}

absl::Status PodServer::LoadSharing(ConfigChanges* changes) {
  if (config_.config_path.empty()) {
    return absl::FailedPreconditionError(
        "there is no config file to reload (the server was started without --config)");
  }
  IPUPOD_ASSIGN_OR_RETURN(ServerConfig fresh, LoadConfigFile(config_.config_path));
  IPUPOD_RETURN_IF_ERROR(
      scheduler_->SetPolicy(std::make_shared<const sharing::SharingPolicy>(fresh.sharing)));
  {
    sync::MutexLock lock(&reload_mu_);
    *changes = DiffConfigKeys(file_keys_, fresh.file_keys);
    for (absl::string_view key : kReloadableConfigKeys) {
      const std::string name(key);
      if (const auto it = fresh.file_keys.find(name); it != fresh.file_keys.end()) {
        file_keys_[name] = it->second;
      } else {
        file_keys_.erase(name);
      }
    }
  }
  spdlog::info("reloaded the sharing policy from {}: {} accounts, {} QoS, order {}",
               config_.config_path, fresh.sharing.accounts.size(), fresh.sharing.qos.size(),
               std::string(sharing::QueueOrderName(fresh.sharing.order)));
  if (!changes->need_restart.empty()) {
    spdlog::warn(
        "SIGHUP: {} changed in {} since the start, but a reload applies only {}: restart ipupodd "
        "to put {} in force (docs/configuration.md, \"Reloading\")",
        KeyList(changes->need_restart), config_.config_path, KeyList(kReloadableConfigKeys),
        changes->need_restart.size() == 1 ? "it" : "them");
  }
  return absl::OkStatus();
}

void PodServer::Shutdown(absl::string_view reason) {
  {
    sync::MutexLock lock(&shutdown_mu_);
    if (shut_down_ || server_ == nullptr) return;
    shut_down_ = true;
  }
  spdlog::info("shutting down");
  if (http_ != nullptr) http_->Stop();  // no scrape reads what is shutting down
  shutting_down_.store(true);           // execution calls ending from now on say so
  // Compiles, loads and steps in flight stop at their next interrupt point
  // (device/kernels/interrupt.h), within a fraction of a second, even inside one
  // long node: nothing below waits for them to finish their work.
  compiler_->Stop();
  execution_->Stop();
  if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
  jobs_->Shutdown();       // running jobs stop after their step and resume at the next start
  scheduler_->Shutdown();  // attach streams end UNAVAILABLE; queued resets complete
  ledger_->Stop();         // the sessions' records, closed SHUTDOWN, written
  accounting_->Stop();     // after the sessions' records closed SHUTDOWN: a last heartbeat
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(kShutdownGrace));
  ticker_->Stop();
  spdlog::info("calls ended");
  // The last records: the refusals counted but not yet summarised, then
  // the stop, after every action answered (queued resets completed with the
  // scheduler's shutdown).
  audit_->Stop();
  AuditServer(audit::kServerUser, audit::kServerStop, "server", std::string(reason),
              absl::OkStatus());
}

}  // namespace ipupod::server
