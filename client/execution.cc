// Client's streaming ExecutionService calls (the unary ones are in
// client.cc). Each writes its request stream completely, then reads: the
// server answers a client stream only after it ended, and a Write that fails
// means the server already finished the call, whose status Finish() holds.
#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/files.h"
#include "client/ipx_header.h"
#include "common/status_macros.h"
#include "wire/tensor_stream.h"

namespace ipupod::client {
namespace {

using wire::ForEachChunk;
using wire::TensorAssembler;
using wire::TensorHeaderOf;

template <typename Request, typename Stream, typename Set>
bool WriteTensor(Stream& stream, absl::string_view name, const tensor::Tensor& tensor, Set set) {
  Request header;
  *set.header(header) = TensorHeaderOf(name, tensor);
  if (!stream.Write(header)) return false;
  return ForEachChunk(tensor.bytes(), [&](absl::string_view chunk) {
    Request data;
    set.data(data)->set_data(chunk.data(), chunk.size());
    return stream.Write(data);
  });
}

struct WeightsParts {
  v1::TensorHeader* header(v1::WriteWeightsRequest& r) const { return r.mutable_header(); }
  v1::TensorData* data(v1::WriteWeightsRequest& r) const { return r.mutable_data(); }
};
struct RunParts {
  v1::TensorHeader* header(v1::RunRequest& r) const { return r.mutable_header(); }
  v1::TensorData* data(v1::RunRequest& r) const { return r.mutable_data(); }
};

}  // namespace

absl::StatusOr<v1::ExecutableRef> Client::UploadExecutable(absl::string_view ipx_bytes) {
  // Only the header is read here; the server verifies the hash against the payload.
  absl::StatusOr<std::string> hash = IpxContentHash(ipx_bytes);
  if (!hash.ok()) return hash.status();
  absl::StatusOr<v1::ExecutableRef> cached = StatExecutable(*hash);
  if (cached.ok()) {
    cached->set_cache_hit(true);
    return cached;
  }
  if (!absl::IsNotFound(cached.status())) return cached.status();
  grpc::ClientContext context;
  PrepareContext(context, options_.stream_timeout);
  v1::ExecutableRef ref;
  std::unique_ptr<grpc::ClientWriter<v1::ExecutableChunk>> stream =
      execution_->UploadExecutable(&context, &ref);
  bool first = true;
  ForEachChunk(ipx_bytes, [&](absl::string_view chunk) {
    v1::ExecutableChunk message;
    if (first) {
      message.set_sha256(*hash);
      message.set_total_bytes(ipx_bytes.size());
      first = false;
    }
    message.set_data(chunk.data(), chunk.size());
    return stream->Write(message);
  });
  stream->WritesDone();
  absl::Status status = StreamStatus(stream->Finish(), context, "UploadExecutable");
  if (!status.ok()) return status;
  return ref;
}

absl::StatusOr<v1::ExecutableRef> Client::UploadExecutableFile(absl::string_view path) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(path, "executable");
  if (!bytes.ok()) return bytes.status();
  return UploadExecutable(*bytes);
}

absl::StatusOr<v1::WriteWeightsResponse> Client::WriteWeights(absl::string_view session,
                                                              const tensor::NamedTensors& weights) {
  grpc::ClientContext context;
  PrepareContext(context, options_.stream_timeout);
  v1::WriteWeightsResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::WriteWeightsRequest>> stream =
      execution_->WriteWeights(&context, &response);
  v1::WriteWeightsRequest first;
  first.set_session(std::string(session));
  bool open = stream->Write(first);
  for (size_t i = 0; open && i < weights.size(); ++i) {
    open = WriteTensor<v1::WriteWeightsRequest>(*stream, weights[i].first, weights[i].second,
                                                WeightsParts{});
  }
  stream->WritesDone();
  absl::Status status = StreamStatus(stream->Finish(), context, "WriteWeights");
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<tensor::NamedTensors> Client::ReadWeights(absl::string_view session,
                                                         const std::vector<std::string>& names) {
  v1::ReadWeightsRequest request;
  request.set_session(std::string(session));
  for (const std::string& name : names) request.add_names(name);
  return ReadTensors(request);
}

absl::StatusOr<tensor::NamedTensors> Client::ReadCheckpoint(absl::string_view session) {
  v1::ReadWeightsRequest request;
  request.set_session(std::string(session));
  request.set_checkpoint(true);
  return ReadTensors(request);
}

absl::StatusOr<tensor::NamedTensors> Client::ReadTensors(const v1::ReadWeightsRequest& request) {
  grpc::ClientContext context;
  PrepareContext(context, options_.stream_timeout);
  std::unique_ptr<grpc::ClientReader<v1::ReadWeightsResponse>> stream =
      execution_->ReadWeights(&context, request);
  TensorAssembler assembler("weights");
  absl::Status received;
  v1::ReadWeightsResponse part;
  while (stream->Read(&part)) {
    if (!received.ok()) continue;  // drain, so Finish() does not block
    received = part.has_header() ? assembler.AddHeader(part.header())
                                 : assembler.AddData(part.data().data());
  }
  absl::Status status = StreamStatus(stream->Finish(), context, "ReadWeights");
  if (!status.ok()) return status;
  if (!received.ok()) return ServerStreamError(received);
  absl::StatusOr<tensor::NamedTensors> tensors = assembler.Finish();
  if (!tensors.ok()) return ServerStreamError(tensors.status());
  return tensors;
}

absl::StatusOr<RunResult> Client::Run(absl::string_view session,
                                      const tensor::NamedTensors& inputs) {
  if (auto small = RunInlineIfSmall(session, inputs)) return *std::move(small);
  grpc::ClientContext context;
  PrepareContext(context, options_.stream_timeout);
  std::unique_ptr<grpc::ClientReaderWriter<v1::RunRequest, v1::RunResponse>> stream =
      execution_->Run(&context);
  v1::RunRequest first;
  first.set_session(std::string(session));
  bool open = stream->Write(first);
  for (size_t i = 0; open && i < inputs.size(); ++i) {
    open = WriteTensor<v1::RunRequest>(*stream, inputs[i].first, inputs[i].second, RunParts{});
  }
  stream->WritesDone();
  TensorAssembler assembler("outputs");
  absl::Status received;
  std::optional<v1::RunStats> stats;
  v1::RunResponse part;
  while (stream->Read(&part)) {
    if (!received.ok()) continue;
    if (part.has_stats()) {
      stats = part.stats();
    } else {
      received = part.has_header() ? assembler.AddHeader(part.header())
                                   : assembler.AddData(part.data().data());
    }
  }
  absl::Status status = StreamStatus(stream->Finish(), context, "Run");
  if (!status.ok()) return status;
  if (!received.ok()) return ServerStreamError(received);
  if (!stats) return absl::InternalError("ipupodd ended the run without its stats");
  absl::StatusOr<tensor::NamedTensors> outputs = assembler.Finish();
  if (!outputs.ok()) return ServerStreamError(outputs.status());
  RunResult result;
  result.outputs = *std::move(outputs);
  result.stats = *std::move(stats);
  return result;
}

}  // namespace ipupod::client
