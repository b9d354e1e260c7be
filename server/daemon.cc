#include "server/daemon.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include <spdlog/async.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "device/kernels/threads.h"
#include "server/flags.h"
#include "server/log_format.h"
#include "server/server.h"
#include "server/service_manager.h"
#include "server/shutdown_signals.h"
#include <malloc.h>
#include <signal.h>
#include <sys/prctl.h>

namespace ipupod::server {
namespace {

constexpr size_t kLogQueueMax = 8192;  // lines waiting for stderr
// Blocks this large or larger are mapped on their own and unmapped when freed.
// Setting it turns off glibc's dynamic threshold, which after the first free of
// a large block (an executable, a weight set) raises itself to 32 MiB and keeps
// such blocks on arena heaps that hold freed memory: 80-120 MiB over the
// configured bounds in tests/integration/memory_bounds_test.cc without this.
constexpr int kMmapThresholdBytes = 4 << 20;
// Free memory at the top of an arena's heap is given back to the system only
// past this much. glibc's default (128 KiB, fixed once the threshold above is
// set) gave back a step's activations and messages after every step, and the
// next step faulted them in again, page by page: `ipupod run` of the MLP at
// batch 128 took 15 ms a step with it, 8 ms with this (docs/benchmarks.md).
constexpr int kTrimThresholdBytes = kMmapThresholdBytes;
// The main thread checks for a signal this often; a signal wakes it at once.
constexpr absl::Duration kSignalPoll = absl::Seconds(1);

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
  if (CurrentLogFormat() == LogFormat::kJson) {
    spdlog::critical("ipupodd: {}", std::string(status.message()));  // a JSON line too
  } else {
    std::fprintf(stderr, "ipupodd: %s\n", std::string(status.message()).c_str());
  }
  spdlog::shutdown();
  return kExitBadStart;
}

// Serves until SIGINT or SIGTERM, then shuts down and closes the store.
// SIGHUP reloads the sharing policy; a bad config is logged and ignored.
void ServeUntilSignalled(std::unique_ptr<PodServer> server, ShutdownSignals& signals) {
  std::optional<int> sig;
  while (!sig || *sig == SIGHUP) {
    if (sig) {
      NotifyReloading();
      const absl::Status reloaded = server->ReloadSharing();
      if (!reloaded.ok()) {
        spdlog::error("SIGHUP: the config was not reloaded; the old one stays in force: {}",
                      std::string(reloaded.message()));
      }
      NotifyReady(reloaded.ok() ? server->ReadyLine()
                                : absl::StrCat(server->ReadyLine(),
                                               "; the last reload failed: ", reloaded.message()));
    }
    sig = signals.Wait(kSignalPoll);
  }
  spdlog::info("received {}", ShutdownSignals::Name(*sig));
  NotifyStopping();
  server->Shutdown(absl::StrCat("received ", ShutdownSignals::Name(*sig)));
  server.reset();  // the store checkpoints its WAL and records a clean stop
  spdlog::info("stopped");
}

}  // namespace

int RunDaemon(int argc, const char* const* argv) {
  // First, before this code starts any thread (libraries may have started
  // theirs already): wherever a signal lands, it becomes an event.
  absl::StatusOr<std::unique_ptr<ShutdownSignals>> signals = ShutdownSignals::Install();
  if (!signals.ok()) return Fail(signals.status());
  ::signal(SIGPIPE, SIG_IGN);  // a closed log pipe must not kill the server
  ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  ::mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
  // Idle OpenBLAS workers sleep instead of spinning between steps
  // (device/kernels/threads.h; docs/benchmarks.md, "Inference at the floor").
  kernels::ShortenBlasIdleSpin();
  ConfigureLogging();

  auto command_line = ParseCommandLine(argc, argv);
  if (!command_line.ok()) return Fail(command_line.status());
  if (!command_line->config) {
    std::cout << command_line->print << std::flush;
    spdlog::shutdown();
    return 0;
  }
  InstallLogFormat(command_line->config->log_format);
  // Custom op libraries run as ipupodd's own user (in helpers that cannot open files or
  // trace: device/customop/host_sandbox.h). Non-dumpable, ipupodd's memory - every session's
  // tensors - cannot be read through ptrace or /proc/PID/mem by any other process of that
  // user either, a library's load-time code included; no core dump holds it either.
  if (!command_line->config->custom_ops.library_dirs.empty()) ::prctl(PR_SET_DUMPABLE, 0);
  auto server = PodServer::Start(*std::move(command_line->config));
  if (!server.ok()) return Fail(server.status());
  std::cout << (*server)->ReadyLine() << std::endl;  // endl flushes: tests wait for it
  NotifyReady((*server)->ReadyLine());
  ServeUntilSignalled(*std::move(server), **signals);
  spdlog::shutdown();  // flushes the log queue
  return 0;
}

}  // namespace ipupod::server
