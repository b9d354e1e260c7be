#include "server/flags.h"

#include <cstdint>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/settings.h"

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

Config file (JSON; every key optional; flags win over it): each flag above but
--config, --reinitialise and --tls-* sets the config key it names; the structured
keys have no flag, e.g.
  {"listen": "0.0.0.0:50051", "pod": "POD16", "state_dir": "/var/lib/ipupod",
   "tokens": [{"token": "s3cret-alice", "user": "alice", "role": "user"},
              {"token": "s3cret-ops", "user": "ops", "role": "admin"}],
   "reset_ms": {"ipu": 200, "partition": 500, "pod": 1000},
   "random_faults": {"seed": 1, "probability_per_operation": 0.01,
                     "kinds": ["ipu-reset", "link-reset", "unrecoverable"]},
   "open_mode_admins": ["admin"],
   "tls": {"cert": "/etc/ipupod/server.pem", "key": "/etc/ipupod/server.key"}}
docs/configuration.md lists every key; ipupodd --print-settings json prints a
config with every setting at its default.

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
  // One per row of Settings(), in its order: the flag's text if given.
  std::vector<std::optional<std::string>> settings =
      std::vector<std::optional<std::string>>(Settings().size());
  bool reinitialise = false;
  std::optional<std::string> print_settings;
  // TLS files (server/tls_files.h): keys of the "tls" object, not rows.
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
  const absl::Span<const Setting> settings = Settings();
  for (size_t i = 0; i < settings.size(); ++i) {
    app.add_option(std::string(settings[i].flag), o.settings[i], SettingHelp(settings[i]))
        ->type_name(std::string(settings[i].value_name));
  }
  app.add_flag("--reinitialise", o.reinitialise,
               "discard the state in --state-dir (partitions, failed IPUs) and start a new, "
               "empty pod; needed once after the state was lost, never for a normal start");
  AddTlsFlags(app, o);
  app.add_option("--print-settings", o.print_settings,
                 "print the settings as docs/configuration.md's table (markdown) or as a "
                 "config file with each at its default (json), and exit")
      ->type_name("markdown|json")
      ->check(CLI::IsMember({"markdown", "json"}));
  app.set_version_flag("--version", "ipupodd " IPUPOD_VERSION);
  app.footer(kFooter);
}

absl::Status ApplyOverrides(const Overrides& o, ServerConfig& config) {
  const absl::Span<const Setting> settings = Settings();
  for (size_t i = 0; i < settings.size(); ++i) {
    if (!o.settings[i]) continue;
    IPUPOD_RETURN_IF_ERROR(ApplySettingFlag(settings[i], *o.settings[i], config));
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
  if (overrides.print_settings) {
    result.print =
        *overrides.print_settings == "json" ? RenderDefaultConfig() : RenderSettingsTable();
    return result;
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
