// File: server/daemon.h
//
// RunDaemon: the whole of ipupodd's main(). It installs the shutdown signal
// handling (server/shutdown_signals.h) before any thread of its own starts,
// sets up logging (stderr, through a bounded queue drained by one thread),
// parses flags and config (server/flags.h), puts the log format in force
// (text or json, server/log_format.h), starts the PodServer, prints the
// ready line on stdout, and on SIGINT or SIGTERM shuts it down in order:
// attach streams and calls in flight end UNAVAILABLE "the server is shutting
// down", the state store checkpoints and records a clean stop, the log queue
// is flushed, and the last line logged is "stopped".
//
// Thread safety: call once per process, from main().
// Returns the exit code: 0 after a signal or --help/--version; 2 when the
// server cannot start (one line on stderr saying why).
#ifndef IPUPOD_SERVER_DAEMON_H_
#define IPUPOD_SERVER_DAEMON_H_

namespace ipupod::server {

inline constexpr int kExitBadStart = 2;

int RunDaemon(int argc, const char* const* argv);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_DAEMON_H_
