#include "client/cli/context.h"

#include <exception>
#include <new>

#include <grpc/grpc.h>
#include <grpc/support/log.h>

#include "absl/strings/str_cat.h"
#include "client/cli/exit_codes.h"
#include "common/utf8.h"

namespace ipupod::cli {

Context::Context(std::ostream& out, std::ostream& err, EnvLookup env)
    : out_(out), err_(err), env_(std::move(env)) {}

Context::~Context() {
  if (grpc_started_) grpc_shutdown_blocking();
}

namespace {

// Text for a terminal: what a client chose (job names, labels, reasons,
// messages echoing them) moves no cursor and colours nothing. The lines'
// own newlines and tabs stay; fields that could forge a line or a table
// row are escaped where they are formatted (Table, job_output.cc).
std::string TerminalText(absl::string_view text) { return EscapeControls(text, "\n\t"); }

// gRPC core's own log lines (at its default verbosity, errors such as
// "Handshake failed with fatal error SSL_ERROR_SSL ...") repeat, raw, what
// the command's error message already says in words; dropped unless
// $GRPC_VERBOSITY asks for them.
void DropGrpcLog(gpr_log_func_args* /*args*/) {}

}  // namespace

absl::StatusOr<std::unique_ptr<client::Client>> Context::Connect() {
  if (!grpc_started_) {
    if (!env_("GRPC_VERBOSITY").has_value()) gpr_set_log_function(DropGrpcLog);
    grpc_init();
    grpc_started_ = true;
  }
  return client::Client::Connect(options_);
}

int Context::Print(const Json& doc, absl::string_view text) {
  if (json()) {
    out_ << JsonLine(doc);
  } else {
    out_ << TerminalText(text);
  }
  out_.flush();
  return kExitOk;
}

int Context::Print(const std::function<Json()>& doc, const std::function<std::string()>& text) {
  return json() ? Print(doc(), "") : Print(Json(), text());
}

int Context::Fail(const absl::Status& status, const HintContext& hint) {
  if (json()) {
    out_ << JsonLine(ErrorJson(status));
    out_.flush();
  } else {
    err_ << TerminalText(ErrorText(status, hint));
    err_.flush();
  }
  return ExitCodeForStatus(status);
}

int Context::FailLate(const absl::Status& status, const HintContext& hint) {
  err_ << (json() ? JsonLine(ErrorJson(status)) : TerminalText(ErrorText(status, hint)));
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
    err_ << TerminalText(text);
  }
  err_.flush();
}

int RunGuarded(Context& ctx, const Runner& run) {
  absl::Status failure;
  try {
    return run(ctx);
  } catch (const std::bad_alloc&) {
    failure = absl::InternalError(
        "out of memory (std::bad_alloc); free memory or use smaller files, and report this "
        "if a file made ipupod allocate more than its size suggests");
  } catch (const std::exception& e) {
    failure = absl::InternalError(
        absl::StrCat("unexpected error: ", e.what(), "; please report this as an ipupod bug"));
  } catch (...) {
    failure = absl::InternalError(
        "unexpected error of unknown type; please report this as an ipupod bug");
  }
  try {
    return ctx.Fail(failure);
  } catch (...) {  // not even the report could be written (out of memory)
    return kExitOther;
  }
}

}  // namespace ipupod::cli
