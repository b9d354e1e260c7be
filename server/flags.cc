#include "server/flags.h"

#include <cstdint>
#include <utility>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ipupod::server {
namespace {

constexpr const char* kDescription =
    "ipupodd: a simulated Graphcore IPU pod (GC200 IPUs) shared among users over gRPC.\n"
    "Users attach to IPUs (waiting in a queue when needed), create partitions, and\n"
    "recover from injected faults with the ipupod CLI.";

constexpr const char* kFooter = R"(
Examples:
  ipupodd                                   # POD16 on 127.0.0.1:50051, open mode
  ipupodd --pod POD64 --listen 127.0.0.1:0  # ephemeral port, printed when ready
  ipupodd --config /etc/ipupod/ipupodd.json --log-level debug

Config file (JSON; every key optional; flags win over it):
  {"listen": "0.0.0.0:50051", "pod": "POD16", "state_dir": "/var/lib/ipupod",
   "tokens": [{"token": "s3cret-alice", "user": "alice", "role": "user"},
              {"token": "s3cret-ops", "user": "ops", "role": "admin"}],
   "session_lease_seconds": 10, "max_waiters": 4096,
   "executable_cache_mb": 4096, "max_execution_threads": 8, "load_memory_mb": 0,
   "max_execution_threads_per_user": 4, "execution_stream_idle_seconds": 30,
   "reset_ms": {"ipu": 200, "partition": 500, "pod": 1000},
   "random_faults": {"seed": 1, "probability_per_operation": 0.01,
                     "kinds": ["ipu-reset", "link-reset", "unrecoverable"]},
   "open_mode_admins": ["admin"], "log_level": "info", "log_format": "text",
   "audit_retention_days": 365, "audit_max_records": 1000000,
   "tls": {"cert": "/etc/ipupod/server.pem", "key": "/etc/ipupod/server.key"}}

Without "tokens" the server runs in open mode: it listens on loopback only and
trusts the user name each client sends (users named in open_mode_admins are
admins). With tokens, clients send `authorization: Bearer <token>`; off loopback
that needs TLS, so tokens never cross the network in clear text:
  ipupodd --config ipupodd.json --listen 0.0.0.0:50051 \
          --tls-cert server.pem --tls-key server.key [--tls-client-ca clients-ca.pem]
  ("tls": {"cert": ..., "key": ..., "client_ca": ...} in the config; clients pass
  --tls-ca CA.pem. docs/configuration.md, "Transport security", makes the files.)

When ready, ipupodd prints one line on stdout:
  ipupodd listening on 127.0.0.1:50051 (POD16, 16 IPUs, open mode); http://127.0.0.1:9464 serves the status page, /metrics and /healthz
(with TLS the first part ends in ", TLS" or ", mutual TLS", and the listener
serves https://). Prometheus scrapes http://127.0.0.1:9464/metrics
(docs/operations.md); with tokens it sends one as `authorization: Bearer`.
SIGINT or SIGTERM shuts it down gracefully. Exit code 2: bad configuration (an
unreadable, malformed or expired TLS certificate or key, a key that does not
match its certificate, a metrics port in use), or a
state dir that has held a pod's state and lost it (state.db deleted, emptied or
without its write-ahead log): restore it, or pass --reinitialise once to start a
new, empty pod deliberately.)";

struct Overrides {
  std::string config_path;
  std::optional<std::string> listen;
  std::optional<std::string> pod;
  std::optional<std::string> state_dir;
  std::optional<std::string> log_level;
  std::optional<int> lease_seconds;
  std::optional<int64_t> executable_cache_mb;
  std::optional<int> max_execution_threads;
  std::optional<int> max_execution_threads_per_user;
  std::optional<int> execution_stream_idle_seconds;
  std::optional<int64_t> upload_min_bytes_per_second;
  std::optional<int> compute_threads;
  std::optional<int64_t> load_memory_mb;
  std::optional<std::string> log_format;
  std::optional<std::string> metrics_listen;
  bool reinitialise = false;
  // TLS files (server/tls_files.h).
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
  std::optional<std::string> tls_client_ca;
};

void AddTlsFlags(CLI::App& app, Overrides& o) {
  app.add_option("--tls-cert", o.tls_cert,
                 "serve TLS with this PEM certificate (chain); needs --tls-key. Required "
                 "with tokens off loopback")
      ->type_name("FILE");
  app.add_option("--tls-key", o.tls_key, "the PEM private key of --tls-cert (unencrypted)")
      ->type_name("FILE");
  app.add_option("--tls-client-ca", o.tls_client_ca,
                 "mutual TLS: accept only clients whose certificate this PEM CA bundle signed")
      ->type_name("FILE");
}

void AddFlags(CLI::App& app, Overrides& o) {
  app.add_option("--config", o.config_path, "JSON config file (keys below)")->type_name("FILE");
  app.add_option("--listen", o.listen, "address to serve on, host:port (port 0 = any free)")
      ->type_name("ADDR");
  app.add_option("--pod", o.pod, "pod to simulate: POD4, POD16, POD64 or an IPU count")
      ->type_name("NAME|N");
  app.add_option("--state-dir", o.state_dir, "directory for the durable state (state.db)")
      ->type_name("DIR");
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error, critical, off")
      ->type_name("LEVEL");
  app.add_option("--log-format", o.log_format,
                 "text (default) or json: every stderr line one JSON object, e.g. "
                 "{\"time\":...,\"level\":\"info\",\"event\":\"rpc\",\"user\":...}")
      ->type_name("FORMAT");
  app.add_option("--lease-seconds", o.lease_seconds,
                 "a silent client loses its session after this long (1-3600)")
      ->type_name("N");
  app.add_option("--executable-cache-mb", o.executable_cache_mb,
                 "megabytes of uploaded executables kept, least recently used evicted first "
                 "(default 4096)")
      ->type_name("MB");
  app.add_option("--max-execution-threads", o.max_execution_threads,
                 "uploads, loads, weight transfers and runs served at once (default 8, min 1)")
      ->type_name("N");
  app.add_option("--max-execution-threads-per-user", o.max_execution_threads_per_user,
                 "of those, the most one user may hold (default 0: half of them, at least 1)")
      ->type_name("N");
  app.add_option("--execution-stream-idle-seconds", o.execution_stream_idle_seconds,
                 "an upload, weight transfer or run whose client sends nothing this long is "
                 "ended DEADLINE_EXCEEDED (default 30, 1-3600)")
      ->type_name("N");
  app.add_option("--upload-min-bytes-per-second", o.upload_min_bytes_per_second,
                 "an upload (blob, executable, weights) slower than this, once the server has "
                 "waited --execution-stream-idle-seconds for it, is ended DEADLINE_EXCEEDED "
                 "and what it reserved freed (default 16384, 0 = no bound)")
      ->type_name("N");
  app.add_option("--compute-threads", o.compute_threads,
                 "BLAS threads each run may use (default 0: every CPU of this host)")
      ->type_name("N");
  app.add_option("--load-memory-mb", o.load_memory_mb,
                 "megabytes of host memory all loaded programs may hold together; a load over "
                 "it is refused (default 0: half of this host's memory)")
      ->type_name("MB");
  app.add_option("--metrics-listen", o.metrics_listen,
                 "where to serve Prometheus metrics (/metrics) and liveness (/healthz) over "
                 "HTTP, host:port (default 127.0.0.1:9464; port 0 when --listen's port is 0; "
                 "off = none); needs loopback, or tokens and TLS")
      ->type_name("ADDR|off");
  app.add_flag("--reinitialise", o.reinitialise,
               "discard the state in --state-dir (partitions, failed IPUs) and start a new, "
               "empty pod; needed once after the state was lost, never for a normal start");
  AddTlsFlags(app, o);
  app.set_version_flag("--version", "ipupodd " IPUPOD_VERSION);
  app.footer(kFooter);
}

absl::Status ApplyOverrides(const Overrides& o, ServerConfig& config) {
  if (o.listen) {
    IPUPOD_RETURN_IF_ERROR(ParseListenAddress(*o.listen).status());
    config.listen = *o.listen;
  }
  if (o.pod) {
    IPUPOD_ASSIGN_OR_RETURN(config.pod, ParsePod(*o.pod));
  }
  if (o.state_dir) config.state_dir = *o.state_dir;
  if (o.log_level) {
    IPUPOD_RETURN_IF_ERROR(ValidateLogLevel(*o.log_level));
    config.log_level = *o.log_level;
  }
  if (o.log_format) {
    IPUPOD_ASSIGN_OR_RETURN(config.log_format, ParseLogFormat(*o.log_format));
  }
  if (o.lease_seconds) config.session_lease_seconds = *o.lease_seconds;
  if (o.executable_cache_mb) config.executable_cache_mb = *o.executable_cache_mb;
  if (o.max_execution_threads) config.max_execution_threads = *o.max_execution_threads;
  if (o.max_execution_threads_per_user) {
    config.max_execution_threads_per_user = *o.max_execution_threads_per_user;
  }
  if (o.execution_stream_idle_seconds) {
    config.execution_stream_idle_seconds = *o.execution_stream_idle_seconds;
  }
  if (o.upload_min_bytes_per_second) {
    config.upload_min_bytes_per_second = *o.upload_min_bytes_per_second;
  }
  if (o.compute_threads) config.compute_threads = *o.compute_threads;
  if (o.load_memory_mb) config.load_memory_mb = *o.load_memory_mb;
  if (o.metrics_listen) {
    if (*o.metrics_listen != "off") {
      IPUPOD_RETURN_IF_ERROR(ParseListenAddress(*o.metrics_listen).status());
    }
    config.metrics_listen = *o.metrics_listen;
  }
  config.reinitialise = o.reinitialise;
  if (o.tls_cert) config.tls.cert = *o.tls_cert;
  if (o.tls_key) config.tls.key = *o.tls_key;
  if (o.tls_client_ca) config.tls.client_ca = *o.tls_client_ca;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CLI::App app(kDescription, "ipupodd");
  Overrides overrides;
  AddFlags(app, overrides);
  CommandLine result;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result.print = app.help();
    return result;
  } catch (const CLI::CallForVersion&) {
    result.print = std::string("ipupodd ") + IPUPOD_VERSION + "\n";
    return result;
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(absl::StrCat(e.what(), "; see ipupodd --help"));
  }
  ServerConfig config;
  if (!overrides.config_path.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(config, LoadConfigFile(overrides.config_path));
    config.config_path = overrides.config_path;
  }
  IPUPOD_RETURN_IF_ERROR(ApplyOverrides(overrides, config));
  IPUPOD_RETURN_IF_ERROR(ValidateConfig(config));
  result.config = std::move(config);
  return result;
}

}  // namespace ipupod::server
