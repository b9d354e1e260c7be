#include "server/log_format.h"

#include <atomic>
#include <chrono>
#include <utility>

#include <grpc/support/log.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/utf8.h"

namespace ipupod::server {
namespace {

// The tag of a structured message: its source location's file name is this
// array's address (compared by address, never by text).
constexpr char kStructuredTag[] = "ipupod-structured-log-fields";

std::atomic<LogFormat> g_format{LogFormat::kText};

absl::string_view LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

// The line up to the message: {"time":"...Z","level":"info"
std::string LinePrefix(absl::Time time, spdlog::level::level_enum level) {
  std::string line = "{\"time\":\"";
  absl::StrAppend(&line, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone()),
                  "\",\"level\":\"", LevelName(level), "\"");
  return line;
}

// gRPC's own lines (connection errors, ...) as the server's JSON lines.
void GrpcLogToSpdlog(gpr_log_func_args* args) {
  spdlog::level::level_enum level = spdlog::level::info;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = spdlog::level::err;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) level = spdlog::level::debug;
  spdlog::log(level, "grpc: {} ({}:{})", args->message != nullptr ? args->message : "",
              args->file != nullptr ? args->file : "?", args->line);
}

}  // namespace

absl::string_view LogFormatName(LogFormat format) {
  return format == LogFormat::kJson ? "json" : "text";
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("log format '", CutUtf8(name, 40),
                   "' is not one of text (spdlog's lines, the default) and json (one JSON "
                   "object per line, for log shippers)"));
}

void LogFields::Key(absl::string_view key) {
  if (!members_.empty()) members_.push_back(',');
  AppendJsonString(members_, key);
  members_.push_back(':');
}

LogFields& LogFields::Add(absl::string_view key, absl::string_view value) {
  Key(key);
  AppendJsonString(members_, value);
  return *this;
}

LogFields& LogFields::AddNumber(absl::string_view key, double value, int decimals) {
  Key(key);
  // JSON has no NaN or infinity.
  if (value != value || value > 1e300 || value < -1e300) value = 0;
  absl::StrAppendFormat(&members_, "%.*f", decimals, value);
  return *this;
}

void LogStructured(spdlog::level::level_enum level, const LogFields& fields) {
  spdlog::default_logger_raw()->log(spdlog::source_loc{kStructuredTag, 1, ""}, level,
                                    spdlog::string_view_t(fields.members()));
}

std::string JsonLogLine(absl::Time time, spdlog::level::level_enum level,
                        absl::string_view message) {
  std::string line = LinePrefix(time, level);
  line.append(",\"msg\":");
  AppendJsonString(line, message);
  line.append("}\n");
  return line;
}

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const absl::Time time = absl::FromChrono(msg.time);
  const absl::string_view payload(msg.payload.data(), msg.payload.size());
  std::string line;
  if (msg.source.filename == kStructuredTag) {
    line = LinePrefix(time, msg.level);
    if (!payload.empty()) absl::StrAppend(&line, ",", payload);
    line.append("}\n");
  } else {
    line = JsonLogLine(time, msg.level, payload);
  }
  dest.append(line.data(), line.data() + line.size());
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>();
}

void InstallLogFormat(LogFormat format) {
  if (format == LogFormat::kJson) {
    // The formatter first: a structured line is never logged under text's.
    spdlog::default_logger_raw()->set_formatter(std::make_unique<JsonLogFormatter>());
    gpr_set_log_function(GrpcLogToSpdlog);
    g_format.store(format);
    return;
  }
  // Back to text (tests): gRPC's lines stay routed through spdlog, now as
  // text lines (gRPC has no public way back to its own writer).
  if (g_format.exchange(format) == LogFormat::kJson) {
    spdlog::default_logger_raw()->set_formatter(std::make_unique<spdlog::pattern_formatter>());
  }
}

LogFormat CurrentLogFormat() { return g_format.load(); }

}  // namespace ipupod::server
