// Client::RunInline and Run's choice of it: a small step (inputs and
// outputs each at most wire::kInlineStepBytesMax) as one unary round trip
// instead of the Run stream's three messages each way.
#include <algorithm>
#include <utility>

#include "client/client.h"
#include "client/grpc_status.h"
#include "common/sync.h"  // header only: absl::Mutex as TSan sees it
#include "common/wire/inline_tensors.h"

namespace ipupod::client {

absl::StatusOr<RunResult> Client::RunInline(absl::string_view session,
                                            const tensor::NamedTensors& inputs) {
  v1::RunInlineRequest request;
  request.set_session(std::string(session));
  wire::AddInline(inputs, request.mutable_inputs());
  grpc::ClientContext context;
  // A step, however small its tensors, computes for as long as the model
  // takes: the streaming calls' deadline.
  PrepareContext(context, options_.stream_timeout);
  v1::RunInlineResponse response;
  absl::Status status =
      StreamStatus(execution_->RunInline(&context, request, &response), context, "RunInline");
  if (!status.ok()) return status;
  if (!response.has_stats()) return absl::InternalError("ipupodd ended the run without its stats");
  if (wire::InlineDataBytes(response.outputs()) > wire::kInlineStepBytesMax) {
    return absl::InternalError("ipupodd sent more than 1 MiB of outputs inline");
  }
  wire::TensorAssembler assembler("outputs");
  absl::StatusOr<tensor::NamedTensors> outputs =
      wire::AssembleInline(response.outputs(), assembler);
  if (!outputs.ok()) return ServerStreamError(outputs.status());
  RunResult result;
  result.outputs = *std::move(outputs);
  result.stats = std::move(*response.mutable_stats());
  return result;
}

std::optional<absl::StatusOr<RunResult>> Client::RunInlineIfSmall(
    absl::string_view session, const tensor::NamedTensors& inputs) {
  if (!options_.inline_steps || wire::InlineDataBytes(inputs) > wire::kInlineStepBytesMax) {
    return std::nullopt;
  }
  {
    sync::MutexLock lock(&inline_mu_);
    if (inline_unimplemented_ || std::find(stream_sessions_.begin(), stream_sessions_.end(),
                                           session) != stream_sessions_.end()) {
      return std::nullopt;
    }
  }
  absl::StatusOr<RunResult> result = RunInline(session, inputs);
  const absl::StatusCode code = result.status().code();
  // Both refusals come before anything ran: the stream runs the step instead.
  if (code != absl::StatusCode::kOutOfRange && code != absl::StatusCode::kUnimplemented) {
    return result;
  }
  sync::MutexLock lock(&inline_mu_);
  if (code == absl::StatusCode::kUnimplemented) {
    inline_unimplemented_ = true;
  } else {
    if (stream_sessions_.size() >= kStreamSessionsMax) stream_sessions_.clear();
    stream_sessions_.emplace_back(session);
  }
  return std::nullopt;
}

}  // namespace ipupod::client
