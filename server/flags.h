// File: server/flags.h
//
// ipupodd's command line (CLI11). Flags override the config file:
//   --config FILE        JSON config (server/config.h lists the keys)
//   one flag per setting of server/settings.h (--listen, --pod, --lease-seconds,
//     --max-execution-threads, ...): its config key with dashes, help, range and default
//   --reinitialise       discard the state in --state-dir and start a new pod
//   --tls-cert FILE, --tls-key FILE, --tls-client-ca FILE   the "tls" object
//   --print-settings markdown|json   the settings table of docs/configuration.md, or
//                        deploy/ipupodd.json (every setting at its default)
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
// to print and exit 0 (--help, --version, --print-settings).
struct CommandLine {
  std::optional<ServerConfig> config;
  std::string print;
};

// INVALID_ARGUMENT for a bad flag or config value (server/settings.h's wording), NOT_FOUND for a
// missing config file, FAILED_PRECONDITION for open mode on a non-loopback address.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_FLAGS_H_
