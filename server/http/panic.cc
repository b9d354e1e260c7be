#include "server/http/panic.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <spdlog/spdlog.h>

#include "absl/time/clock.h"
#include <microhttpd.h>

namespace ipupod::http::internal {
namespace {

std::atomic<bool> panicked{false};
std::atomic<int> dispatching{0};
thread_local int owner_calls = 0;

constexpr absl::Duration kAwaitPoll = absl::Milliseconds(5);

}  // namespace

void InstallPanicHandler() {
  static std::once_flag installed;
  std::call_once(installed, [] { MHD_set_panic_func(&OnPanic, nullptr); });
}

bool Panicked() { return panicked.load(); }

void OnPanic(void*, const char* file, unsigned int line, const char* reason) {
  panicked.store(true);
  const bool owner = owner_calls > 0;
  spdlog::critical(
      "http: libmicrohttpd hit an internal error at {}:{}: {}; {}", file != nullptr ? file : "?",
      line, reason != nullptr ? reason : "no reason given",
      owner ? "it happened while starting or stopping the HTTP listener: aborting"
            : "its thread is parked and the HTTP listener answers 503 from now on (the gRPC "
              "API is not affected); restart ipupodd when convenient");
  spdlog::default_logger()->flush();
  if (owner) std::abort();
  for (;;) absl::SleepFor(absl::Hours(24));
}

OwnerCall::OwnerCall() { ++owner_calls; }
OwnerCall::~OwnerCall() { --owner_calls; }

void EnterDispatch() { dispatching.fetch_add(1); }
void LeaveDispatch() { dispatching.fetch_sub(1); }

bool AwaitNoDispatch(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (dispatching.load() != 0) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(kAwaitPoll);
  }
  return true;
}

}  // namespace ipupod::http::internal
