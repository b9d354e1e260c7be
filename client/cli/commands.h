// File: client/cli/commands.h
//
// The command groups of `ipupod`, one file each:
//   info.cc       info
//   partition.cc  partition create|list|show|remove|reset
//   session.cc    attach, detach, queue, session show|reset (attach itself in
//                 attach.cc: signals, the child command)
//   admin.cc      ipu reset|repair, pod reset, fault inject
//   compile.cc    compile (offline: ONNX -> .ipx), inspect (offline: an .ipx)
//   run.cc        run (upload, load, weights, steps, outputs)
//   submit.cc     submit (a batch job: upload its files, submit, return)
//   jobs.cc       jobs, job show|logs|cancel|hold|release|delete|wait|fetch
//   sharing.cc    priority, shares (how the queue is ordered)
//   accounting.cc usage, history (the usage ledger: sreport, sacct)
//   audit.cc      audit (the server's audit log, admins only)
// Each Add*Commands registers its subcommands on the CLI11 app; the one the
// user names records its runner in the Selection, and app.cc runs it after
// the whole command line (including global options after it) was parsed.
//
// Thread safety: registration and running happen on the main thread.
#ifndef IPUPOD_CLIENT_CLI_COMMANDS_H_
#define IPUPOD_CLIENT_CLI_COMMANDS_H_

#include <string>

#include <CLI/CLI.hpp>

#include "client/cli/context.h"

namespace ipupod::cli {

struct Selection {
  std::string path;            // "partition create"
  bool takes_command = false;  // accepts `-- COMMAND ARGS...`
  Runner run;
};

// Makes `sub` record `run` (under `path`) in `selection` when it is parsed.
void OnSelected(CLI::App* sub, Selection& selection, std::string path, Runner run,
                bool takes_command = false);

void AddInfoCommand(CLI::App& app, Selection& selection);
void AddPartitionCommands(CLI::App& app, Selection& selection);
void AddSessionCommands(CLI::App& app, Selection& selection);
void AddAdminCommands(CLI::App& app, Selection& selection);
void AddCompileCommand(CLI::App& app, Selection& selection);
void AddInspectCommand(CLI::App& app, Selection& selection);
void AddRunCommand(CLI::App& app, Selection& selection);
void AddSubmitCommand(CLI::App& app, Selection& selection);
void AddJobsCommands(CLI::App& app, Selection& selection);
void AddSharingCommands(CLI::App& app, Selection& selection);
void AddAccountingCommands(CLI::App& app, Selection& selection);
void AddAuditCommand(CLI::App& app, Selection& selection);

// attach (attach.cc), registered by AddSessionCommands.
void AddAttachCommand(CLI::App& app, Selection& selection);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_COMMANDS_H_
