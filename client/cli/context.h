// File: client/cli/context.h
//
// What every `ipupod` command gets: the resolved global options, the output
// streams, and the helpers that keep output rules in one place:
//   * Print: the result as one JSON line (--json) or as text, on stdout;
//   * Fail: the error as "error: ..." text on stderr, or as the single
//     {"error": ...} JSON document on stdout; returns the exit code;
//   * UsageError: a bad command-line value (exit code 2), never sent to the
//     server.
//
// Thread safety: used by the command's thread only (attach's watcher thread
// never touches it).
#ifndef IPUPOD_CLIENT_CLI_CONTEXT_H_
#define IPUPOD_CLIENT_CLI_CONTEXT_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/args.h"
#include "client/cli/output.h"
#include "client/client.h"

namespace ipupod::cli {

class Context {
 public:
  Context(std::ostream& out, std::ostream& err, EnvLookup env);
  // Shuts gRPC down synchronously if Connect() started it (see Connect).
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }
  bool json() const { return flags_.json; }
  const EnvLookup& env() const { return env_; }

  GlobalFlags& flags() { return flags_; }
  // Set by the app after parsing (validated).
  void set_options(client::ClientOptions options) { options_ = std::move(options); }
  const client::ClientOptions& options() const { return options_; }
  // The words after `--` (attach's COMMAND).
  void set_command(std::vector<std::string> command) { command_ = std::move(command); }
  const std::vector<std::string>& command() const { return command_; }
  // "partition create": names the command in usage hints.
  void set_command_path(std::string path) { command_path_ = std::move(path); }

  // A client for the resolved options. The first call takes a gRPC library
  // reference that ~Context drops with grpc_shutdown_blocking, so no gRPC
  // thread outlives the command (REQUIRES: every Client is gone by then). It
  // runs after attach blocked its signals, so gRPC's threads inherit the mask.
  // gRPC's own log lines on stderr are dropped unless $GRPC_VERBOSITY is set:
  // the command's error says the same in words. The client library's errors
  // come back as they are (a clear-text token refused, a TLS file that is
  // missing or malformed).
  absl::StatusOr<std::unique_ptr<client::Client>> Connect();

  // Writes `doc` (json mode) or `text` to stdout; returns kExitOk.
  int Print(const Json& doc, absl::string_view text);
  // The same, building only the form it prints (lists of thousands).
  int Print(const std::function<Json()>& doc, const std::function<std::string()>& text);
  // Reports `status` (not OK) on stdout as JSON or on stderr as text.
  int Fail(const absl::Status& status, const HintContext& hint = {});
  // Reports a status after a JSON document was already printed on stdout:
  // JSON goes to stderr instead, keeping stdout a single document.
  int FailLate(const absl::Status& status, const HintContext& hint = {});
  // A usage error: exit code 2.
  int UsageError(absl::string_view message);
  // A progress or status note on stderr: text, or its JSON line in json mode
  // (a null `doc` prints nothing in json mode).
  void Note(const Json& doc, absl::string_view text);

 private:
  std::ostream& out_;
  std::ostream& err_;
  EnvLookup env_;
  GlobalFlags flags_;
  client::ClientOptions options_;
  std::vector<std::string> command_;
  std::string command_path_;
  bool grpc_started_ = false;
};

// A command to run once parsing is complete.
using Runner = std::function<int(Context&)>;

// Runs `run`; an exception that escapes it (std::bad_alloc, another
// std::exception, anything) is the last-resort INTERNAL error: reported
// through ctx.Fail (the JSON error document with --json) with exit code 1
// (kExitOther), never an abort.
int RunGuarded(Context& ctx, const Runner& run);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_CONTEXT_H_
