// File: server/log_format.h
//
// How ipupodd's log lines look on stderr: `text` (spdlog's default pattern,
// "[2026-11-27 21:03:04.123] [ipupodd] [info] rpc user=alice ...") or
// `json`, for log shippers: every line one JSON object,
//   {"time":"2026-11-27T21:03:04.123Z","level":"info","msg":"state store ..."}
// and the request log's lines with their fields as keys,
//   {"time":...,"level":"info","event":"rpc","user":"alice","method":"GetPodInfo",
//    "code":"OK","ms":1.2}   (+ "error" or "ended" when the text line has them)
// Every string is escaped (common/utf8.h): quotes, newlines, control
// characters and invalid UTF-8 in a user's text still give one valid line.
//
// How structured fields reach the line. The server logs through spdlog's
// async logger: a call copies its message into a queue and one thread
// formats it later, so a thread_local set by the caller is gone by then.
// The fields therefore travel in the message itself: LogStructured logs the
// members of a JSON object, already rendered and escaped by LogFields, and
// tags the message with a source location whose file name is a constant
// only this file has. JsonLogFormatter, an spdlog::formatter, splices a
// tagged message's members into the line verbatim and escapes any other
// message as "msg". Nothing else can produce the tag, so no message is
// ever taken for pre-rendered JSON by accident; and every existing
// spdlog::info(...) call gets a JSON line without being touched.
//
// InstallLogFormat(kJson) sets the formatter on the default logger and
// routes gRPC's own log lines (otherwise written to stderr directly, in
// gRPC's format) through spdlog; CurrentLogFormat() tells RequestLog which
// form to write. The ready line on stdout is not a log line and never
// changes.
//
// Thread safety: InstallLogFormat once, at start-up (before requests); the
// rest is safe from any thread (the formatter runs on spdlog's thread).
#ifndef IPUPOD_SERVER_LOG_FORMAT_H_
#define IPUPOD_SERVER_LOG_FORMAT_H_

#include <memory>
#include <string>

#include <spdlog/common.h>
#include <spdlog/formatter.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ipupod::server {

enum class LogFormat { kText, kJson };

absl::string_view LogFormatName(LogFormat format);  // "text", "json"
// "text" or "json"; INVALID_ARGUMENT naming both otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

// The members of one structured line: "key":value pairs, strings escaped.
class LogFields {
 public:
  LogFields& Add(absl::string_view key, absl::string_view value);
  // A number with `decimals` digits after the point ("ms":1.2).
  LogFields& AddNumber(absl::string_view key, double value, int decimals);
  const std::string& members() const { return members_; }

 private:
  void Key(absl::string_view key);
  std::string members_;
};

// Logs one structured line at `level` through the default logger. Only
// for the json format (RequestLog decides); under a text formatter the
// members would be printed as they are.
void LogStructured(spdlog::level::level_enum level, const LogFields& fields);

// One whole JSON line (with its "\n") for a plain message: what the
// formatter writes, and what ipupodd prints when it cannot start.
std::string JsonLogLine(absl::Time time, spdlog::level::level_enum level,
                        absl::string_view message);

class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

// Puts `format` in force for the default logger (and gRPC's lines, json).
void InstallLogFormat(LogFormat format);
LogFormat CurrentLogFormat();

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_LOG_FORMAT_H_
