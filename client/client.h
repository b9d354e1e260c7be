// File: client/client.h
//
// The C++ client of ipupodd. A Client holds one gRPC channel to the server
// and wraps every unary RPC of ipupod.v1 as a method returning
// absl::StatusOr<response>. Each call
//   * carries the caller's identity: `authorization: Bearer TOKEN` when a
//     token is set, else `x-ipupod-user: USER` (open mode);
//   * has a deadline of `ClientOptions::rpc_timeout`;
//   * converts the grpc::Status and the server's trailing metadata into an
//     absl::Status with the same code and message plus the device-error
//     payloads of common/errors.h (see client/grpc_status.h).
// When nothing answers, calls fail UNAVAILABLE with "cannot reach ipupodd at
// HOST:PORT: ...; is it running? ...". A TLS handshake that fails (the
// server's certificate not signed by tls_ca, not naming the address, or a
// server without TLS) fails UNAUTHENTICATED "TLS handshake with HOST:PORT
// failed: ..." (client/grpc_status.h). A client deadline fails
// DEADLINE_EXCEEDED naming the method.
//
// Attach is a server-streaming RPC whose stream *is* the session: the IPUs are
// held while the stream is open. Client::StartAttach returns an AttachCall:
//
//   std::unique_ptr<AttachCall> call = client->StartAttach(request);
//   IPUPOD_ASSIGN_OR_RETURN(v1::SessionInfo session,
//       call->WaitForGrant([](const v1::QueuePosition& q) { /* show q */ }));
//   ... use session.session(), session.ipus() ...
//   call->Release();  // or just destroy `call`
//
// Recovering from device errors (the PopTorch error model, section 4.3; see
// docs/errors.md). Any call on a session may fail with a device error; read
// its kind and recovery action with common/errors.h and run the reset it
// names, then load again (a reset clears device memory; needs_load is set):
//
//   absl::StatusOr<v1::SessionInfo> info = client->GetSession(id);
//   if (!info.ok()) {
//     const absl::Status& error = info.status();
//     switch (ipupod::GetErrorKind(error)) {
//       case ipupod::ErrorKind::kRecoverable:  // code ABORTED
//         switch (ipupod::GetRecoveryAction(error)) {
//           case ipupod::RecoveryAction::kIpuReset:
//             for (int ipu : ipupod::GetErrorIpus(error)) client->ResetIpu(ipu);
//             break;
//           case ipupod::RecoveryAction::kLinkReset:
//           case ipupod::RecoveryAction::kPartitionReset:
//             client->ResetSession(id);  // or ResetPartition(name)
//             break;
//           case ipupod::RecoveryAction::kFullReset:
//             break;  // ask an admin: ResetPod()
//           default:
//             break;
//         }
//         break;
//       case ipupod::ErrorKind::kUnrecoverable:  // code DATA_LOSS: the IPU left
//         break;                                  // service until RepairIpu
//       default:                                  // application: fix the request
//         break;
//     }
//   }
// A reset at a level clears every action at or below it (IPU_RESET <
// LINK_RESET < PARTITION_RESET < FULL_RESET); a reset below the needed level
// fails FAILED_PRECONDITION naming the one that would work.
//
// ExecutionService (implemented in client/execution.cc): executables,
// weights and runs on an attached session's IPUs. The streaming calls
// (UploadExecutable, WriteWeights, ReadWeights, Run) move tensors and files
// in chunks of at most 1 MiB (common/wire/tensor_stream.h) and have the deadline
// `ClientOptions::stream_timeout` (default 10 minutes) instead of
// rpc_timeout, because a step of a large model can take minutes; their
// errors are converted exactly like the unary calls' (device-error payloads
// included). A typical run:
//
//   IPUPOD_ASSIGN_OR_RETURN(v1::ExecutableRef ref, client->UploadExecutableFile("m.ipx"));
//   IPUPOD_ASSIGN_OR_RETURN(v1::LoadedProgram p, client->Load(session, ref.sha256()));
//   IPUPOD_ASSIGN_OR_RETURN(RunResult r, client->Run(session, inputs));
//
// JobService (implemented in client/jobs.cc; proto/ipupod/v1/jobs.proto):
// batch jobs the server owns. PutBlobFile puts a file into the server's
// content-addressed blob store (hashed in 1 MiB pieces, skipped when the
// server already holds those bytes, else streamed in 1 MiB chunks), then
// SubmitJob names the blobs by hash; the job is PENDING, RUNNING, then
// COMPLETED, FAILED, CANCELLED or TIMEOUT, whether or not this client stays.
// WatchJob streams its events; FetchResult downloads a result file,
// resumably:
//
//   IPUPOD_ASSIGN_OR_RETURN(v1::BlobRef ipx, client->PutBlobFile("m.ipx", "executable"));
//   IPUPOD_ASSIGN_OR_RETURN(v1::BlobRef data, client->PutBlobFile("d.npz", "inputs"));
//   v1::SubmitJobRequest request;
//   request.mutable_spec()->set_executable_sha256(ipx.sha256());
//   request.mutable_spec()->mutable_inputs()->set_sha256(data.sha256());
//   request.mutable_spec()->mutable_inputs()->set_format("npz");
//   IPUPOD_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, client->SubmitJob(request));
//   IPUPOD_RETURN_IF_ERROR(client->WatchJob(jobs[0].id(), 0, /*follow=*/true,
//                                           [](const v1::JobEvent& e) { /* show e */ }));
//   IPUPOD_ASSIGN_OR_RETURN(v1::Job done, client->GetJob(jobs[0].id()));
//   for (const v1::ResultFile& f : done.results()) client->FetchResult(done.id(), f, f.name());
//
// Thread safety: Client is thread-safe (gRPC stubs are). AttachCall: Cancel()
// is safe from any thread at any time (e.g. a signal-watching thread); the
// other methods must be called from one thread at a time.
// Ownership: an AttachCall shares the Client's channel and may outlive the
// Client.
#ifndef IPUPOD_CLIENT_CLIENT_H_
#define IPUPOD_CLIENT_CLIENT_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/grpc_status.h"
#include "common/tensor/tensor_files.h"
#include "ipupod/v1/accounting.grpc.pb.h"
#include "ipupod/v1/audit.grpc.pb.h"
#include "ipupod/v1/compile.grpc.pb.h"
#include "ipupod/v1/execution.grpc.pb.h"
#include "ipupod/v1/jobs.grpc.pb.h"
#include "ipupod/v1/pod.grpc.pb.h"

namespace ipupod::client {

namespace v1 = ::ipupod::v1;

inline constexpr absl::string_view kDefaultServer = "127.0.0.1:50051";
// Metadata must fit gRPC's default 8 KiB header limit with room to spare.
inline constexpr size_t kTokenBytesMax = 4096;

struct ClientOptions {
  std::string server = std::string(kDefaultServer);  // HOST:PORT (or unix:PATH)
  std::string token;                               // sent as `authorization: Bearer TOKEN` when set
  std::string user;                                // sent as `x-ipupod-user` when no token is set
  absl::Duration rpc_timeout = absl::Seconds(30);  // deadline of every unary call
  // Deadline of each streaming ExecutionService call: an upload, a weights
  // transfer, one Run step (a step of a big pipelined model takes minutes).
  absl::Duration stream_timeout = absl::Minutes(10);
  // Client keepalive pings, so a dead server (or network) is noticed on a
  // held attach stream. ipupodd permits pings this frequent.
  absl::Duration keepalive_time = absl::Seconds(5);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // TLS (client/transport_security.h): PEM file paths. With tls_ca the
  // channel is TLS and trusts only that CA (the server's certificate must
  // name the address in `server`: IP:127.0.0.1, DNS:pod.example.org);
  // tls_cert and tls_key (both, and only with tls_ca) present a client
  // certificate to a server with mutual TLS. Without tls_ca a token is sent
  // to loopback addresses only.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  // Run sends a step whose inputs hold at most 1 MiB as one RunInline call;
  // false makes every step take the Run stream (to compare the two).
  bool inline_steps = true;
};

// The CallSite (client/grpc_status.h) of a call on a channel made from
// `options`: its server and how the channel is secured.
CallSite SiteOf(const ClientOptions& options, absl::string_view method, absl::Duration timeout);

class AttachCall;

// What one Run step returned: the outputs in the executable's order, with
// their ONNX output names and host shapes, and the server's measurements.
struct RunResult {
  tensor::NamedTensors outputs;
  v1::RunStats stats;
};

// One input of a step as RunSteps sends it: its bytes are a view (rows of a
// larger tensor, say) that must stay valid until RunSteps returns, so no
// step's inputs are copied before they go on the wire.
struct TensorSlice {
  std::string name;
  tensor::DType dtype = tensor::DType::kFloat32;
  tensor::Shape shape;
  absl::string_view bytes;  // shape's element count x dtype size
};

// What FetchResult wrote.
struct FetchedResult {
  std::string path;           // the destination
  uint64_t size_bytes = 0;    // the whole file
  uint64_t resumed_from = 0;  // bytes a previous attempt had left in "<path>.part"
};

// FetchResult's progress: bytes of the file on disk so far, and its size.
using FetchProgress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

class Client {
 public:
  // Creates the channel; does not wait for the server (the first call reports
  // an unreachable server). INVALID_ARGUMENT for an empty server address, a
  // non-positive timeout or, without a token, a user name the server would
  // refuse (common/user_name.h: its rule and message); UNAUTHENTICATED for a token no server
  // accepts (longer than kTokenBytesMax, or not visible ASCII); the errors of
  // client/transport_security.h (a token in clear text to another machine, TLS
  // files missing, malformed or mismatched).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const { return options_; }

  // PodService.
  absl::StatusOr<v1::GetPodInfoResponse> GetPodInfo(const v1::GetPodInfoRequest& request = {});
  absl::StatusOr<v1::InjectFaultResponse> InjectFault(const v1::InjectFaultRequest& request);
  absl::StatusOr<v1::ResetResponse> ResetIpu(const v1::ResetIpuRequest& request);
  absl::StatusOr<v1::ResetResponse> ResetPod(const v1::ResetPodRequest& request = {});
  absl::StatusOr<v1::RepairIpuResponse> RepairIpu(const v1::RepairIpuRequest& request);

  // PartitionService.
  absl::StatusOr<v1::Partition> CreatePartition(const v1::CreatePartitionRequest& request);
  absl::StatusOr<v1::Partition> GetPartition(const v1::GetPartitionRequest& request);
  absl::StatusOr<v1::ListPartitionsResponse> ListPartitions(
      const v1::ListPartitionsRequest& request = {});
  absl::StatusOr<v1::RemovePartitionResponse> RemovePartition(
      const v1::RemovePartitionRequest& request);
  absl::StatusOr<v1::ResetResponse> ResetPartition(const v1::ResetPartitionRequest& request);

  // SessionService (Attach: StartAttach below).
  absl::StatusOr<v1::DetachResponse> Detach(const v1::DetachRequest& request);
  absl::StatusOr<v1::SessionInfo> GetSession(const v1::GetSessionRequest& request);
  absl::StatusOr<v1::ListQueueResponse> ListQueue(const v1::ListQueueRequest& request = {});
  // Every account's shares, decayed usage and fair-share factor.
  absl::StatusOr<v1::GetSharesResponse> GetShares(const v1::GetSharesRequest& request = {});
  absl::StatusOr<v1::ResetResponse> ResetSession(const v1::ResetSessionRequest& request);

  // Shorthands that build the request.
  absl::StatusOr<v1::InjectFaultResponse> InjectFault(uint32_t ipu, v1::FaultKind kind);
  absl::StatusOr<v1::ResetResponse> ResetIpu(uint32_t ipu);
  absl::StatusOr<v1::RepairIpuResponse> RepairIpu(uint32_t ipu);
  absl::StatusOr<v1::Partition> CreatePartition(absl::string_view name, uint32_t size);
  absl::StatusOr<v1::Partition> GetPartition(absl::string_view name);
  absl::StatusOr<v1::RemovePartitionResponse> RemovePartition(absl::string_view name,
                                                              bool force = false);
  absl::StatusOr<v1::ResetResponse> ResetPartition(absl::string_view name);
  absl::StatusOr<v1::DetachResponse> Detach(absl::string_view session);
  absl::StatusOr<v1::SessionInfo> GetSession(absl::string_view session);
  absl::StatusOr<v1::ResetResponse> ResetSession(absl::string_view session);

  // ExecutionService (client/execution.cc).
  // NOT_FOUND when the server does not hold the executable.
  absl::StatusOr<v1::ExecutableRef> StatExecutable(absl::string_view sha256);
  // Uploads .ipx bytes unless StatExecutable finds their hash (read from the
  // header) already cached; then the returned ref has cache_hit set.
  // INVALID_ARGUMENT (nothing sent) when the bytes are not an .ipx.
  absl::StatusOr<v1::ExecutableRef> UploadExecutable(absl::string_view ipx_bytes);
  // The same for a file; NOT_FOUND naming a missing file.
  absl::StatusOr<v1::ExecutableRef> UploadExecutableFile(absl::string_view path);
  absl::StatusOr<v1::LoadedProgram> Load(absl::string_view session, absl::string_view sha256);
  absl::StatusOr<v1::LoadedProgram> GetLoaded(absl::string_view session);
  // Weights by ONNX initializer name; all-or-nothing on the server.
  absl::StatusOr<v1::WriteWeightsResponse> WriteWeights(absl::string_view session,
                                                        const tensor::NamedTensors& weights);
  // `names` empty: every weight.
  absl::StatusOr<tensor::NamedTensors> ReadWeights(absl::string_view session,
                                                   const std::vector<std::string>& names = {});
  // Training: the whole state (weights, optimizer state and attributes,
  // execution.proto ReadWeightsRequest.checkpoint). WriteWeights of the
  // result restores it exactly.
  absl::StatusOr<tensor::NamedTensors> ReadCheckpoint(absl::string_view session);
  // One step: samples_per_step samples of every input (dim 0). Training
  // executables update the weights; stats.losses has one loss per update.
  // A step whose inputs hold at most wire::kInlineStepBytesMax (1 MiB) goes
  // as one RunInline round trip; larger ones, sessions whose program has
  // larger outputs (the server's OUT_OF_RANGE, remembered per session) and
  // servers without RunInline use the Run stream. Same results either way.
  absl::StatusOr<RunResult> Run(absl::string_view session, const tensor::NamedTensors& inputs);
  // `count` steps on one Run stream (execution.proto: end_step between
  // steps): step k+1's inputs go out while step k computes and its outputs
  // come back. `inputs(k)` gives step k's inputs; it is called on a thread
  // of this call's (not the caller's), once step k - ahead's result has
  // arrived (ahead >= 1), so at most `ahead` steps are in flight whatever
  // `count` is. `on_result(k, result)` gets each result in
  // order on the calling thread; an error it returns cancels the stream
  // and is returned. Otherwise the first failed step's error, converted as
  // Run's; the steps before it have all been handed to on_result.
  absl::Status RunSteps(
      absl::string_view session, int64_t count,
      const std::function<std::vector<TensorSlice>(int64_t step)>& inputs,
      const std::function<absl::Status(int64_t step, RunResult result)>& on_result, int ahead = 2);
  // One step through RunInline only (client/run_inline.cc): OUT_OF_RANGE,
  // with nothing run, when the inputs or the program's outputs are over
  // 1 MiB.
  absl::StatusOr<RunResult> RunInline(absl::string_view session,
                                      const tensor::NamedTensors& inputs);
  // Training: changes optimizer variables (e.g. {"lr", 1e-3}) for later runs.
  absl::StatusOr<v1::OptimizerInfo> SetOptimizer(absl::string_view session,
                                                 const std::map<std::string, double>& variables);

  // JobService (client/jobs.cc). Job ids are "17", or "17.3" in a sweep.
  // NOT_FOUND when the server does not hold a blob with this SHA-256.
  absl::StatusOr<v1::BlobRef> StatBlob(absl::string_view sha256);
  // Puts the file at `path` into the blob store: hashes it (common/sha256.h,
  // read in kFileChunkBytes pieces: bounded memory whatever its size), asks
  // StatBlob, and uploads only when the server lacks those bytes (then
  // already_stored is false) in 1 MiB chunks, the first carrying sha256 and
  // total_bytes. `what` names the file in messages ("--inputs file").
  // Errors: the file's (client/files.h: NOT_FOUND, INVALID_ARGUMENT for an
  // empty or non-regular file); the server's RESOURCE_EXHAUSTED (a store
  // bound, named); DATA_LOSS when the file changed between hashing and
  // uploading (the server's check, or this client's when it got shorter):
  // nothing is stored, upload again.
  absl::StatusOr<v1::BlobRef> PutBlobFile(absl::string_view path, absl::string_view what = "file");
  // CompileService (client/compile.cc): compiles on the server the model blob
  // request.model_sha256() names (PutBlobFile it first). With a non-empty
  // `ipx_path` the executable comes back and is written there (through
  // "<ipx_path>.part", renamed once complete and its content hash checked).
  // A compile that ran out of IPU memory sets `failure_report_json`
  // (optional) to the plan that did not fit before its INVALID_ARGUMENT.
  absl::StatusOr<v1::CompileResult> Compile(v1::CompileRequest request,
                                            absl::string_view ipx_path = "",
                                            std::string* failure_report_json = nullptr);
  // The jobs made (one, or one per value of request.sweep()).
  absl::StatusOr<std::vector<v1::Job>> SubmitJob(const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request = {});
  absl::StatusOr<v1::Job> GetJob(absl::string_view id);
  absl::StatusOr<v1::Job> CancelJob(absl::string_view id);
  absl::StatusOr<v1::Job> HoldJob(absl::string_view id);
  absl::StatusOr<v1::Job> ReleaseJob(absl::string_view id);
  absl::StatusOr<v1::DeleteJobResponse> DeleteJob(absl::string_view id);
  // Calls `on_event` (on this thread) for each event of job `id` from
  // `from_event` on; with `follow` the stream stays open until the job has
  // finished. Returns OK when the server ended the stream. The stream's
  // deadline is `timeout` when finite; else stream_timeout without `follow`
  // and none with it. DEADLINE_EXCEEDED "watching job ID: still open after
  // T" when a finite `timeout` passed.
  absl::Status WatchJob(absl::string_view id, uint64_t from_event, bool follow,
                        const std::function<void(const v1::JobEvent&)>& on_event,
                        absl::Duration timeout = absl::InfiniteDuration());
  // Downloads result `file` of job `id` to `dest`, resumably: the bytes go to
  // "<dest>.part", and an existing .part (a dropped download) is continued
  // from its size; at the end its size and SHA-256 are checked against
  // `file` and it is renamed to `dest` (replacing it). On a failed transfer
  // the .part stays for the next attempt. Errors: the server's (NOT_FOUND,
  // PERMISSION_DENIED, FAILED_PRECONDITION when purged...); UNAVAILABLE when
  // the stream ended short (run again to resume); DATA_LOSS when the bytes do
  // not hash to file.sha256() (the .part is removed: run again to download it
  // afresh); INTERNAL when the server sent chunks out of order or too many
  // bytes; NOT_FOUND / PERMISSION_DENIED / RESOURCE_EXHAUSTED (disk full) /
  // INTERNAL for the local file, naming it.
  absl::StatusOr<FetchedResult> FetchResult(absl::string_view id, const v1::ResultFile& file,
                                            absl::string_view dest,
                                            const FetchProgress& on_progress = {});

  // AccountingService (client/client.cc; proto/ipupod/v1/accounting.proto):
  // the usage ledger, summed (like sreport) and listed (like sacct).
  absl::StatusOr<v1::GetUsageResponse> GetUsage(const v1::GetUsageRequest& request);
  absl::StatusOr<v1::ListHistoryResponse> ListHistory(const v1::ListHistoryRequest& request);

  // AuditService (proto/ipupod/v1/audit.proto): one page of the audit log,
  // oldest first; follow next_page_token (as page_token) for the next.
  // PERMISSION_DENIED unless the caller is an admin.
  absl::StatusOr<v1::ListAuditResponse> ListAudit(const v1::ListAuditRequest& request);

  // Starts the Attach stream in the background and returns at once; errors
  // (bad input, nothing free without `wait`, unreachable server) surface from
  // AttachCall::WaitForGrant.
  std::unique_ptr<AttachCall> StartAttach(const v1::AttachRequest& request);

 private:
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel);

  // Runs one unary RPC: context with deadline and identity, conversion
  // (defined in client/unary_call.h).
  template <typename Response, typename Invoke>
  absl::StatusOr<Response> Call(absl::string_view method, Invoke invoke);
  // JobService's unary calls on one job id.
  template <typename Response, typename Method>
  absl::StatusOr<Response> CallOnJob(absl::string_view name, absl::string_view id, Method method);
  absl::StatusOr<v1::BlobRef> PutBlob(absl::string_view path, absl::string_view what,
                                      absl::string_view sha256, uint64_t size_bytes);
  // Streams result `file` from byte `offset` into the open file `fd`.
  absl::Status DownloadResult(absl::string_view id, const v1::ResultFile& file, int fd,
                              absl::string_view part, uint64_t offset,
                              const FetchProgress& on_progress);
  absl::StatusOr<tensor::NamedTensors> ReadTensors(const v1::ReadWeightsRequest& request);
  // Run's choice (client/run_inline.cc): the inline step's result, or
  // nullopt when this step must take the stream (too large, the session's
  // outputs too large, or a server without RunInline).
  std::optional<absl::StatusOr<RunResult>> RunInlineIfSmall(absl::string_view session,
                                                            const tensor::NamedTensors& inputs);
  // Deadline (now + timeout) and identity metadata on a fresh context.
  void PrepareContext(grpc::ClientContext& context, absl::Duration timeout) const;
  // The conversion of a finished streaming call (stream_timeout).
  absl::Status StreamStatus(const grpc::Status& status, const grpc::ClientContext& context,
                            absl::string_view method) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PodService::Stub> pod_;
  std::unique_ptr<v1::PartitionService::Stub> partitions_;
  std::shared_ptr<v1::SessionService::Stub> sessions_;
  std::unique_ptr<v1::ExecutionService::Stub> execution_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::AccountingService::Stub> accounting_;
  std::unique_ptr<v1::AuditService::Stub> audit_;
  std::unique_ptr<v1::CompileService::Stub> compile_;

  // Run's memory of where RunInline does not serve (client/run_inline.cc):
  // sessions whose program's outputs are over the inline bound (at most
  // kStreamSessionsMax, then forgotten all at once: a forgotten session
  // costs one refused round trip), and a server without the method.
  static constexpr size_t kStreamSessionsMax = 256;
  absl::Mutex inline_mu_;
  std::vector<std::string> stream_sessions_ ABSL_GUARDED_BY(inline_mu_);
  bool inline_unimplemented_ ABSL_GUARDED_BY(inline_mu_) = false;
};

// One attach session on SessionService.Hold: queued -> granted -> (held) ->
// ended. The stream is read by gRPC's callback threads (no thread of its own
// per session); the methods below wait on what it saw. Release() closes the
// client's side of the stream, on which the server detaches the session and
// confirms it (proto/ipupod/v1/pod.proto, Hold): an attach + detach costs two
// exchanges on one stream.
//
// Errors of WaitForGrant: the stream's status (INVALID_ARGUMENT, NOT_FOUND,
// RESOURCE_EXHAUSTED without `wait`, DEADLINE_EXCEEDED when the server's
// wait_timeout passed, PERMISSION_DENIED, ...), UNAVAILABLE when the server
// cannot be reached or went away while queued, CANCELLED after Cancel().
// Ends of a granted session (WaitForEnd): ABORTED when it was detached
// elsewhere (owner or admin, forced partition removal) or the server cancelled
// it (its lease ran out); the server's own status otherwise (e.g. UNAVAILABLE
// "server is shutting down", device-error payloads kept); UNAVAILABLE
// "connection to ipupodd lost; session ... has ended ..." when the connection
// broke (server killed, network down: noticed by keepalive); CANCELLED when
// this client released it.
class AttachCall {
 public:
  // Cancels the stream (releasing the session, if any) and waits (bounded)
  // for gRPC's last reaction to it.
  ~AttachCall();
  AttachCall(const AttachCall&) = delete;
  AttachCall& operator=(const AttachCall&) = delete;

  // Blocks until the grant or the end of the stream. `on_queued` (may be
  // empty) runs on the calling thread for every queue position the server
  // sends, in order. Without `wait` in the request the wait is bounded by the
  // rpc timeout; with wait_timeout_seconds T by T plus the rpc timeout; with
  // neither it lasts until the grant, an error, or Cancel().
  // REQUIRES: called at most once.
  absl::StatusOr<v1::SessionInfo> WaitForGrant(
      const std::function<void(const v1::QueuePosition&)>& on_queued);

  // Waits up to `timeout` for the session to end. Returns the reason it ended
  // (see the class comment), or DEADLINE_EXCEEDED "still alive" if it has not
  // ended by then (Ended() tells the two apart). Zero timeout = poll.
  absl::Status WaitForEnd(absl::Duration timeout);
  bool Ended() const;

  // Cancels the stream: a waiting request leaves the queue at once, a
  // granted session ends and its IPUs are released. Idempotent, non-blocking,
  // safe from any thread.
  void Cancel();

  // Ends a granted session deterministically: closes the client's side of
  // the stream, on which the server detaches the session (exactly as the
  // Detach RPC) and ends the stream, so its IPUs are free when this returns
  // OK; bounded by the rpc timeout, then the stream is cancelled. OK also
  // when the session had already ended. Without a grant it is Cancel() plus
  // a bounded wait.
  absl::Status Release();

  // The id of the granted session, "" before the grant.
  std::string session() const;

  // The server's preemption notice, once it came: the session runs in a
  // preemptible QoS and must give its IPUs back before the notice's deadline.
  std::optional<v1::Preemption> preempted() const;

 private:
  friend class Client;
  class Stream;  // the Hold call's reactor and everything it saw (client/attach_call.cc)
  explicit AttachCall(std::unique_ptr<Stream> stream);

  std::unique_ptr<Stream> stream_;
};

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_CLIENT_H_
