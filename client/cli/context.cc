#include "client/cli/context.h"

#include <grpc/grpc.h>

#include "absl/strings/str_cat.h"
#include "client/cli/exit_codes.h"

namespace ipupod::cli {

Context::Context(std::ostream& out, std::ostream& err, EnvLookup env)
    : out_(out), err_(err), env_(std::move(env)) {}

Context::~Context() {
  if (grpc_started_) grpc_shutdown_blocking();
}

absl::StatusOr<std::unique_ptr<client::Client>> Context::Connect() {
  if (!grpc_started_) {
    grpc_init();
    grpc_started_ = true;
  }
  return client::Client::Connect(options_);
}

int Context::Print(const Json& doc, absl::string_view text) {
  if (json()) {
    out_ << JsonLine(doc);
  } else {
    out_ << text;
  }
  out_.flush();
  return kExitOk;
}

int Context::Fail(const absl::Status& status, const HintContext& hint) {
  if (json()) {
    out_ << JsonLine(ErrorJson(status));
    out_.flush();
  } else {
    err_ << ErrorText(status, hint);
    err_.flush();
  }
  return ExitCodeForStatus(status);
}

int Context::FailLate(const absl::Status& status, const HintContext& hint) {
  err_ << (json() ? JsonLine(ErrorJson(status)) : ErrorText(status, hint));
  err_.flush();
  return ExitCodeForStatus(status);
}

int Context::UsageError(absl::string_view message) {
  if (json()) {
    out_ << JsonLine(UsageErrorJson(message));
    out_.flush();
  } else {
    err_ << "error: " << message << "\n"
         << "run `ipupod " << (command_path_.empty() ? "" : command_path_ + " ")
         << "--help` for usage\n";
    err_.flush();
  }
  return kExitUsage;
}

void Context::Note(const Json& doc, absl::string_view text) {
  if (json()) {
    if (!doc.is_null()) err_ << JsonLine(doc);
  } else {
    err_ << text;
  }
  err_.flush();
}

}  // namespace ipupod::cli
