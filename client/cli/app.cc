#include "client/cli/app.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/exit_codes.h"
#include "client/transport_security.h"

#ifndef IPUPOD_VERSION
#define IPUPOD_VERSION "dev"
#endif

namespace ipupod::cli {

void OnSelected(CLI::App* sub, Selection& selection, std::string path, Runner run,
                bool takes_command) {
  sub->callback([&selection, path = std::move(path), run = std::move(run), takes_command] {
    selection = Selection{path, takes_command, run};
  });
}

namespace {

constexpr const char* kFooter =
    "Global options go before or after the command. Environment: IPUPOD_SERVER,\n"
    "IPUPOD_TOKEN, IPUPOD_USER (else USER), IPUPOD_TLS_CA, IPUPOD_TLS_CERT,\n"
    "IPUPOD_TLS_KEY. Run `ipupod COMMAND --help` for details.\n"
    "\n"
    "TLS: --tls-ca CA.pem makes the connection TLS, trusting only that CA (the\n"
    "server's certificate must name the address in --server); --tls-cert and\n"
    "--tls-key add a client certificate for servers with mutual TLS. A token is\n"
    "never sent in clear text to an address that is not loopback: without\n"
    "--tls-ca that is a usage error (exit 2). A failed handshake (wrong CA, a\n"
    "certificate that does not name the address, a server without TLS) exits 4.\n"
    "\n"
    "Exit codes: 0 ok, 1 other, 2 usage, 3 not found, 4 permission/authentication,\n"
    "5 nothing free (resource exhausted), 6 timed out, 7 failed precondition,\n"
    "8 server unavailable, 9 invalid argument, 10 already exists, 11 session ended by\n"
    "someone else, 12 compile error, 20 IPU_RESET, 21 LINK_RESET, 22 PARTITION_RESET,\n"
    "23 FULL_RESET needed, 24 unrecoverable device error, 130 interrupted; `job wait`:\n"
    "30 job FAILED, 31 CANCELLED, 32 TIMEOUT, 33 still running when --timeout ran out.\n"
    "\n"
    "Examples:\n"
    "  ipupod info\n"
    "  ipupod partition create p1 --size 4\n"
    "  ipupod attach --ipus 4 --wait -- python train.py\n"
    "  ipupod compile model.onnx --ipu-config ipu_config.json -o model.ipx\n"
    "  ipupod inspect model.ipx\n"
    "  ipupod submit model.ipx --inputs data.npz --train --epochs 3 --time-limit 2h\n"
    "  ipupod jobs\n"
    "  ipupod priority    (why the queue is in its order; `ipupod shares` for usage)\n"
    "  ipupod usage --by account --since -7d    (IPU-hours; `ipupod history` lists records)\n"
    "  ipupod --user admin audit --since -1d    (who reset, repaired, injected faults...)\n"
    "  ipupod --json queue\n"
    "  ipupod --server pod.example.org:50051 --tls-ca ca.pem --token \"$TOKEN\" info";

void AddGlobalOptions(CLI::App& app, GlobalFlags& flags) {
  app.add_option("--server", flags.server,
                 "ipupodd address HOST:PORT (default: $IPUPOD_SERVER, else 127.0.0.1:50051)")
      ->type_name("HOST:PORT");
  app.add_option("--token", flags.token,
                 "Access token, sent as `authorization: Bearer` (default: $IPUPOD_TOKEN)")
      ->type_name("TOKEN");
  app.add_option("--user", flags.user,
                 "Your name when the server runs in open mode (default: $IPUPOD_USER, $USER)")
      ->type_name("NAME");
  app.add_flag("--json", flags.json, "Print one JSON document on stdout (errors too)");
  app.add_option("--timeout", flags.timeout, "Deadline of each server call in seconds (30)")
      ->type_name("SECONDS");
  app.add_option("--tls-ca", flags.tls_ca,
                 "Connect with TLS, trusting the CA certificate(s) in this PEM file "
                 "(default: $IPUPOD_TLS_CA)")
      ->type_name("FILE");
  app.add_option("--tls-cert", flags.tls_cert,
                 "Client certificate (PEM) for a server with mutual TLS; needs --tls-key "
                 "(default: $IPUPOD_TLS_CERT)")
      ->type_name("FILE");
  app.add_option("--tls-key", flags.tls_key,
                 "Private key (PEM) of --tls-cert (default: $IPUPOD_TLS_KEY)")
      ->type_name("FILE");
}

// Everything after the first "--" belongs to attach's COMMAND; CLI11 gets
// the rest, so COMMAND's own options are never taken for ours.
struct SplitArgs {
  std::vector<const char*> ours;
  std::vector<std::string> command;
  bool has_separator = false;
  bool json = false;  // --json seen among ours (for usage errors)
};

SplitArgs Split(int argc, const char* const* argv) {
  SplitArgs split;
  for (int i = 0; i < argc; ++i) {
    if (split.has_separator) {
      split.command.emplace_back(argv[i]);
    } else if (i > 0 && std::strcmp(argv[i], "--") == 0) {
      split.has_separator = true;
    } else {
      split.ours.push_back(argv[i]);
      if (std::strcmp(argv[i], "--json") == 0) split.json = true;
    }
  }
  return split;
}

// "partition create" for the deepest subcommand parsed so far.
std::string ParsedPath(CLI::App& app) {
  std::string path;
  CLI::App* current = &app;
  while (!current->get_subcommands().empty()) {
    current = current->get_subcommands().front();
    path = path.empty() ? current->get_name() : absl::StrCat(path, " ", current->get_name());
  }
  return path;
}

// The subcommand that was being parsed when parsing failed.
CLI::App* ParsedApp(CLI::App& app) {
  CLI::App* current = &app;
  while (!current->get_subcommands().empty()) current = current->get_subcommands().front();
  return current;
}

// CLI11's messages, made specific where a user is likely to go wrong.
std::string UsageMessage(const CLI::ParseError& e, CLI::App& app, const std::string& path) {
  CLI::App* parsed = ParsedApp(app);
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && path == "attach") {
    return absl::StrCat(e.what(),
                        "; to run a command, put it after --: "
                        "ipupod attach --ipus 2 -- python train.py");
  }
  // "A subcommand is required": name the word that is not a command.
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr &&
      parsed->get_require_subcommand_min() > 0 && parsed->get_subcommands().empty()) {
    std::vector<std::string> names;
    for (const CLI::App* sub : parsed->get_subcommands({})) names.push_back(sub->get_name());
    std::string prefix = path.empty() ? "ipupod" : absl::StrCat("ipupod ", path);
    for (const std::string& word : parsed->remaining()) {
      if (!word.empty() && word[0] != '-') {
        return absl::StrCat("unknown command '", word, "' for `", prefix,
                            "`; use one of: ", absl::StrJoin(names, ", "));
      }
    }
    return absl::StrCat("`", prefix, "` needs a command: one of ", absl::StrJoin(names, ", "));
  }
  return e.what();
}

// Commands that read and write local files only (compile without --remote).
bool IsOffline(absl::string_view path) { return path == "inspect" || path == "compile"; }

int Dispatch(Context& ctx, const Selection& selection, SplitArgs& split) {
  if (split.has_separator && !selection.takes_command) {
    return ctx.UsageError(absl::StrCat("`ipupod ", selection.path,
                                       "` takes no command after --; only `ipupod attach` does"));
  }
  if (split.has_separator && split.command.empty()) {
    return ctx.UsageError("no command after --; e.g. ipupod attach --ipus 2 -- python train.py");
  }
  absl::StatusOr<client::ClientOptions> options = ResolveClientOptions(ctx.flags(), ctx.env());
  if (!options.ok()) return ctx.UsageError(options.status().message());
  // A token for another machine in clear text is refused before anything is
  // sent, as a usage error; commands that never connect are not refused for
  // what $IPUPOD_SERVER and $IPUPOD_TOKEN say (`compile --remote` still is,
  // by the client library).
  if (!IsOffline(selection.path)) {
    if (absl::Status secure = client::CheckTransportSecurity(*options); !secure.ok()) {
      return ctx.UsageError(secure.message());
    }
  }
  ctx.set_options(*std::move(options));
  ctx.set_command(std::move(split.command));
  return RunGuarded(ctx, selection.run);
}

}  // namespace

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
           const EnvLookup& env) {
  SplitArgs split = Split(argc, argv);
  Context ctx(out, err, env);
  Selection selection;
  CLI::App app("ipupod: share a (simulated) Graphcore IPU pod through ipupodd", "ipupod");
  app.fallthrough();  // global options after the command (inherited by subcommands)
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ipupod ") + IPUPOD_VERSION);
  app.footer(kFooter);
  AddGlobalOptions(app, ctx.flags());
  AddInfoCommand(app, selection);
  AddPartitionCommands(app, selection);
  AddSessionCommands(app, selection);
  AddAdminCommands(app, selection);
  AddCompileCommand(app, selection);
  AddInspectCommand(app, selection);
  AddRunCommand(app, selection);
  AddSubmitCommand(app, selection);
  AddJobsCommands(app, selection);
  AddSharingCommands(app, selection);
  AddAccountingCommands(app, selection);
  AddAuditCommand(app, selection);
  try {
    app.parse(static_cast<int>(split.ours.size()), split.ours.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success))
      return app.exit(e, out, err);
    std::string path = ParsedPath(app);
    ctx.flags().json = split.json;
    ctx.set_command_path(path);
    return ctx.UsageError(UsageMessage(e, app, path));
  }
  ctx.set_command_path(selection.path);
  return Dispatch(ctx, selection, split);
}

}  // namespace ipupod::cli
