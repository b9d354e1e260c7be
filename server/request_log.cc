#include "server/request_log.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace ipupod::server {

RequestLog::RequestLog(absl::string_view method) : method_(method), start_(absl::Now()) {}

RequestLog::~RequestLog() {
  if (!logged_) {
    spdlog::warn("rpc user={} method={} code=abandoned ms={:.1f}", user_, method_,
                 absl::ToDoubleMilliseconds(elapsed()));
  }
}

void RequestLog::Done(const absl::Status& status) {
  if (logged_) return;
  logged_ = true;
  double ms = absl::ToDoubleMilliseconds(elapsed());
  std::string code = absl::StatusCodeToString(status.code());
  if (status.ok()) {
    spdlog::info("rpc user={} method={} code={} ms={:.1f}", user_, method_, code, ms);
  } else {
    spdlog::info("rpc user={} method={} code={} ms={:.1f} error=\"{}\"", user_, method_, code, ms,
                 std::string(status.message()));
  }
}

void RequestLog::DoneNormally(absl::string_view ended) {
  if (logged_) return;
  logged_ = true;
  spdlog::info("rpc user={} method={} code=OK ms={:.1f} ended=\"{}\"", user_, method_,
               absl::ToDoubleMilliseconds(elapsed()), std::string(ended));
}

}  // namespace ipupod::server
