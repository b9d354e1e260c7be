// Issue 11's memory test: drive every allocation a request can cause to its
// bound against a real ipupodd, then check that the server's peak resident
// memory (VmHWM) stayed under what its flags allow:
//
//   peak <= resident after start + executable cache + load budget
//           + per execution call: one chunk in, one chunk out, and the
//             largest executable or weight set it handles whole
//           + slack (allocator, gRPC buffers, logging)
//
// Driven, with small bounds so that each is reached:
//   * executable churn: distinct executables totalling twice the cache;
//   * stalled uploads declaring more than the cache, from two users;
//   * loads until the load budget refuses one, runs on each program,
//     weights read and written whole, concurrently;
//   * a crafted executable whose report claims a few KB while its model
//     folds a 196 MB constant (the fold is capped at what the load reserved).
// Each phase also checks the documented refusal; the test prints each
// phase's peak beside the bound.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/grpc_status.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "ipupod/v1/execution.grpc.pb.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/integration/harness.h"
#include "tests/support/tensors.h"

namespace ipupod::testing {
namespace {

namespace v1 = ::ipupod::v1;
using graph::testing::kFloat;
using graph::testing::OnnxBuilder;

// Under a sanitizer the server's resident memory is mostly shadow memory:
// there the phases still run (for the sanitizer's sake), the peak is only printed.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kCacheMb = 48;
constexpr int64_t kLoadMb = 40;
constexpr int kExecutionThreads = 4;
constexpr int64_t kWide = 2560;        // y[4, kWide] = x[4, 1024] W[1024, kWide]: W is 10 MiB
constexpr int64_t kChunkBytes = kMiB;  // what the client library sends per message
// The largest thing one call here holds whole: a 10 MiB executable or weight set.
constexpr int64_t kLargestPayloadBytes = 12 * kMiB;
constexpr int64_t kSlackBytes = 64 * kMiB;

// "VmHWM" or "VmRSS" of /proc/PID/status, in bytes (0 when the process is gone).
int64_t ProcBytes(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1) * 1024;
  }
  return 0;
}

std::string Compiled(const std::string& onnx) {
  auto e = compiler::Compile(onnx, compiler::IpuConfig{}, {});
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return "";
  auto bytes = compiler::WriteExecutable(*e);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

// The content hash an .ipx declares (what Stat and Load name it by).
std::string HashOf(const std::string& ipx) {
  auto e = compiler::ReadExecutable(ipx);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? e->content_hash : "";
}

// y = x W with W [1024, kWide] filled with `fill`: a distinct 10 MiB executable per fill.
std::string WideExecutable(float fill) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {4, 1024});
  b.Floats("W", {1024, kWide}, std::vector<float>(static_cast<size_t>(1024 * kWide), fill));
  b.Node("MatMul", {"x", "W"}, {"y"});
  b.Output("y", kFloat, {4, kWide});
  return Compiled(b.Bytes());
}

// A 100 x 100 ConstantOfShape bomb compiled honestly, then given the model
// of an n x n one: its report claims a few KB while its model folds n*n floats.
std::string UnderstatedBombExecutable(int64_t n) {
  auto e = compiler::Compile(graph::testing::ConstantOfShapeBomb(100), compiler::IpuConfig{}, {});
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return "";
  e->model_bytes = graph::testing::ConstantOfShapeBomb(n);
  auto bytes = compiler::WriteExecutable(*e);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

class MemoryBoundsTest : public ::testing::Test {
 protected:
  MemoryBoundsTest()
      : server_({"--pod", "POD4", "--executable-cache-mb", std::to_string(kCacheMb),
                 "--load-memory-mb", std::to_string(kLoadMb), "--max-execution-threads",
                 std::to_string(kExecutionThreads), "--max-execution-threads-per-user", "2",
                 "--execution-stream-idle-seconds", "2", "--compute-threads", "1"}) {
    baseline_ = ProcBytes(server_.process().pid(), "VmRSS");
  }

  std::unique_ptr<client::Client> Connect(const std::string& user) {
    client::ClientOptions options;
    options.server = server_.address();
    options.user = user;
    auto c = client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // What the flags allow: see the file comment.
  int64_t Bound() const {
    const int64_t per_call = 2 * kChunkBytes + kLargestPayloadBytes;
    return baseline_ + kCacheMb * kMiB + kLoadMb * kMiB + kExecutionThreads * per_call +
           kSlackBytes;
  }

  void CheckPeak(const std::string& phase) {
    const int64_t peak = ProcBytes(server_.process().pid(), "VmHWM");
    std::printf("after %-28s server peak %5lld MiB, bound %5lld MiB (baseline %lld MiB)\n",
                phase.c_str(), static_cast<long long>(peak / kMiB),
                static_cast<long long>(Bound() / kMiB), static_cast<long long>(baseline_ / kMiB));
    EXPECT_GT(peak, 0) << "no /proc/PID/status for the server";
    if (!kSanitized) {
      EXPECT_LE(peak, Bound()) << "after " << phase;
    }
  }

  ServerUnderTest server_;
  int64_t baseline_ = 0;
};

// An upload that declares `declared` bytes, sends one chunk, and goes silent.
class StalledUpload {
 public:
  StalledUpload(const std::string& address, const std::string& user, int64_t declared) {
    channel_ = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    stub_ = v1::ExecutionService::NewStub(channel_);
    context_.AddMetadata(std::string(client::kUserKey), user);
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    writer_ = stub_->UploadExecutable(&context_, &ref_);
    v1::ExecutableChunk first;
    first.set_sha256(std::string(64, 'a'));
    first.set_total_bytes(static_cast<uint64_t>(declared));
    first.set_data(std::string(static_cast<size_t>(kChunkBytes), 'x'));
    writer_->Write(first);
  }
  // Waits, silent, until the server ends the call.
  grpc::Status Finish() { return writer_->Finish(); }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ExecutionService::Stub> stub_;
  grpc::ClientContext context_;
  v1::ExecutableRef ref_;
  std::unique_ptr<grpc::ClientWriter<v1::ExecutableChunk>> writer_;
};

// A session holding a loaded program.
struct HeldSession {
  client::Client* client;
  std::unique_ptr<client::AttachCall> call;
  std::string session;
};

// Executable churn: 8 x 10 MiB through a 48 MiB cache, two users at once.
void ChurnExecutables(const std::vector<client::Client*>& users,
                      const std::vector<std::string>& executables) {
  std::vector<std::thread> uploaders;
  for (client::Client* c : users) {
    uploaders.emplace_back([c, &executables] {
      for (const std::string& ipx : executables) {
        auto ref = c->UploadExecutable(ipx);
        EXPECT_TRUE(ref.ok()) << ref.status();
      }
    });
  }
  for (std::thread& t : uploaders) t.join();
  auto first = users[0]->StatExecutable(HashOf(executables[0]));
  EXPECT_EQ(first.status().code(), absl::StatusCode::kNotFound) << "the cache evicted nothing";
}

// Uploads declaring more than the cache, then silent: refused or timed out.
void StallUploads(const std::string& address) {
  std::vector<std::unique_ptr<StalledUpload>> stalled;
  for (const char* user : {"mallory", "trudy"}) {
    for (int i = 0; i < 2; ++i) {
      stalled.push_back(std::make_unique<StalledUpload>(address, user, 40 * kMiB));
    }
  }
  for (auto& upload : stalled) {
    const grpc::StatusCode code = upload->Finish().error_code();
    EXPECT_TRUE(code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                code == grpc::StatusCode::DEADLINE_EXCEEDED)
        << code;
  }
}

// One 1-IPU session per executable, loaded until the load budget refuses:
// the sessions that hold a program.
std::vector<HeldSession> LoadUntilRefused(const std::vector<client::Client*>& users,
                                          const std::vector<std::string>& executables) {
  std::vector<HeldSession> held;
  int refused = 0;
  for (size_t i = 0; i < executables.size(); ++i) {
    client::Client* c = users[i % users.size()];
    v1::AttachRequest request;
    request.set_num_ipus(1);
    HeldSession h{c, c->StartAttach(request), ""};
    auto grant = h.call->WaitForGrant(nullptr);
    EXPECT_TRUE(grant.ok()) << grant.status();
    if (!grant.ok()) break;
    h.session = grant->session();
    EXPECT_TRUE(c->UploadExecutable(executables[i]).ok());
    auto load = c->Load(h.session, HashOf(executables[i]));
    if (load.ok()) {
      held.push_back(std::move(h));
      continue;
    }
    EXPECT_EQ(load.status().code(), absl::StatusCode::kResourceExhausted) << load.status();
    ++refused;
    EXPECT_TRUE(h.call->Release().ok());
  }
  EXPECT_GE(held.size(), 2u);
  EXPECT_GE(refused, 1) << "the load budget refused nothing";
  return held;
}

// On every session at once: runs, and the whole weights read and written back.
void RunAndMoveWeights(std::vector<HeldSession>& held) {
  std::vector<std::thread> users;
  for (HeldSession& h : held) {
    users.emplace_back([&h] {
      for (int step = 0; step < 3; ++step) {
        auto run = h.client->Run(h.session, {{"x", test_support::Iota({4, 1024})}});
        EXPECT_TRUE(run.ok()) << run.status();
        auto weights = h.client->ReadWeights(h.session, {});
        ASSERT_TRUE(weights.ok()) << weights.status();
        auto wrote = h.client->WriteWeights(h.session, *weights);
        EXPECT_TRUE(wrote.ok()) << wrote.status();
      }
    });
  }
  for (std::thread& t : users) t.join();
}

TEST_F(MemoryBoundsTest, EveryRequestDrivenAllocationStaysUnderTheConfiguredBudgets) {
  ASSERT_GT(baseline_, 0);
  auto alice = Connect("alice");
  auto bob = Connect("bob");
  ASSERT_TRUE(alice && bob);
  const std::vector<client::Client*> users = {alice.get(), bob.get()};
  std::vector<std::string> executables;
  for (int i = 0; i < 8; ++i) executables.push_back(WideExecutable(0.001f * static_cast<float>(i)));

  ChurnExecutables(users, executables);
  CheckPeak("executable churn");
  StallUploads(server_.address());
  CheckPeak("stalled uploads");
  std::vector<HeldSession> held =
      LoadUntilRefused(users, {executables.begin() + 4, executables.end()});
  ASSERT_FALSE(held.empty());
  RunAndMoveWeights(held);
  CheckPeak("loads, runs, weights");

  // A report that understates its model: refused before the fold allocates.
  const std::string bomb = UnderstatedBombExecutable(7000);  // 7000^2 floats: 196 MB
  ASSERT_TRUE(held[0].client->UploadExecutable(bomb).ok());
  auto bomb_load = held[0].client->Load(held[0].session, HashOf(bomb));
  EXPECT_EQ(bomb_load.status().code(), absl::StatusCode::kInvalidArgument) << bomb_load.status();
  CheckPeak("understated executable");
  for (HeldSession& h : held) EXPECT_TRUE(h.call->Release().ok());
}

}  // namespace
}  // namespace ipupod::testing
