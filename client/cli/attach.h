// File: client/cli/attach.h
//
// The pure parts of `ipupod attach`, exposed for tests: request building
// (with validation of the numbers given on the command line), the client
// label shown in `ipupod queue` / `ipupod info`, and the environment a
// COMMAND runs with; and the wait for a grant that `ipupod run` shares. The
// command itself is registered by AddAttachCommand (client/cli/commands.h).
//
// Thread safety: pure functions.
#ifndef IPUPOD_CLIENT_CLI_ATTACH_H_
#define IPUPOD_CLIENT_CLI_ATTACH_H_

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/child_process.h"
#include "client/cli/context.h"
#include "client/cli/signal_watcher.h"
#include "client/client.h"

namespace ipupod::cli {

struct AttachArgs {
  std::string ipus;          // --ipus N
  std::string partition;     // --partition P
  bool wait = false;         // --wait
  std::string wait_timeout;  // --wait-timeout S (implies --wait)
  bool auto_round = false;   // --auto-round
  std::string account;       // --account A ("" = the default)
  std::string qos;           // --qos Q ("" = normal)
  std::string time_limit;    // --time-limit DURATION (lets backfill start it sooner)
};

// Registers --account, --qos and --time-limit (shared by attach and run).
void AddAssociationOptions(CLI::App* command, AttachArgs& args);

// INVALID_ARGUMENT (a usage error) for a bad --ipus, --wait-timeout or
// --time-limit.
absl::StatusOr<v1::AttachRequest> BuildAttachRequest(const AttachArgs& args,
                                                     absl::string_view client_label);

// "HOST pid PID: PROGRAM" (the command's file name, never its arguments; or
// "HOST pid PID: hold"), at most 200 bytes. The server shows it to the
// session's owner and admins only.
std::string ClientLabel(absl::string_view host, int pid, const std::vector<std::string>& command);

// IPUPOD_SESSION, IPUPOD_SERVER, IPUPOD_IPUS ("4,5,6,7"), IPUPOD_DEVICE_ID,
// IPUPOD_USER and, when set, IPUPOD_TOKEN and IPUPOD_TLS_CA, IPUPOD_TLS_CERT,
// IPUPOD_TLS_KEY (as absolute paths): what COMMAND needs to use the session
// as the same user over the same kind of connection.
ChildProcess::EnvVars SessionEnvironment(const client::ClientOptions& options,
                                         const v1::SessionInfo& session);

// This machine's host name ("localhost" if it has none), for ClientLabel.
std::string HostName();

// Waits for `call`'s grant, showing queue positions as notes (stderr);
// SIGINT/SIGTERM cancel the wait at once (the result is then CANCELLED and
// signals.Interrupted() is true).
absl::StatusOr<v1::SessionInfo> AwaitGrant(Context& ctx, client::AttachCall& call,
                                           SignalWatcher& signals);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_ATTACH_H_
