// ExecutionService on an in-process PodServer (ephemeral loopback port),
// driven through the generated sync stub: uploads (chunked, cache hits,
// hash and size errors), loads (IPU counts, memory charged and freed), runs
// checked against graph::Interpreter, weights round trips and errors, and
// how resets and faults surface.
#include "server/execution_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/wire/tensor_stream.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "device/runtime/program.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ipupod/v1/execution.grpc.pb.h"
#include "ipupod/v1/pod.grpc.pb.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/support/eventually.h"
#include "tests/support/models.h"
#include "tests/support/test_server.h"
#include <unistd.h>

namespace ipupod::server {
namespace {

using graph::testing::kFloat;
using graph::testing::OnnxBuilder;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using wire::StreamTensors;
using wire::TensorAssembler;

constexpr auto kRpcTimeout = std::chrono::seconds(30);
constexpr size_t kChunk = size_t{1} << 20;

std::vector<float> Ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(int(i % 13) - 6);
  return v;
}

// x[4, 8] -> fc1 [8, hidden] -> Relu -> fc2 [hidden, 4] -> y[4, 4].
std::string MlpBytes(int64_t hidden) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {4, 8});
  b.Output("y", kFloat, {4, 4});
  b.Floats("fc1.w", {8, hidden}, Ramp(8 * hidden, 0.1f));
  b.Floats("fc2.w", {hidden, 4}, Ramp(hidden * 4, 0.05f));
  b.Node("MatMul", {"x", "fc1.w"}, {"h"}, "/fc1/MatMul");
  b.Node("Relu", {"h"}, {"hr"}, "/act/Relu");
  b.Node("MatMul", {"hr", "fc2.w"}, {"y"}, "/fc2/MatMul");
  return b.Bytes();
}

struct Compiled {
  std::string onnx;
  std::string ipx;
  std::string sha256;
};

Compiled CompileModel(std::string onnx, const std::string& config = "",
                      const compiler::CompileOptions& options = {}) {
  Compiled c;
  c.onnx = std::move(onnx);
  compiler::IpuConfig ipu_config;
  const absl::Status set = compiler::UpdateFromString(ipu_config, config);
  EXPECT_TRUE(set.ok()) << set;
  absl::StatusOr<compiler::Executable> exe = compiler::Compile(c.onnx, ipu_config, options);
  EXPECT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::string> ipx = compiler::WriteExecutable(*exe);
  EXPECT_TRUE(ipx.ok()) << ipx.status();
  c.ipx = *ipx;
  c.sha256 = exe->content_hash;
  return c;
}

Compiled CompileMlp(int64_t hidden) { return CompileModel(MlpBytes(hidden)); }

int64_t HostBytes(const Compiled& c) {
  auto executable = compiler::ReadExecutable(c.ipx);
  EXPECT_TRUE(executable.ok()) << executable.status();
  auto report = compiler::ReportFromJson(executable->report_json);
  EXPECT_TRUE(report.ok()) << report.status();
  return runtime::HostMemoryBytes(*report);
}

tensor::Tensor Floats(tensor::Shape shape, const std::vector<float>& values) {
  return *tensor::Tensor::FromValues<float>(std::move(shape), values);
}

std::string Trailer(const grpc::ClientContext& context, const std::string& key) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(key);
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

template <typename Request>
void SendTensors(const tensor::NamedTensors& tensors,
                 const std::function<bool(const Request&)>& write) {
  absl::Status sent = StreamTensors(
      tensors,
      [&](const v1::TensorHeader& h) {
        Request r;
        *r.mutable_header() = h;
        return write(r);
      },
      [&](absl::string_view chunk) {
        Request r;
        r.mutable_data()->set_data(chunk.data(), chunk.size());
        return write(r);
      });
  (void)sent;  // a write fails when the server ends the call early; Finish says why
}

// Collects header + data responses into tensors.
template <typename Response>
class Collector {
 public:
  bool Add(const Response& r) {
    if (r.has_header()) {
      if (!assembler_.AddHeader(r.header()).ok()) return false;
    } else if (r.has_data()) {
      if (!assembler_.AddData(r.data().data()).ok()) return false;
    }
    return true;
  }
  tensor::NamedTensors Finish() { return *assembler_.Finish(); }

 private:
  TensorAssembler assembler_{"responses", int64_t{1} << 32};
};

// One caller of the pod and execution services.
class Caller {
 public:
  Caller(const std::string& address, std::string user,
         const grpc::ChannelArguments& args = grpc::ChannelArguments())
      : channel_(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)),
        user_(std::move(user)),
        pod_(v1::PodService::NewStub(channel_)),
        session_(v1::SessionService::NewStub(channel_)),
        exec_(v1::ExecutionService::NewStub(channel_)) {}

  std::unique_ptr<grpc::ClientContext> Context() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
    if (!user_.empty()) context->AddMetadata("x-ipupod-user", user_);
    return context;
  }
  v1::PodService::Stub& pod() { return *pod_; }
  v1::SessionService::Stub& session() { return *session_; }
  v1::ExecutionService::Stub& exec() { return *exec_; }

  grpc::Status Upload(const std::string& bytes, const std::string& sha256, v1::ExecutableRef* ref,
                      size_t chunk = kChunk, uint64_t total = 0) {
    auto context = Context();
    auto writer = exec_->UploadExecutable(context.get(), ref);
    for (size_t offset = 0; offset == 0 || offset < bytes.size(); offset += chunk) {
      v1::ExecutableChunk c;
      if (offset == 0) {
        c.set_sha256(sha256);
        c.set_total_bytes(total != 0 ? total : bytes.size());
      }
      c.set_data(bytes.substr(offset, chunk));
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }
  grpc::Status Stat(const std::string& sha256, v1::ExecutableRef* ref = nullptr) {
    v1::ExecutableRef unused;
    v1::StatExecutableRequest request;
    request.set_sha256(sha256);
    auto context = Context();
    return exec_->StatExecutable(context.get(), request, ref ? ref : &unused);
  }
  grpc::Status Load(const std::string& session, const std::string& sha256,
                    v1::LoadedProgram* loaded = nullptr, grpc::ClientContext* context = nullptr) {
    v1::LoadedProgram unused;
    v1::LoadRequest request;
    request.set_session(session);
    request.set_sha256(sha256);
    auto own = Context();
    return exec_->Load(context ? context : own.get(), request, loaded ? loaded : &unused);
  }
  grpc::Status GetLoaded(const std::string& session, v1::LoadedProgram* loaded) {
    v1::GetLoadedRequest request;
    request.set_session(session);
    auto context = Context();
    return exec_->GetLoaded(context.get(), request, loaded);
  }
  grpc::Status WriteWeights(const std::string& session, const tensor::NamedTensors& tensors,
                            v1::WriteWeightsResponse* response = nullptr) {
    v1::WriteWeightsResponse unused;
    auto context = Context();
    auto writer = exec_->WriteWeights(context.get(), response ? response : &unused);
    v1::WriteWeightsRequest first;
    first.set_session(session);
    if (writer->Write(first)) {
      SendTensors<v1::WriteWeightsRequest>(
          tensors, [&](const v1::WriteWeightsRequest& r) { return writer->Write(r); });
    }
    writer->WritesDone();
    return writer->Finish();
  }
  grpc::Status ReadWeights(const std::string& session, const std::vector<std::string>& names,
                           tensor::NamedTensors* out) {
    v1::ReadWeightsRequest request;
    request.set_session(session);
    for (const auto& n : names) request.add_names(n);
    auto context = Context();
    auto reader = exec_->ReadWeights(context.get(), request);
    Collector<v1::ReadWeightsResponse> collector;
    v1::ReadWeightsResponse r;
    size_t max_chunk = 0;
    while (reader->Read(&r)) {
      if (r.has_data()) max_chunk = std::max(max_chunk, r.data().data().size());
      EXPECT_TRUE(collector.Add(r));
    }
    EXPECT_LE(max_chunk, kChunk);
    grpc::Status status = reader->Finish();
    if (status.ok()) *out = collector.Finish();
    return status;
  }
  // One step; `context` (optional) receives the trailers.
  grpc::Status Run(const std::string& session, const tensor::NamedTensors& inputs,
                   tensor::NamedTensors* outputs, v1::RunStats* stats,
                   grpc::ClientContext* context = nullptr) {
    auto own = Context();
    auto stream = exec_->Run(context ? context : own.get());
    v1::RunRequest first;
    first.set_session(session);
    if (stream->Write(first)) {
      SendTensors<v1::RunRequest>(inputs,
                                  [&](const v1::RunRequest& r) { return stream->Write(r); });
    }
    stream->WritesDone();
    Collector<v1::RunResponse> collector;
    v1::RunResponse r;
    while (stream->Read(&r)) {
      if (r.has_stats() && stats != nullptr) *stats = r.stats();
      collector.Add(r);
    }
    grpc::Status status = stream->Finish();
    if (status.ok() && outputs != nullptr) *outputs = collector.Finish();
    return status;
  }
  std::vector<uint64_t> MemoryUsed(const std::vector<int>& ipus) {
    v1::GetPodInfoResponse info;
    auto context = Context();
    EXPECT_TRUE(pod_->GetPodInfo(context.get(), {}, &info).ok());
    std::vector<uint64_t> used;
    for (int ipu : ipus) used.push_back(info.ipus(ipu).memory_used_bytes());
    return used;
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::string user_;
  std::unique_ptr<v1::PodService::Stub> pod_;
  std::unique_ptr<v1::SessionService::Stub> session_;
  std::unique_ptr<v1::ExecutionService::Stub> exec_;
};

// An open attach stream: the session lives while it does.
class Attached {
 public:
  Attached(Caller& caller, int num_ipus) : context_(caller.Context()) {
    v1::AttachRequest request;
    request.set_num_ipus(static_cast<uint32_t>(num_ipus));
    request.set_client("execution_service_test");
    reader_ = caller.session().Attach(context_.get(), request);
    v1::AttachEvent event;
    while (reader_->Read(&event)) {
      if (event.has_granted()) {
        info_ = event.granted();
        break;
      }
    }
  }
  ~Attached() {
    context_->TryCancel();
    reader_->Finish().ok();
  }
  const std::string& id() const { return info_.session(); }
  std::vector<int> ipus() const { return {info_.ipus().begin(), info_.ipus().end()}; }

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReader<v1::AttachEvent>> reader_;
  v1::SessionInfo info_;
};

class ExecutionServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    mlp_ = new Compiled(CompileMlp(16));
    big_ = new Compiled(CompileMlp(160'000));  // fc1.w: 8 x 160000 floats = 5.1 MB
  }
  static void TearDownTestSuite() {
    delete mlp_;
    delete big_;
  }
  void SetUp() override { StartServer(); }
  // A fresh server (state and all), its config changed by `adjust` if given.
  void StartServer(test_support::ConfigAdjust adjust = nullptr) {
    server_.reset();
    auto server = test_support::TestServer::Start(std::move(adjust));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    alice_ = std::make_unique<Caller>(Address(), "alice");
    bob_ = std::make_unique<Caller>(Address(), "bob");
    admin_ = std::make_unique<Caller>(Address(), "admin");
  }
  std::string Address() const { return server_->address(); }
  void MustUpload(const Compiled& c) {
    v1::ExecutableRef ref;
    grpc::Status s = alice_->Upload(c.ipx, c.sha256, &ref);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  void MustLoad(const Attached& session, const Compiled& c, v1::LoadedProgram* loaded = nullptr) {
    MustUpload(c);
    grpc::Status s = alice_->Load(session.id(), c.sha256, loaded);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  tensor::NamedTensors Inputs() { return {{"x", Floats({4, 8}, Ramp(32, 0.3f))}}; }
  // y from the interpreter on the model's own graph.
  tensor::Tensor Reference(const std::string& onnx, const tensor::Tensor& x) {
    absl::StatusOr<graph::Graph> g = graph::ImportOnnx(onnx);
    EXPECT_TRUE(g.ok()) << g.status();
    auto interpreter = graph::Interpreter::Create(*std::move(g));
    EXPECT_TRUE(interpreter.ok()) << interpreter.status();
    auto out = (*interpreter)->Run({x});
    EXPECT_TRUE(out.ok()) << out.status();
    return (*out)[0];
  }
  grpc::Status InjectFault(int ipu, v1::FaultKind kind) {
    v1::InjectFaultRequest request;
    request.set_ipu(static_cast<uint32_t>(ipu));
    request.set_kind(kind);
    v1::InjectFaultResponse response;
    auto context = admin_->Context();
    return admin_->pod().InjectFault(context.get(), request, &response);
  }
  grpc::Status ResetSession(const std::string& session) {
    v1::ResetSessionRequest request;
    request.set_session(session);
    v1::ResetResponse response;
    auto context = alice_->Context();
    return alice_->session().ResetSession(context.get(), request, &response);
  }

  static Compiled* mlp_;
  static Compiled* big_;
  std::unique_ptr<test_support::TestServer> server_;
  std::unique_ptr<Caller> alice_, bob_, admin_;
};

Compiled* ExecutionServiceTest::mlp_ = nullptr;
Compiled* ExecutionServiceTest::big_ = nullptr;

// ---------------------------------------------------------------- upload

TEST_F(ExecutionServiceTest, UploadInChunksThenStatAndASecondUploadHits) {
  EXPECT_EQ(alice_->Stat(big_->sha256).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_GT(big_->ipx.size(), 4 * kChunk);
  v1::ExecutableRef ref;
  grpc::Status s = alice_->Upload(big_->ipx, big_->sha256, &ref, kChunk);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(ref.sha256(), big_->sha256);
  EXPECT_EQ(ref.size_bytes(), big_->ipx.size());
  EXPECT_FALSE(ref.cache_hit());
  EXPECT_EQ(ref.mode(), "inference");
  EXPECT_EQ(ref.ipus_needed(), 1u);
  EXPECT_EQ(ref.ipus_reserved(), 1u);
  v1::ExecutableRef stat;
  ASSERT_TRUE(alice_->Stat(big_->sha256, &stat).ok());
  EXPECT_EQ(stat.size_bytes(), big_->ipx.size());
  ASSERT_TRUE(bob_->Upload(big_->ipx, big_->sha256, &ref, 300'000).ok());
  EXPECT_TRUE(ref.cache_hit());
}

// Issue 11: a content hash is no capability. Another user's executable is
// NOT_FOUND to bob (worded as one never uploaded) until bob uploads the
// same bytes himself, which hits the one stored copy.
TEST_F(ExecutionServiceTest, ExecutablesAreScopedToTheirUploaders) {
  Attached session(*bob_, 1);
  MustUpload(*mlp_);
  grpc::Status stat = bob_->Stat(mlp_->sha256);
  grpc::Status load = bob_->Load(session.id(), mlp_->sha256);
  EXPECT_EQ(stat.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(load.error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string never(64, 'c');
  grpc::Status unknown = bob_->Stat(never);
  EXPECT_EQ(stat.error_message(),
            absl::StrReplaceAll(unknown.error_message(), {{never, mlp_->sha256}}));
  v1::ExecutableRef ref;
  ASSERT_TRUE(bob_->Upload(mlp_->ipx, mlp_->sha256, &ref).ok());
  EXPECT_TRUE(ref.cache_hit());
  EXPECT_TRUE(bob_->Load(session.id(), mlp_->sha256).ok());
}

TEST_F(ExecutionServiceTest, StatNeedsAWellFormedHash) {
  EXPECT_EQ(alice_->Stat("abc").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status s = alice_->Stat(std::string(64, 'a'));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ExecutionServiceTest, UploadErrorsStoreNothing) {
  v1::ExecutableRef ref;
  const std::string other(64, 'b');
  grpc::Status s = alice_->Upload(mlp_->ipx, other, &ref);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("the executable's header says " + mlp_->sha256));

  std::string corrupted = mlp_->ipx;
  corrupted[corrupted.size() / 2] ^= 0x40;
  s = alice_->Upload(corrupted, mlp_->sha256, &ref);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(s.error_message(), HasSubstr("upload it again"));

  std::string big_chunk(kChunk + 1, 'x');
  s = alice_->Upload(big_chunk, mlp_->sha256, &ref, kChunk + 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("over the 1 MiB limit"));

  s = alice_->Upload(mlp_->ipx.substr(0, 100), mlp_->sha256, &ref, kChunk, mlp_->ipx.size());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("ended after 100 of the declared"));

  s = alice_->Upload(mlp_->ipx, "not-a-hash", &ref);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // An .ipx cut inside its header (the magic and a few bytes) is refused before it is read.
  s = alice_->Upload(mlp_->ipx.substr(0, 20), mlp_->sha256, &ref);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("too small for an executable"));
  EXPECT_EQ(alice_->Stat(mlp_->sha256).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ExecutionServiceTest, UploadLargerThanTheCacheIsRefused) {
  StartServer([](ServerConfig& config) { config.executable_cache_mb = 1; });
  v1::ExecutableRef ref;
  grpc::Status s = alice_->Upload(big_->ipx, big_->sha256, &ref);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--executable-cache-mb"));
}

TEST_F(ExecutionServiceTest, CallsNeedAUser) {
  Caller anonymous(Address(), "");
  EXPECT_EQ(anonymous.Stat(mlp_->sha256).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// ---------------------------------------------------------------- load and run

TEST_F(ExecutionServiceTest, OperationsNeedALoadAndTheirOwnSession) {
  Attached session(*alice_, 1);
  tensor::NamedTensors out;
  v1::RunStats stats;
  grpc::Status s = alice_->Run(session.id(), Inputs(), &out, &stats);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "no executable is loaded in session " + session.id() +
                                   ": load one first (ipupod run loads it for you)");
  v1::LoadedProgram loaded;
  EXPECT_EQ(alice_->GetLoaded(session.id(), &loaded).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(alice_->WriteWeights(session.id(), {}).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  MustUpload(*mlp_);
  EXPECT_EQ(bob_->Load(session.id(), mlp_->sha256).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(alice_->Load("s9-9", mlp_->sha256).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(alice_->Load(session.id(), std::string(64, 'c')).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(alice_->Load("", mlp_->sha256).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ExecutionServiceTest, LoadNeedsTheExecutablesIpuCount) {
  Attached session(*alice_, 2);
  MustUpload(*mlp_);
  grpc::Status s = alice_->Load(session.id(), mlp_->sha256);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("needs 1 IPUs (reserves 1) but session"));
  EXPECT_THAT(s.error_message(), HasSubstr("has 2; attach with 1 IPUs (ipupod attach --ipus 1)"));
  EXPECT_THAT(alice_->MemoryUsed(session.ipus()), ElementsAre(0u, 0u));
}

TEST_F(ExecutionServiceTest, LoadAndRunMatchTheInterpreter) {
  Attached session(*alice_, 1);
  v1::LoadedProgram loaded;
  MustLoad(session, *mlp_, &loaded);
  EXPECT_EQ(loaded.session(), session.id());
  EXPECT_EQ(loaded.executable().sha256(), mlp_->sha256);
  EXPECT_EQ(loaded.run_shape().samples_per_step(), 4u);
  ASSERT_EQ(loaded.inputs_size(), 1);
  EXPECT_EQ(loaded.inputs(0).name(), "x");
  EXPECT_THAT(loaded.inputs(0).shape(), ElementsAre(4, 8));
  ASSERT_EQ(loaded.outputs_size(), 1);
  EXPECT_EQ(loaded.weights_size(), 2);
  ASSERT_EQ(loaded.memory_size(), 1);
  EXPECT_GT(loaded.memory(0).used_bytes(), 0u);
  EXPECT_GT(loaded.simulated_load_seconds(), 0);
  EXPECT_THAT(alice_->MemoryUsed(session.ipus()), ElementsAre(loaded.memory(0).used_bytes()));

  tensor::NamedTensors out;
  v1::RunStats stats;
  grpc::Status s = alice_->Run(session.id(), Inputs(), &out, &stats);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first, "y");
  EXPECT_EQ(out[0].second, Reference(mlp_->onnx, Inputs()[0].second));
  EXPECT_EQ(stats.samples(), 4u);
  EXPECT_EQ(stats.run_index(), 1u);
  EXPECT_GT(stats.flops(), 0u);
  EXPECT_GT(stats.simulated_seconds(), 0);
  ASSERT_TRUE(alice_->Run(session.id(), Inputs(), &out, &stats).ok());
  EXPECT_EQ(stats.run_index(), 2u);
  ASSERT_TRUE(alice_->GetLoaded(session.id(), &loaded).ok());
  EXPECT_EQ(loaded.runs(), 2u);
}

// Two users' sessions run steps at the same time: each step waits its turn
// for the server's compute (runtime::ComputeGate) and every result is right.
TEST_F(ExecutionServiceTest, ConcurrentSessionsShareComputeAndAllFinish) {
  Attached first(*alice_, 1);
  Attached second(*bob_, 1);
  MustLoad(first, *mlp_);
  v1::ExecutableRef ref;
  ASSERT_TRUE(bob_->Upload(mlp_->ipx, mlp_->sha256, &ref).ok());
  ASSERT_TRUE(bob_->Load(second.id(), mlp_->sha256, nullptr).ok());
  const tensor::Tensor want = Reference(mlp_->onnx, Inputs()[0].second);
  std::atomic<int> ok{0};
  auto steps = [&](Caller& caller, const std::string& session) {
    for (int i = 0; i < 5; ++i) {
      tensor::NamedTensors out;
      v1::RunStats stats;
      grpc::Status s = caller.Run(session, Inputs(), &out, &stats);
      if (s.ok() && out.size() == 1 && out[0].second == want) ++ok;
    }
  };
  std::thread a([&] { steps(*alice_, first.id()); });
  std::thread b([&] { steps(*bob_, second.id()); });
  a.join();
  b.join();
  EXPECT_EQ(ok.load(), 10);
}

// x[1024, 1024] through 256 MatMuls by one 1024 x 1024 weight: 2^38
// multiply-adds, many seconds of one core in one step.
Compiled CompileLongStep() {
  constexpr int64_t kWidth = 1024;
  OnnxBuilder b(14);
  b.Input("x", kFloat, {kWidth, kWidth});
  b.Output("y", kFloat, {kWidth, kWidth});
  std::vector<float> w(static_cast<size_t>(kWidth * kWidth), 0.0f);
  for (int64_t i = 0; i < kWidth; ++i) w[static_cast<size_t>(i * kWidth + i)] = 1.0f;
  b.Floats("w", {kWidth, kWidth}, w);
  std::string in = "x";
  for (int l = 0; l < 256; ++l) {
    const std::string out = l == 255 ? "y" : absl::StrCat("h", l);
    b.Node("MatMul", {in, "w"}, {out}, absl::StrCat("/layer", l, "/MatMul"));
    in = out;
  }
  Compiled c;
  c.onnx = b.Bytes();
  absl::StatusOr<compiler::Executable> exe = compiler::Compile(c.onnx, compiler::IpuConfig(), {});
  EXPECT_TRUE(exe.ok()) << exe.status();
  c.ipx = *compiler::WriteExecutable(*exe);
  c.sha256 = exe->content_hash;
  return c;
}

// Issue 29: one user's long step held the compute gate for its whole length
// while other users' tiny steps waited, and a cancel reached no step that had
// started. Now the long step yields the gate every ComputeGate::kSliceTime
// at its interrupt points, so bob's step waits at most a slice and one
// interrupt point's gap (docs/design.md, "Threads"), and alice's cancel ends
// her step within a second.
TEST_F(ExecutionServiceTest, ALongStepYieldsComputeToASmallOneAndStopsWhenCancelled) {
  const Compiled slow = CompileLongStep();
  Attached long_session(*alice_, 1);
  Attached small_session(*bob_, 1);
  MustLoad(long_session, slow);
  v1::ExecutableRef ref;
  ASSERT_TRUE(bob_->Upload(mlp_->ipx, mlp_->sha256, &ref).ok());
  ASSERT_TRUE(bob_->Load(small_session.id(), mlp_->sha256, nullptr).ok());

  std::unique_ptr<grpc::ClientContext> long_context = alice_->Context();
  grpc::Status long_status;
  std::thread long_step([&] {
    tensor::NamedTensors out;
    v1::RunStats stats;
    const tensor::Tensor x = Floats({1024, 1024}, std::vector<float>(1024 * 1024, 0.5f));
    long_status = alice_->Run(long_session.id(), {{"x", x}}, &out, &stats, long_context.get());
  });
  // The long step computes (the compute gate, of one slot, its own) ...
  ASSERT_EQ(server_->config().compute_threads, 0) << "one step computes at a time";
  ASSERT_TRUE(
      test_support::Eventually([&] { return server_->server().ComputeStepsRunning() == 1; }));
  const absl::Time small_start = absl::Now();
  tensor::NamedTensors out;
  v1::RunStats stats;
  grpc::Status small = bob_->Run(small_session.id(), Inputs(), &out, &stats);
  const absl::Duration small_took = absl::Now() - small_start;
  ASSERT_TRUE(small.ok()) << small.error_message();
  EXPECT_EQ(out[0].second, Reference(mlp_->onnx, Inputs()[0].second));
  // ... and bob's tiny step is not held for its length (seconds).
  EXPECT_LT(small_took, absl::Milliseconds(1500)) << "bob's step waited for alice's";

  const absl::Time cancelled = absl::Now();
  long_context->TryCancel();
  long_step.join();
  EXPECT_LT(absl::Now() - cancelled, absl::Seconds(1)) << "the cancel waited for the step";
  EXPECT_EQ(long_status.error_code(), grpc::StatusCode::CANCELLED) << long_status.error_message();
  std::printf("bob's small step behind alice's long one: %.3f s\n",
              absl::ToDoubleSeconds(small_took));
}

TEST_F(ExecutionServiceTest, RunInputErrorsNameTheInput) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  v1::RunStats stats;
  grpc::Status s = alice_->Run(session.id(), {{"x", Floats({2, 8}, Ramp(16, 1))}}, nullptr, &stats);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("x"));
  s = alice_->Run(session.id(), {{"x", Floats({40, 8}, Ramp(320, 1))}}, nullptr, &stats);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("all this program can take"));
  v1::LoadedProgram loaded;
  ASSERT_TRUE(alice_->GetLoaded(session.id(), &loaded).ok());
  EXPECT_EQ(loaded.runs(), 0u);
}

TEST_F(ExecutionServiceTest, DetachFreesTheMemoryOfTheLoad) {
  std::vector<int> ipus;
  {
    Attached session(*alice_, 1);
    ipus = session.ipus();
    MustLoad(session, *mlp_);
    EXPECT_GT(alice_->MemoryUsed(ipus)[0], 0u);
    v1::DetachRequest request;
    request.set_session(session.id());
    v1::DetachResponse response;
    auto context = alice_->Context();
    ASSERT_TRUE(alice_->session().Detach(context.get(), request, &response).ok());
    EXPECT_THAT(alice_->MemoryUsed(ipus), ElementsAre(0u));
    v1::LoadedProgram loaded;
    EXPECT_EQ(alice_->GetLoaded(session.id(), &loaded).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(ExecutionServiceTest, LoadsBeyondTheHostMemoryBudgetAreRefusedUntilOneIsFreed) {
  auto executable = compiler::ReadExecutable(big_->ipx);
  ASSERT_TRUE(executable.ok()) << executable.status();
  auto report = compiler::ReportFromJson(executable->report_json);
  ASSERT_TRUE(report.ok()) << report.status();
  const int64_t host_bytes = runtime::HostMemoryBytes(*report);
  ASSERT_GT(host_bytes, 5'000'000);  // fc1.w alone is 5.1 MB
  // Room for one load of big_, not two.
  const int64_t budget_mb = (host_bytes * 3 / 2 + (1 << 20) - 1) >> 20;
  StartServer([budget_mb](ServerConfig& config) { config.load_memory_mb = budget_mb; });
  MustUpload(*big_);
  auto first = std::make_unique<Attached>(*alice_, 1);
  MustLoad(*first, *big_);
  Attached second(*bob_, 1);
  v1::ExecutableRef ref;  // executables are scoped to their uploaders: bob uploads it too
  ASSERT_TRUE(bob_->Upload(big_->ipx, big_->sha256, &ref).ok());
  v1::LoadedProgram loaded;
  grpc::Status s = bob_->Load(second.id(), big_->sha256, &loaded);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), AllOf(HasSubstr("of host memory"), HasSubstr("--load-memory-mb"),
                                       HasSubstr("detach sessions")));
  EXPECT_EQ(bob_->GetLoaded(second.id(), &loaded).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);  // nothing loaded
  first.reset();  // alice's session ends: her program and its host memory go
  EXPECT_TRUE(test_support::Eventually(
      [&] { return bob_->Load(second.id(), big_->sha256, &loaded).ok(); }));
}

// broadcast_buffers=false: replica 1's own copy of a 4 MB buffer is host
// memory its Load is charged; over the budget it is refused as any Load is,
// where the same model with one shared copy fits.
TEST_F(ExecutionServiceTest, TheReplicasOwnBufferCopiesCountAgainstTheHostMemoryBudget) {
  constexpr int64_t kElements = 1'000'000;
  compiler::CompileOptions options;
  options.training.buffers = {{"state", "state_next"}};
  const std::string onnx = test_support::BufferModel(kElements);
  const Compiled shared = CompileModel(onnx, "inference_replication_factor=2", options);
  const Compiled own =
      CompileModel(onnx, "inference_replication_factor=2,broadcast_buffers=false", options);
  const int64_t shared_bytes = HostBytes(shared);
  ASSERT_EQ(HostBytes(own) - shared_bytes, kElements * 4);
  // Room for the shared copy with 2 MB to spare, not for a second 4 MB copy.
  const int64_t budget_mb = (shared_bytes + (int64_t{2} << 20)) >> 20;
  ASSERT_GT(HostBytes(own), budget_mb << 20);
  StartServer([budget_mb](ServerConfig& config) { config.load_memory_mb = budget_mb; });
  Attached session(*alice_, 2);
  MustUpload(own);
  v1::LoadedProgram loaded;
  grpc::Status s = alice_->Load(session.id(), own.sha256, &loaded);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), AllOf(HasSubstr("of host memory"), HasSubstr("--load-memory-mb")));
  MustLoad(session, shared);
}

// ---------------------------------------------------------------- weights

TEST_F(ExecutionServiceTest, WeightsRoundTripInChunks) {
  Attached session(*alice_, 1);
  MustLoad(session, *big_);
  const tensor::Tensor fc1 = Floats({8, 160'000}, Ramp(8 * 160'000, -0.25f));
  ASSERT_GT(fc1.byte_size(), 4 * kChunk);
  v1::WriteWeightsResponse written;
  grpc::Status s = alice_->WriteWeights(session.id(), {{"fc1.w", fc1}}, &written);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(written.written(), ElementsAre("fc1.w"));
  EXPECT_GT(written.simulated_seconds(), 0);
  tensor::NamedTensors read;
  ASSERT_TRUE(alice_->ReadWeights(session.id(), {"fc1.w"}, &read).ok());
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].first, "fc1.w");
  EXPECT_EQ(read[0].second, fc1);
  ASSERT_TRUE(alice_->ReadWeights(session.id(), {}, &read).ok());
  ASSERT_EQ(read.size(), 2u);  // every weight, sorted by name
  EXPECT_EQ(read[0].first, "fc1.w");
  EXPECT_EQ(read[1].first, "fc2.w");
}

TEST_F(ExecutionServiceTest, WeightErrorsChangeNothing) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  tensor::NamedTensors before;
  ASSERT_TRUE(alice_->ReadWeights(session.id(), {}, &before).ok());
  const tensor::Tensor good = Floats({16, 4}, Ramp(64, 2));
  const std::vector<std::pair<tensor::NamedTensors, std::string>> cases = {
      {{{"fc2.w", good}, {"fc1.w", Floats({8, 15}, Ramp(120, 1))}}, "fc1.w"},
      {{{"fc2.w", good}, {"fc1.w", tensor::Tensor::Scalar<int64_t>(3)}}, "fc1.w"},
      {{{"fc2.w", good}, {"fc9.w", Floats({8, 16}, Ramp(128, 1))}}, "fc9.w"},
  };
  for (const auto& [tensors, name] : cases) {
    grpc::Status s = alice_->WriteWeights(session.id(), tensors);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_THAT(s.error_message(), HasSubstr(name));
  }
  tensor::NamedTensors after;
  ASSERT_TRUE(alice_->ReadWeights(session.id(), {}, &after).ok());
  EXPECT_EQ(after, before);
  EXPECT_EQ(alice_->ReadWeights(session.id(), {"nope"}, &after).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ExecutionServiceTest, MalformedTensorStreamsAreRejected) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  auto context = alice_->Context();
  v1::WriteWeightsResponse response;
  auto writer = alice_->exec().WriteWeights(context.get(), &response);
  v1::WriteWeightsRequest r;
  r.set_session(session.id());
  writer->Write(r);
  v1::TensorHeader* h = r.mutable_header();
  h->set_name("fc2.w");
  h->set_dtype("bfloat16");
  h->add_shape(16);
  h->add_shape(4);
  h->set_total_bytes(128);
  writer->Write(r);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("use float32, float16, int64, int32 or bool"));
}

// ---------------------------------------------------------------- resets and faults

TEST_F(ExecutionServiceTest, AResetNeedsALoadAgain) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  ASSERT_TRUE(ResetSession(session.id()).ok());
  EXPECT_THAT(alice_->MemoryUsed(session.ipus()), ElementsAre(0u));
  tensor::NamedTensors out;
  v1::RunStats stats;
  grpc::Status s = alice_->Run(session.id(), Inputs(), &out, &stats);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "IPUs of session " + session.id() +
                                   " were reset since the executable was loaded: load it again");
  MustLoad(session, *mlp_);
  s = alice_->Run(session.id(), Inputs(), &out, &stats);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(stats.run_index(), 1u);
}

TEST_F(ExecutionServiceTest, AnInjectedFaultSurfacesOnTheNextRun) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  ASSERT_TRUE(InjectFault(session.ipus()[0], v1::FAULT_KIND_IPU_RESET).ok());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  context.AddMetadata("x-ipupod-user", "alice");
  tensor::NamedTensors out;
  v1::RunStats stats;
  grpc::Status s = alice_->Run(session.id(), Inputs(), &out, &stats, &context);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(Trailer(context, "ipupod-error-kind"), "recoverable");
  EXPECT_EQ(Trailer(context, "ipupod-recovery-action"), "IPU_RESET");
  EXPECT_EQ(Trailer(context, "ipupod-ipus"), std::to_string(session.ipus()[0]));
}

// ---------------------------------------------------------------- steps on one Run stream

// execution.proto: steps separated by end_step on one stream, written as a
// client that overlaps them would (all sent before any answer is read).
class StepStream {
 public:
  StepStream(Caller& caller, const std::string& session) : context_(caller.Context()) {
    stream_ = caller.exec().Run(context_.get());
    v1::RunRequest first;
    first.set_session(session);
    stream_->Write(first);
  }
  // One step's inputs, then end_step unless `last` (then the stream closes).
  bool Send(const tensor::NamedTensors& inputs, bool last = false) {
    bool open = true;
    SendTensors<v1::RunRequest>(
        inputs, [&](const v1::RunRequest& r) { return open = open && stream_->Write(r); });
    if (last) return open && stream_->WritesDone();
    v1::RunRequest end;
    end.mutable_end_step();
    return open && stream_->Write(end);
  }
  void Close() { stream_->WritesDone(); }
  // The next step's outputs and stats; false when the stream ended first.
  bool Receive(tensor::NamedTensors* outputs, v1::RunStats* stats) {
    Collector<v1::RunResponse> collector;
    v1::RunResponse r;
    while (stream_->Read(&r)) {
      if (r.has_stats()) {
        *stats = r.stats();
        *outputs = collector.Finish();
        return true;
      }
      EXPECT_TRUE(collector.Add(r));
    }
    return false;
  }
  grpc::Status Finish() { return stream_->Finish(); }
  grpc::ClientContext& context() { return *context_; }
  grpc::ClientReaderWriter<v1::RunRequest, v1::RunResponse>& stream() { return *stream_; }

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::RunRequest, v1::RunResponse>> stream_;
};

tensor::NamedTensors StepInputs(int step) {
  return {{"x", Floats({4, 8}, Ramp(32, 0.1f * static_cast<float>(step + 1)))}};
}

TEST_F(ExecutionServiceTest, StepsOnOneRunStreamAnswerInOrder) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  StepStream steps(*alice_, session.id());
  // The last step ends with the close instead of end_step, as one step per call does.
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(steps.Send(StepInputs(k), /*last=*/k == 2));
  for (int k = 0; k < 3; ++k) {
    tensor::NamedTensors out;
    v1::RunStats stats;
    ASSERT_TRUE(steps.Receive(&out, &stats)) << "step " << k;
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].second, Reference(mlp_->onnx, StepInputs(k)[0].second)) << "step " << k;
    EXPECT_EQ(stats.run_index(), static_cast<uint64_t>(k + 1));
  }
  tensor::NamedTensors out;
  v1::RunStats stats;
  EXPECT_FALSE(steps.Receive(&out, &stats));
  grpc::Status s = steps.Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  v1::LoadedProgram loaded;
  ASSERT_TRUE(alice_->GetLoaded(session.id(), &loaded).ok());
  EXPECT_EQ(loaded.runs(), 3u);

  // end_step after the last step, then the close: the same three steps.
  StepStream closed(*alice_, session.id());
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(closed.Send(StepInputs(k)));
  closed.Close();
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(closed.Receive(&out, &stats)) << "step " << k;
  EXPECT_EQ(stats.run_index(), 6u);
  EXPECT_FALSE(closed.Receive(&out, &stats));
  EXPECT_TRUE(closed.Finish().ok());
}

TEST_F(ExecutionServiceTest, AFailedStepEndsTheRunStreamAfterTheStepsBeforeIt) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  StepStream steps(*alice_, session.id());
  steps.Send(StepInputs(0));
  steps.Send({{"x", Floats({3, 8}, Ramp(24, 0.1f))}});  // the wrong shape
  steps.Send(StepInputs(2));                            // never run
  steps.Close();
  tensor::NamedTensors out;
  v1::RunStats stats;
  ASSERT_TRUE(steps.Receive(&out, &stats));
  EXPECT_EQ(out[0].second, Reference(mlp_->onnx, StepInputs(0)[0].second));
  EXPECT_FALSE(steps.Receive(&out, &stats));
  grpc::Status s = steps.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("x"));
  v1::LoadedProgram loaded;
  ASSERT_TRUE(alice_->GetLoaded(session.id(), &loaded).ok());
  EXPECT_EQ(loaded.runs(), 1u);
  // A session message after the first is refused, after the step before it.
  StepStream twice(*alice_, session.id());
  twice.Send(StepInputs(0));
  v1::RunRequest again;
  again.set_session(session.id());
  twice.stream().Write(again);
  twice.Close();
  ASSERT_TRUE(twice.Receive(&out, &stats));
  EXPECT_FALSE(twice.Receive(&out, &stats));
  s = twice.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("end_step between steps"));
}

// Every step is its own operation on the session: a fault injected between
// two steps of one stream surfaces on the second, with its trailers.
TEST_F(ExecutionServiceTest, AFaultBetweenStepsEndsTheRunStreamWithIt) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  StepStream steps(*alice_, session.id());
  ASSERT_TRUE(steps.Send(StepInputs(0)));
  tensor::NamedTensors out;
  v1::RunStats stats;
  ASSERT_TRUE(steps.Receive(&out, &stats));
  ASSERT_TRUE(InjectFault(session.ipus()[0], v1::FAULT_KIND_IPU_RESET).ok());
  steps.Send(StepInputs(1));
  steps.Close();
  EXPECT_FALSE(steps.Receive(&out, &stats));
  grpc::Status s = steps.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(Trailer(steps.context(), "ipupod-recovery-action"), "IPU_RESET");
}

// A client that sends steps and reads no answers: the server reads one step
// at a time, so once its writes are held (flow control) it reads no more,
// the client's writes are held in turn, and the idle watch ends the call.
// The steps the server took stay a window's worth, not what the client
// tried to send.
TEST_F(ExecutionServiceTest, ARunStreamWhoseClientStopsReadingIsHeldAndEnded) {
  StartServer([](ServerConfig& config) { config.execution_stream_idle_seconds = 1; });
  // How many answers the client's window takes before the server's writes are
  // held must not depend on the machine: gRPC's bandwidth-delay probe grows
  // the window with the link's speed, and on a fast machine the server
  // answered steps for the whole 30 s deadline without ever being held.
  grpc::ChannelArguments small_window;
  small_window.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  small_window.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 * 1024);
  Caller flooder(Address(), "alice", small_window);
  Attached session(flooder, 1);
  MustLoad(session, *mlp_);
  constexpr int kTried = 1'000'000;
  StepStream steps(flooder, session.id());
  int sent = 0;
  while (sent < kTried && steps.Send(StepInputs(sent % 3))) ++sent;
  EXPECT_LT(sent, kTried);  // held, then ended by the server's idle watch
  steps.context().TryCancel();
  EXPECT_FALSE(steps.Finish().ok());
  v1::LoadedProgram loaded;
  ASSERT_TRUE(alice_->GetLoaded(session.id(), &loaded).ok());
  EXPECT_LE(loaded.runs(), static_cast<uint64_t>(sent));
  // The session's slot was given back: the next run is served.
  tensor::NamedTensors out;
  v1::RunStats stats;
  grpc::Status s = alice_->Run(session.id(), Inputs(), &out, &stats);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// ---------------------------------------------------------------- bounds

TEST_F(ExecutionServiceTest, ALoneClientIsNeverRefusedAtTheSmallestBounds) {
  for (int threads : {1, 2}) {
    StartServer([threads](ServerConfig& config) { config.max_execution_threads = threads; });
    Attached session(*alice_, 1);
    const tensor::Tensor want = Reference(mlp_->onnx, Inputs()[0].second);
    for (int i = 0; i < 5; ++i) {
      v1::ExecutableRef ref;
      grpc::Status s = alice_->Upload(mlp_->ipx, mlp_->sha256, &ref);
      ASSERT_TRUE(s.ok()) << threads << " threads, round " << i << ": " << s.error_message();
      s = alice_->Load(session.id(), mlp_->sha256);
      ASSERT_TRUE(s.ok()) << threads << " threads, round " << i << ": " << s.error_message();
      tensor::NamedTensors out;
      v1::RunStats stats;
      s = alice_->Run(session.id(), Inputs(), &out, &stats);
      ASSERT_TRUE(s.ok()) << threads << " threads, round " << i << ": " << s.error_message();
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].second, want);
    }
  }
}

// An upload that sent its first chunk and then waits: it holds one call.
class HeldUpload {
 public:
  explicit HeldUpload(Caller& caller, uint64_t total_bytes = 1 << 20, size_t sent = 1024)
      : context_(caller.Context()) {
    writer_ = caller.exec().UploadExecutable(context_.get(), &ref_);
    v1::ExecutableChunk first;
    first.set_sha256(std::string(64, 'a'));
    first.set_total_bytes(total_bytes);
    first.set_data(std::string(sent, 'x'));
    writer_->Write(first);
  }
  // Sends `n` more bytes; false once the server has ended the call.
  bool Send(size_t n) {
    v1::ExecutableChunk chunk;
    chunk.set_data(std::string(n, 'y'));
    return writer_->Write(chunk);
  }
  // Ends the upload short: the server answers INVALID_ARGUMENT.
  grpc::Status Finish() {
    writer_->WritesDone();
    return writer_->Finish();
  }
  // Waits for the server to end the call while this side stays silent.
  grpc::Status FinishSilently() { return writer_->Finish(); }

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  v1::ExecutableRef ref_;
  std::unique_ptr<grpc::ClientWriter<v1::ExecutableChunk>> writer_;
};

TEST_F(ExecutionServiceTest, CallsBeyondTheBoundAreRefusedWithTheBoundNamed) {
  StartServer([](ServerConfig& config) {
    config.max_execution_threads = 2;
    config.max_execution_threads_per_user = 2;  // the server-wide bound is met first
  });
  HeldUpload first(*alice_);
  HeldUpload second(*bob_);
  // The held uploads are admitted when their handlers start: poll until a
  // third call is refused.
  grpc::Status refused;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    refused = alice_->Stat(mlp_->sha256);
    if (refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) break;
  }
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_THAT(refused.error_message(),
              HasSubstr("maximum of 2 execution calls at once (uploads, loads, weight transfers, "
                        "runs; ipupodd --max-execution-threads 2); retry"));
  // A flood: every call is refused while the two are held.
  std::atomic<int> exhausted{0};
  std::vector<std::thread> flood;
  for (int i = 0; i < 8; ++i) {
    flood.emplace_back([&] {
      if (bob_->Stat(mlp_->sha256).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        ++exhausted;
      }
    });
  }
  for (std::thread& t : flood) t.join();
  EXPECT_EQ(exhausted.load(), 8);
  EXPECT_EQ(first.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(second.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Both left: calls are served again.
  EXPECT_EQ(alice_->Stat(mlp_->sha256).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Issue 11: streams that send one chunk and go silent. One user's stalled
// uploads take at most that user's share of the execution calls; everyone
// else is still served.
TEST_F(ExecutionServiceTest, OneUsersStalledUploadsLeaveTheOthersServed) {
  Caller mallory(Address(), "mallory");
  std::vector<std::unique_ptr<HeldUpload>> held;
  for (int i = 0; i < 8; ++i) held.push_back(std::make_unique<HeldUpload>(mallory));
  // The held uploads are admitted as their handlers start: wait until
  // mallory's own calls are refused.
  grpc::Status refused;
  ASSERT_TRUE(test_support::Eventually([&] {
    refused = mallory.Stat(mlp_->sha256);
    return refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
  }));
  EXPECT_THAT(refused.error_message(),
              HasSubstr("user mallory already has 4 execution calls in flight, the most one user "
                        "may have (ipupodd --max-execution-threads-per-user 4)"));
  EXPECT_EQ(alice_->Stat(mlp_->sha256).error_code(), grpc::StatusCode::NOT_FOUND);
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  tensor::NamedTensors out;
  v1::RunStats stats;
  grpc::Status s = alice_->Run(session.id(), Inputs(), &out, &stats);
  EXPECT_TRUE(s.ok()) << s.error_message();
  int over_share = 0;
  for (auto& upload : held) {
    s = upload->Finish();
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++over_share;
  }
  EXPECT_EQ(over_share, 4);
}

TEST_F(ExecutionServiceTest, SilentStreamsEndAfterTheIdleTimeout) {
  StartServer([](ServerConfig& config) { config.execution_stream_idle_seconds = 1; });
  HeldUpload upload(*alice_, 2ull << 30, kChunk);
  grpc::Status s = upload.FinishSilently();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(),
              HasSubstr("UploadExecutable sent nothing for 1 s; the server ended it (ipupodd "
                        "--execution-stream-idle-seconds 1): keep sending"));
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  auto context = alice_->Context();
  auto run = alice_->exec().Run(context.get());
  v1::RunRequest first;
  first.set_session(session.id());
  ASSERT_TRUE(run->Write(first));
  s = run->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr("Run sent nothing for 1 s"));
  // The session's slot was given back: the next run is served.
  tensor::NamedTensors out;
  v1::RunStats stats;
  s = alice_->Run(session.id(), Inputs(), &out, &stats);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// Issue 29: an upload trickling a byte now and then is never silent for the
// idle bound, so it kept its call and what it reserved for as long as it
// liked. Below --upload-min-bytes-per-second, once the server has waited
// the idle bound for its bytes, it is ended and its reservation freed.
TEST_F(ExecutionServiceTest, TrickledUploadsAreEndedBelowTheMinimumRate) {
  StartServer([](ServerConfig& config) {
    config.execution_stream_idle_seconds = 1;
    config.upload_min_bytes_per_second = 4096;
  });
  HeldUpload upload(*alice_, 4ull << 20, 16);
  const absl::Time deadline = absl::Now() + absl::Seconds(8);
  while (absl::Now() < deadline && upload.Send(1)) {
    absl::SleepFor(absl::Milliseconds(100));  // the trickle itself, not a wait for a condition
  }
  const absl::Duration took = absl::Seconds(8) - (deadline - absl::Now());
  grpc::Status s = upload.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("under the 4096 bytes/s an upload must keep (ipupodd "
                                           "--upload-min-bytes-per-second); the server ended it"));
  EXPECT_LT(took, absl::Seconds(5));
  // A fast upload of the same size is not touched.
  HeldUpload fast(*alice_, 4ull << 20, 1 << 20);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(fast.Send(1 << 20));
  EXPECT_EQ(fast.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // short, not slow
}

// Issue 11: a client that asks for weights and reads none held a thread
// until its own deadline; flow control holds the server's writes, and the
// idle watch counts that wait too.
TEST_F(ExecutionServiceTest, ClientsThatStopReadingAreEndedAfterTheIdleTimeout) {
  StartServer([](ServerConfig& config) { config.execution_stream_idle_seconds = 1; });
  // The stalled reader's own connection keeps gRPC's initial 64 KiB window
  // (no BDP probing grows it), so 6 MiB of weights hold the server's writes
  // after the first chunk. (48 MiB without the cap took 30 s under TSan, and
  // under load its upload passed the 30 s deadline: CI 2026-12-07.)
  grpc::ChannelArguments small_window;
  small_window.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  small_window.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
  Caller reader(Address(), "alice", small_window);
  const Compiled huge = CompileMlp(int64_t{1} << 17);  // 6 MiB of weights
  Attached session(*alice_, 1);
  MustLoad(session, huge);
  auto context = reader.Context();
  v1::ReadWeightsRequest request;
  request.set_session(session.id());
  auto stalled = reader.exec().ReadWeights(context.get(), request);  // and reads nothing
  // The stalled call holds the session's slot until the idle watch ends it;
  // the next call waits for the slot and is served once it has (without
  // the watch it would wait until the stalled client's own deadline).
  const absl::Time start = absl::Now();
  tensor::NamedTensors read;
  grpc::Status s = alice_->ReadWeights(session.id(), {"fc2.w"}, &read);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // A client that never reads cannot receive the status the server sent
  // (gRPC delivers it after the messages before it); the server's side is
  // long over, and the client gives up.
  context->TryCancel();
  EXPECT_FALSE(stalled->Finish().ok());
}

TEST_F(ExecutionServiceTest, AHugeDeclaredUploadIsRefusedUpFront) {
  StartServer([](ServerConfig& config) { config.executable_cache_mb = kExecutableCacheMbMax; });
  HeldUpload upload(*alice_, 60ull << 30, kChunk);
  grpc::Status s = upload.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("more than any executable can be"));
}

TEST_F(ExecutionServiceTest, UploadsInFlightCountAgainstTheCacheBound) {
  StartServer([](ServerConfig& config) { config.executable_cache_mb = 2; });
  auto first = std::make_unique<HeldUpload>(*alice_, 3 * kChunk / 2, kChunk);
  grpc::Status s;
  ASSERT_TRUE(test_support::Eventually([&] {
    // Handlers start in no fixed order: a `second` admitted before `first`
    // makes the server refuse `first` instead (CI, 2026-11-26). A refused
    // upload's stream is closed, so its next write fails: start it again.
    if (!first->Send(0)) first = std::make_unique<HeldUpload>(*alice_, 3 * kChunk / 2, kChunk);
    HeldUpload second(*bob_, 3 * kChunk / 2, kChunk);
    s = second.Finish();
    return s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
  })) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("uploads in progress"));
  EXPECT_THAT(s.error_message(), HasSubstr("--executable-cache-mb"));
  EXPECT_EQ(first->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Its bytes were given back: the whole bound is free again.
  v1::ExecutableRef ref;
  s = bob_->Upload(mlp_->ipx, mlp_->sha256, &ref);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// Issue 11: ReadWeights took the same name 100,000 times (a 1.2 MB request
// answered 55 MB). Duplicates are refused as WriteWeights refuses them.
TEST_F(ExecutionServiceTest, ReadWeightsRefusesDuplicateNames) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  tensor::NamedTensors read;
  grpc::Status s = alice_->ReadWeights(session.id(), {"fc1.w", "fc1.w"}, &read);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("weight fc1.w is asked for twice; ask for each once"));
  s = alice_->ReadWeights(session.id(), std::vector<std::string>(100'000, "fc1.w"), &read);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("asks for 100000 weights but the program has 2"));
}

// Issue 11: a 10,000-character name came back whole in a NOT_FOUND
// message, which gRPC then refused to send ("metadata size exceeds
// limit"). Over-long names are refused up front and never echoed whole.
TEST_F(ExecutionServiceTest, OverlongNamesAreRefusedUpFrontAndNotEchoedWhole) {
  Attached session(*alice_, 1);
  MustLoad(session, *mlp_);
  const std::string huge(10'000, 'n');
  grpc::Status s = alice_->Load(huge, mlp_->sha256);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("a session name of 10000 characters is over the limit "
                                           "of 256; name the session `ipupod attach` printed"));
  EXPECT_LT(s.error_message().size(), 400u);
  tensor::NamedTensors read;
  s = alice_->ReadWeights(session.id(), {huge}, &read);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("a weight name of 10000 characters is over the limit"));
  EXPECT_LT(s.error_message().size(), 400u);
  s = alice_->WriteWeights(session.id(), {{huge, Floats({16, 4}, Ramp(64, 2))}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("a tensor name of 10000 characters is over the limit"));
  EXPECT_LT(s.error_message().size(), 400u);
}

}  // namespace
}  // namespace ipupod::server
