#include "server/request_log.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "server/log_format.h"

namespace ipupod::server {
namespace {

// One rpc line as JSON (server/log_format.h): its fields as keys.
void LogRpcJson(spdlog::level::level_enum level, const std::string& user, const std::string& method,
                absl::string_view code, double ms, absl::string_view key, absl::string_view text) {
  LogFields fields;
  fields.Add("event", "rpc").Add("user", user).Add("method", method).Add("code", code);
  fields.AddNumber("ms", ms, 1);
  if (!key.empty()) fields.Add(key, text);
  LogStructured(level, fields);
}

}  // namespace

RequestLog::RequestLog(absl::string_view method) : method_(method), start_(absl::Now()) {}

RequestLog::~RequestLog() {
  if (logged_) return;
  const double ms = absl::ToDoubleMilliseconds(elapsed());
  if (CurrentLogFormat() == LogFormat::kJson) {
    LogRpcJson(spdlog::level::warn, user_, method_, "abandoned", ms, "", "");
    return;
  }
  spdlog::warn("rpc user={} method={} code=abandoned ms={:.1f}", user_, method_, ms);
}

void RequestLog::Done(const absl::Status& status) {
  if (logged_) return;
  logged_ = true;
  double ms = absl::ToDoubleMilliseconds(elapsed());
  std::string code = absl::StatusCodeToString(status.code());
  if (CurrentLogFormat() == LogFormat::kJson) {
    LogRpcJson(spdlog::level::info, user_, method_, code, ms, status.ok() ? "" : "error",
               status.message());
  } else if (status.ok()) {
    spdlog::info("rpc user={} method={} code={} ms={:.1f}", user_, method_, code, ms);
  } else {
    spdlog::info("rpc user={} method={} code={} ms={:.1f} error=\"{}\"", user_, method_, code, ms,
                 std::string(status.message()));
  }
}

void RequestLog::DoneNormally(absl::string_view ended) {
  if (logged_) return;
  logged_ = true;
  const double ms = absl::ToDoubleMilliseconds(elapsed());
  if (CurrentLogFormat() == LogFormat::kJson) {
    LogRpcJson(spdlog::level::info, user_, method_, "OK", ms, "ended", ended);
    return;
  }
  spdlog::info("rpc user={} method={} code=OK ms={:.1f} ended=\"{}\"", user_, method_, ms,
               std::string(ended));
}

}  // namespace ipupod::server
