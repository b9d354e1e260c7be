// ipupodd: parses flags and config, starts PodServer, prints the ready line,
// and shuts down gracefully on SIGINT/SIGTERM. Startup errors print one line
// on stderr and exit 2.
#include <cstdio>
#include <iostream>
#include <thread>

#include <spdlog/async.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "server/flags.h"
#include "server/server.h"
#include <signal.h>

namespace {

constexpr int kExitBadStart = 2;
constexpr size_t kLogQueueMax = 8192;  // lines waiting for stderr

// Logs go to stderr (stdout carries only the ready line) through a bounded
// queue drained by one thread: a slow or stuck stderr reader costs old log
// lines, never a blocked request handler.
void ConfigureLogging() {
  spdlog::init_thread_pool(kLogQueueMax, 1);
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  spdlog::set_default_logger(std::make_shared<spdlog::async_logger>(
      "ipupodd", sink, spdlog::thread_pool(), spdlog::async_overflow_policy::overrun_oldest));
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ipupodd: %s\n", std::string(status.message()).c_str());
  return kExitBadStart;
}

}  // namespace

int main(int argc, char** argv) {
  // Block the shutdown signals in every thread (gRPC's included, so block
  // before starting it); one thread takes them with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed log pipe must not kill the server
  ConfigureLogging();

  auto command_line = ipupod::server::ParseCommandLine(argc, argv);
  if (!command_line.ok()) return Fail(command_line.status());
  if (!command_line->config) {
    std::cout << command_line->print << std::flush;
    return 0;
  }
  auto server = ipupod::server::PodServer::Start(*std::move(command_line->config));
  if (!server.ok()) return Fail(server.status());
  std::cout << (*server)->ReadyLine() << std::endl;  // endl flushes: tests wait for it

  ipupod::server::PodServer* pod_server = server->get();
  std::thread waiter([&signals, pod_server] {
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info("received {}", sig == SIGINT ? "SIGINT" : "SIGTERM");
    pod_server->Shutdown();
  });
  pod_server->Wait();  // returns once the signal thread has shut the server down
  waiter.join();
  spdlog::shutdown();  // flushes the log queue
  return 0;
}
