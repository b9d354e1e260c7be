// Client's streaming ExecutionService calls (the unary ones are in
// client.cc). Each writes its request stream completely, then reads: the
// server answers a client stream only after it ended, and a Write that fails
// means the server already finished the call, whose status Finish() holds.
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "client/files.h"
#include "client/ipx_header.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "common/wire/tensor_stream.h"

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

// RunSteps' flow control: the writer may send step k once fewer than
// `ahead` steps are in flight (sent and not yet answered), or stops when the
// call is over.
class StepWindow {
 public:
  explicit StepWindow(int64_t ahead) : ahead_(ahead < 1 ? 1 : ahead) {}
  // False when the call is over. Each wait is bounded; the loop ends when a
  // result arrives or the reader stops the window, which it does however
  // the stream ends (its own deadline included). (A CondVar loop rather
  // than absl::Condition: Debian's libabsl evaluates a Condition on the
  // unlocking thread, where TSan cannot see its order.)
  bool WaitToSend(int64_t step) {
    sync::MutexLock lock(&mu_);
    while (!stopped_ && step >= received_ + ahead_) {
      sync::WaitWithTimeout(&changed_, &mu_, absl::Seconds(1));
    }
    return !stopped_;
  }
  void Received(int64_t steps) {
    sync::MutexLock lock(&mu_);
    received_ = steps;
    changed_.SignalAll();
  }
  void Stop() {
    sync::MutexLock lock(&mu_);
    stopped_ = true;
    changed_.SignalAll();
  }

 private:
  const int64_t ahead_;
  absl::Mutex mu_;
  absl::CondVar changed_;
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

using RunStream = grpc::ClientReaderWriter<v1::RunRequest, v1::RunResponse>;

// A slice's header and chunks, each chunk copied once, into its message.
bool WriteSlice(RunStream& stream, const TensorSlice& slice) {
  v1::RunRequest header;
  v1::TensorHeader* h = header.mutable_header();
  h->set_name(slice.name);
  h->set_dtype(std::string(tensor::DTypeName(slice.dtype)));
  for (int64_t d : slice.shape) h->add_shape(d);
  h->set_total_bytes(slice.bytes.size());
  if (!stream.Write(header)) return false;
  v1::RunRequest data;
  return ForEachChunk(slice.bytes, [&](absl::string_view chunk) {
    data.mutable_data()->set_data(chunk.data(), chunk.size());
    return stream.Write(data);
  });
}

// The writer of RunSteps: the session, then each step's inputs and end_step
// as the window allows, then the close. Stops at a failed write (the call
// is over; Finish tells why) or when the window is stopped.
void SendSteps(RunStream& stream, absl::string_view session, int64_t count,
               const std::function<std::vector<TensorSlice>(int64_t)>& inputs, StepWindow& window) {
  v1::RunRequest message;
  message.set_session(std::string(session));
  bool open = stream.Write(message);
  v1::RunRequest end;
  end.mutable_end_step();
  for (int64_t step = 0; open && step < count; ++step) {
    if (!window.WaitToSend(step)) return;
    for (const TensorSlice& slice : inputs(step)) open = open && WriteSlice(stream, slice);
    open = open && stream.Write(end);
  }
  if (open) stream.WritesDone();
}

// Reads one step's outputs and stats. False when the stream ended first.
bool ReceiveStep(RunStream& stream, absl::StatusOr<RunResult>& result) {
  TensorAssembler assembler("outputs");
  absl::Status received;
  v1::RunResponse part;
  while (stream.Read(&part)) {
    if (part.has_stats()) {
      absl::StatusOr<tensor::NamedTensors> outputs = assembler.Finish();
      if (!received.ok() || !outputs.ok()) {
        result = ServerStreamError(received.ok() ? outputs.status() : received);
      } else {
        result = RunResult{*std::move(outputs), std::move(*part.mutable_stats())};
      }
      return true;
    }
    if (!received.ok()) continue;
    received = part.has_header() ? assembler.AddHeader(part.header())
                                 : assembler.AddData(part.data().data());
  }
  return false;
}

}  // namespace

absl::Status Client::RunSteps(
    absl::string_view session, int64_t count,
    const std::function<std::vector<TensorSlice>(int64_t step)>& inputs,
    const std::function<absl::Status(int64_t step, RunResult result)>& on_result, int ahead) {
  if (count <= 0) return absl::OkStatus();
  grpc::ClientContext context;
  PrepareContext(context, options_.stream_timeout);
  std::unique_ptr<RunStream> stream = execution_->Run(&context);
  StepWindow window(ahead);
  std::thread writer([&] { SendSteps(*stream, session, count, inputs, window); });
  absl::Status own;  // the client's side: a malformed answer or on_result's error
  int64_t step = 0;
  for (absl::StatusOr<RunResult> result; step < count && ReceiveStep(*stream, result); ++step) {
    window.Received(step + 1);
    own = result.ok() ? on_result(step, *std::move(result)) : result.status();
    if (!own.ok()) break;
  }
  if (!own.ok() || step < count) {
    if (!own.ok()) context.TryCancel();
    window.Stop();
    v1::RunResponse drain;
    while (stream->Read(&drain)) {
    }
  }
  writer.join();
  absl::Status status = StreamStatus(stream->Finish(), context, "Run");
  if (!own.ok()) return own;
  if (!status.ok()) return status;
  if (step < count) return absl::InternalError("ipupodd ended the run stream before every step");
  return absl::OkStatus();
}

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
