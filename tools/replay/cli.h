// File: tools/replay/cli.h
//
// The `ipupod-replay` command line as a library (tools/replay/main.cc only calls
// it, tests call it in-process): reads a trace, selects from it, replays the
// selection through the real Scheduler under each policy asked for, and
// prints a table (or JSON) on `out` and writes the plot. Progress and wall
// times go to `err`. `--help` describes every option with examples.
//
// Exit codes: 0 done; 1 the replay failed (the error on `err`: a bad trace,
// an unreadable file, a scheduler refusal); 2 usage (bad flags or values:
// the message names the flag and what to use).
//
// Thread safety: one call at a time per process (it sets spdlog's level so
// the scheduler's log lines do not mix with the output).
#ifndef IPUPOD_REPLAY_CLI_H_
#define IPUPOD_REPLAY_CLI_H_

#include <ostream>

namespace ipupod::replay {

int RunReplayCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace ipupod::replay

#endif  // IPUPOD_REPLAY_CLI_H_
