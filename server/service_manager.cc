#include "server/service_manager.h"

#include <cstring>
#include <ctime>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include <systemd/sd-daemon.h>

namespace ipupod::server {
namespace {

// One line of STATUS=: the protocol separates assignments with newlines.
std::string StatusLine(absl::string_view status) {
  return absl::StrCat("STATUS=", absl::StrReplaceAll(status, {{"\n", " "}}));
}

void Send(const std::string& message) {
  const int sent = sd_notify(/*unset_environment=*/0, message.c_str());
  if (sent < 0) {
    spdlog::warn("could not notify the service manager ({}): {}", message, std::strerror(-sent));
  }
}

// CLOCK_MONOTONIC in microseconds, which RELOADING=1 carries (systemd 253's
// Type=notify-reload requires it; earlier managers ignore it).
uint64_t MonotonicMicros() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000 + static_cast<uint64_t>(now.tv_nsec) / 1000;
}

}  // namespace

void NotifyReady(absl::string_view status) { Send(absl::StrCat("READY=1\n", StatusLine(status))); }

void NotifyReloading() {
  Send(absl::StrCat("RELOADING=1\nMONOTONIC_USEC=", MonotonicMicros(), "\n",
                    StatusLine("reloading the config (SIGHUP)")));
}

void NotifyStopping() { Send(absl::StrCat("STOPPING=1\n", StatusLine("shutting down"))); }

void NotifyStatus(absl::string_view status) { Send(StatusLine(status)); }

}  // namespace ipupod::server
