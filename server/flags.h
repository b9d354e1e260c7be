// File: server/flags.h
//
// ipupodd's command line (CLI11). Flags override the config file:
//   --config FILE        JSON config (server/config.h lists the keys)
//   --listen ADDR        host:port, e.g. 127.0.0.1:50051 ([::1]:PORT for IPv6)
//   --pod NAME|N         POD4, POD16, POD64 or a power-of-two IPU count
//   --state-dir DIR      where state.db lives
//   --reinitialise       discard the state in --state-dir and start a new pod
//   --log-level LEVEL    trace|debug|info|warn|error|critical|off
//   --log-format FORMAT  text|json (server/log_format.h)
//   --lease-seconds N    session lease (keepalive and heartbeats follow it)
//   --executable-cache-mb MB      uploaded executables kept (default 4096)
//   --load-memory-mb MB           host memory for loaded programs (default 0: half the RAM)
//   --max-execution-threads N     ExecutionService calls at once (default 8, min 1)
//   --metrics-listen ADDR|off     HTTP: /metrics and /healthz (default 127.0.0.1:9464)
//   --help, --version
//
// Thread safety: pure function.
#ifndef IPUPOD_SERVER_FLAGS_H_
#define IPUPOD_SERVER_FLAGS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/config.h"

namespace ipupod::server {

// What the command line asks for: a validated config to serve with, or text
// to print and exit 0 (--help, --version).
struct CommandLine {
  std::optional<ServerConfig> config;
  std::string print;
};

// INVALID_ARGUMENT for a bad flag or config value, NOT_FOUND for a missing
// config file, FAILED_PRECONDITION for open mode on a non-loopback address.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_FLAGS_H_
