// Custom ops through a real PodServer (in this process) and the client library: a model
// whose Cube comes from the tests' C library compiles on the server (its shape function
// runs in a helper), loads and runs; a library that crashes fails its own session's steps
// with what happened while another session's custom op keeps computing and the server
// keeps serving; a library outside the configured directories is refused at compile and
// at load. The helper processes are bounded and end with the programs.
#include "device/graph/custom_ops.h"

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/client.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "tests/device/customop/test_library.h"
#include "tests/device/graph/fake_custom_ops.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_server.h"

namespace ipupod::server {
namespace {

using tensor::Tensor;
using ::testing::HasSubstr;

// x [2, 3] -> test.bad::<op>(x) -> y, from `library`.
std::string BadModel(const std::string& op, const std::string& library) {
  graph::testing::OnnxBuilder b(14);
  b.Input("x", graph::testing::kFloat, {2, 3});
  b.Node(op, {"x"}, {"y"}, "/" + op).set_domain("test.bad");
  b.Output("y", graph::testing::kFloat);
  auto* opset = b.model().add_opset_import();
  opset->set_domain("test.bad");
  opset->set_version(1);
  auto* entry = b.model().add_metadata_props();
  entry->set_key(graph::kCustomOpLibrariesMetadataKey);
  entry->set_value("test.bad=" + library);
  return b.Bytes();
}

Tensor Filled(float v) { return *Tensor::FromValues<float>({2, 3}, std::vector<float>(6, v)); }

class CustomOpsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = test_support::TestServer::Start([](ServerConfig& config) {
      config.custom_ops.library_dirs = {customop::testing::TestOpsDir()};
      config.custom_ops.host = customop::testing::HostBinary();
      config.custom_ops.call_timeout_seconds = 5;
      config.custom_ops.memory_mb = 1024;
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<client::Client> Connect(const std::string& user) {
    client::ClientOptions options;
    options.server = server_->address();
    options.user = user;
    auto c = client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }

  // Compiles `model` on the server for `c`'s user: the executable's hash.
  absl::StatusOr<std::string> Compile(client::Client& c, const std::string& model) {
    const std::string path = dir_.sub("model" + std::to_string(++models_) + ".onnx");
    std::ofstream(path, std::ios::binary) << model;
    absl::StatusOr<v1::BlobRef> blob = c.PutBlobFile(path, "model");
    if (!blob.ok()) return blob.status();
    v1::CompileRequest request;
    request.set_model_sha256(blob->sha256());
    absl::StatusOr<v1::CompileResult> result = c.Compile(request);
    if (!result.ok()) return result.status();
    return result->executable().sha256();
  }

  // A session of one IPU with `model` compiled and loaded.
  struct Loaded {
    std::unique_ptr<client::Client> client;
    std::unique_ptr<client::AttachCall> call;
    std::string session;
  };
  Loaded Load(const std::string& user, const std::string& model) {
    Loaded l{Connect(user), nullptr, ""};
    v1::AttachRequest request;
    request.set_num_ipus(1);
    l.call = l.client->StartAttach(request);
    auto granted = l.call->WaitForGrant(nullptr);
    EXPECT_TRUE(granted.ok()) << granted.status();
    if (!granted.ok()) return l;
    l.session = granted->session();
    absl::StatusOr<std::string> sha = Compile(*l.client, model);
    EXPECT_TRUE(sha.ok()) << sha.status();
    if (!sha.ok()) return l;
    auto loaded = l.client->Load(l.session, *sha);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return l;
  }

  std::unique_ptr<test_support::TestServer> server_;
  test_support::TempDir dir_;
  int models_ = 0;
};

TEST_F(CustomOpsServerTest, ACubeModelCompilesLoadsAndRunsThroughTheLibrary) {
  Loaded l = Load("alice", graph::testing::CubeModel(false, customop::testing::TestOpsLibrary()));
  ASSERT_FALSE(l.session.empty());
  auto run = l.client->Run(l.session, {{"x", Filled(2)}, {"bias", Filled(4)}});
  ASSERT_TRUE(run.ok()) << run.status();
  const Tensor& y = run->outputs.at(0).second;
  const Tensor& cube = run->outputs.at(1).second;
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 6), std::vector<float>(6, 12));
  EXPECT_EQ(std::vector<float>(cube.data<float>(), cube.data<float>() + 6),
            std::vector<float>(6, 8));
}

TEST_F(CustomOpsServerTest, ACrashingLibraryFailsItsSessionWhileAnotherComputesOn) {
  Loaded good =
      Load("alice", graph::testing::CubeModel(false, customop::testing::TestOpsLibrary()));
  Loaded bad = Load("bob", BadModel("Segfault", customop::testing::TestOpsLibrary()));
  ASSERT_FALSE(good.session.empty());
  ASSERT_FALSE(bad.session.empty());
  std::atomic<int> wrong{0};
  std::thread alice([&] {
    for (int i = 0; i < 20; ++i) {
      auto run = good.client->Run(good.session, {{"x", Filled(2)}, {"bias", Filled(float(i))}});
      if (!run.ok() || run->outputs.at(0).second.data<float>()[5] != 8.0f + float(i)) ++wrong;
    }
  });
  for (int i = 0; i < 3; ++i) {
    auto run = bad.client->Run(bad.session, {{"x", Filled(1)}});
    EXPECT_EQ(run.status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(run.status().message(),
                HasSubstr(customop::testing::kSanitized
                              ? "custom op test.bad::Segfault"
                              : "custom op test.bad::Segfault crashed (signal 11, SIGSEGV) in its "
                                "compute function"));
  }
  alice.join();
  EXPECT_EQ(wrong.load(), 0);
  auto info = good.client->GetPodInfo();
  EXPECT_TRUE(info.ok()) << info.status();
}

TEST_F(CustomOpsServerTest, ALibraryOutsideTheDirectoriesIsRefusedAtCompile) {
  test_support::TempDir elsewhere;
  std::unique_ptr<client::Client> c = Connect("alice");
  absl::StatusOr<std::string> sha = Compile(*c, BadModel("Fails", elsewhere.sub("libsneaky.so")));
  EXPECT_EQ(sha.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(sha.status().message(),
              HasSubstr("custom op library '" + elsewhere.sub("libsneaky.so") +
                        "' is not in a directory this ipupodd allows (config key "
                        "custom_ops.library_dirs"));
}

TEST_F(CustomOpsServerTest, AnExecutableNamingALibraryOutsideTheDirectoriesDoesNotLoad) {
  // Compiled elsewhere (here: with an in-process op), uploaded, then loaded.
  graph::testing::FakeResolver fake(std::make_shared<graph::testing::FakeCube>());
  compiler::CompileOptions options;
  options.custom_ops = &fake;
  absl::StatusOr<compiler::Executable> exe =
      compiler::Compile(graph::testing::CubeModel(false, "/opt/elsewhere/libacme.so"),
                        compiler::IpuConfig(), options);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::string> ipx = compiler::WriteExecutable(*exe);
  ASSERT_TRUE(ipx.ok()) << ipx.status();
  Loaded l{Connect("alice"), nullptr, ""};
  v1::AttachRequest request;
  request.set_num_ipus(1);
  l.call = l.client->StartAttach(request);
  auto granted = l.call->WaitForGrant(nullptr);
  ASSERT_TRUE(granted.ok()) << granted.status();
  auto ref = l.client->UploadExecutable(*ipx);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto loaded = l.client->Load(granted->session(), ref->sha256());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("custom op library '/opt/elsewhere/libacme.so' is not in a directory"));
}

TEST(CustomOpsServerStartTest, ADirectoryThatIsNotThereStopsTheStart) {
  auto server = test_support::TestServer::Start(
      [](ServerConfig& config) { config.custom_ops.library_dirs = {"/nonexistent/custom-ops"}; });
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(server.status().message(),
              HasSubstr("config key custom_ops.library_dirs lists '/nonexistent/custom-ops'"));
}

TEST_F(CustomOpsServerTest, ALibrarysErrorReachesTheClientAsInvalidArgument) {
  Loaded l = Load("alice", BadModel("Fails", customop::testing::TestOpsLibrary()));
  auto run = l.client->Run(l.session, {{"x", Filled(1)}});
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(run.status().message(), HasSubstr("this op always fails"));
}

}  // namespace
}  // namespace ipupod::server
