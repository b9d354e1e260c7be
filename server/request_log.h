// File: server/request_log.h
//
// RequestLog: one log line per RPC (user, method, status code, duration in
// ms, and the message of an error, or how an orderly end came about), written by Done() or, if
// Done() was never called, by the destructor (marked "abandoned"), so no request goes unlogged.
// In the text log format it is "rpc user=U method=M code=C ms=1.2 error=\"...\""; in the
// json format the same fields are the keys of the line (server/log_format.h:
// "event":"rpc","user","method","code","ms", and "error" or "ended").
//
// Thread safety: not shared; each RPC owns its RequestLog. spdlog itself is
// thread-safe. Never log while holding the scheduler's mutex.
#ifndef IPUPOD_SERVER_REQUEST_LOG_H_
#define IPUPOD_SERVER_REQUEST_LOG_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ipupod::server {

class RequestLog {
 public:
  explicit RequestLog(absl::string_view method);
  ~RequestLog();
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  void set_user(absl::string_view user) { user_ = std::string(user); }
  const std::string& user() const { return user_; }
  absl::Duration elapsed() const { return absl::Now() - start_; }
  // Writes the line once; later calls do nothing.
  void Done(const absl::Status& status);
  // The RPC ended normally although its status is not OK (an attach stream
  // its holder detached): code=OK, with `ended` saying how.
  void DoneNormally(absl::string_view ended);

 private:
  std::string method_;
  std::string user_ = "-";
  absl::Time start_;
  bool logged_ = false;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_REQUEST_LOG_H_
