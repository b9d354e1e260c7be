// File: client/cli/app.h
//
// The `ipupod` command line: global options, the command groups of
// client/cli/commands.h, usage errors (exit code 2, never CLI11's own codes)
// and the dispatch to the chosen command. client/main.cc tunes malloc, then calls RunCli.
//
// Global options may come before or after the command:
//   --server HOST:PORT  ($IPUPOD_SERVER, else 127.0.0.1:50051)
//   --token TOKEN       ($IPUPOD_TOKEN)
//   --user NAME         ($IPUPOD_USER, else $USER, else "nobody"; open mode)
//   --json              one JSON document on stdout
//   --timeout SECONDS   deadline of each call (default 30)
// Everything after the first `--` is attach's COMMAND.
//
// Thread safety: call from the main thread (attach blocks signals in it).
#ifndef IPUPOD_CLIENT_CLI_APP_H_
#define IPUPOD_CLIENT_CLI_APP_H_

#include <ostream>

#include "client/cli/args.h"

namespace ipupod::cli {

// Runs `ipupod` with argv (argv[0] = program name); returns the exit code
// (client/cli/exit_codes.h). Output goes to `out` / `err` except a COMMAND's
// own output, which goes to the process's stdout / stderr.
int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
           const EnvLookup& env);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_APP_H_
