// End to end: SIGTERM and SIGINT shut a real ipupodd down in order, with
// OpenBLAS's worker threads present (the server runs with every CPU's BLAS
// threads; OPENBLAS_NUM_THREADS is not set), while a client is in the middle
// of a Load or a Run: the server exits 0 with its "stopped" line, the client
// gets UNAVAILABLE saying the server is shutting down, and the store is
// clean (the WAL checkpointed) and complete after a restart.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tensor/tensor_files.h"
#include "tests/graph/onnx_builder.h"
#include "tests/integration/harness.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using graph::testing::kFloat;
using graph::testing::OnnxBuilder;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int64_t kRows = 1024;
constexpr int64_t kWidth = 1024;
constexpr int kLayers = 8;  // 17 GFLOP a step, 32 MB of weights: calls that last a while
constexpr int kSteps = 6;

// x[1024,1024] -> 8 x MatMul by 1024x1024 weights -> y.
std::string SlowModel() {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {kRows, kWidth});
  b.Output("y", kFloat, {kRows, kWidth});
  std::vector<float> w(static_cast<size_t>(kWidth * kWidth));
  for (size_t i = 0; i < w.size(); ++i) w[i] = (i % 7 == 0) ? 1.0f / kWidth : 0.0f;
  std::string in = "x";
  for (int l = 0; l < kLayers; ++l) {
    const std::string name = absl::StrCat("w", l);
    const std::string out = l + 1 == kLayers ? "y" : absl::StrCat("h", l);
    b.Floats(name, {kWidth, kWidth}, w);
    b.Node("MatMul", {in, name}, {out}, absl::StrCat("/layer", l, "/MatMul"));
    in = out;
  }
  return b.Bytes();
}

class ShutdownTest : public ::testing::Test {
 protected:
  // The model and inputs, made once for every test (compile is offline).
  static void SetUpTestSuite() {
    files_ = new TempDir();
    std::ofstream(Path("slow.onnx"), std::ios::binary) << SlowModel();
    CliResult c =
        RunCli("127.0.0.1:1", "alice", {"compile", Path("slow.onnx"), "-o", Path("slow.ipx")});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    std::vector<float> x(static_cast<size_t>(kSteps * kRows * kWidth), 0.5f);
    auto tensor = tensor::Tensor::FromValues<float>({kSteps * kRows, kWidth}, x);
    ASSERT_TRUE(tensor.ok());
    std::ofstream(Path("x.npz"), std::ios::binary) << tensor::SerializeNpz({{"x", *tensor}});
  }
  static void TearDownTestSuite() { delete files_; }
  void SetUp() override {
    ASSERT_EQ(std::getenv("OPENBLAS_NUM_THREADS"), nullptr)
        << "the point is a server with OpenBLAS's own threads";
    ASSERT_TRUE(std::filesystem::exists(Path("slow.ipx")));
    ASSERT_EQ(Cli({"partition", "create", "kept", "--size", "2"}).exit_code, 0);
  }
  static std::string Path(const std::string& name) { return files_->path() + "/" + name; }
  CliResult Cli(const std::vector<std::string>& args) {
    return RunCli(server_.address(), "alice", args);
  }
  Process StartRun() {
    return StartCli(
        server_.address(), "alice",
        {"--json", "run", Path("slow.ipx"), "--inputs", Path("x.npz"), "--outputs", Path("y.npz")});
  }
  // True once an IPU is busy in an operation: loading (no memory charged
  // yet) or running (the program's memory charged).
  bool OperationInFlight(bool loaded) {
    nlohmann::json info = Cli({"--json", "info"}).json();
    if (!info.is_object()) return false;
    for (const auto& ipu : info["ipus"]) {
      if (ipu["state"] == "busy" && (ipu["memory_used_bytes"] > 0) == loaded) return true;
    }
    return false;
  }
  // Signals the server while a Load (loaded=false) or a Run is in flight and
  // checks the outcome. ShutDownOnce says kRetry when the Load ended before
  // the signal landed and `may_retry`: the caller restarts the server and
  // tries again.
  enum class Outcome { kDone, kRetry, kLoadNotSeen };
  static constexpr int kAttempts = 5;
  void ShutDownDuring(bool loaded, int sig);
  Outcome ShutDownOnce(bool loaded, int sig, bool may_retry);

  static TempDir* files_;
  ServerUnderTest server_;
};

TempDir* ShutdownTest::files_ = nullptr;

void ShutdownTest::ShutDownDuring(bool loaded, int sig) {
  for (int attempt = 1;; ++attempt) {
    const Outcome outcome = ShutDownOnce(loaded, sig, attempt < kAttempts);
    if (outcome == Outcome::kLoadNotSeen) {
      GTEST_SKIP() << "the Load was never seen in flight (too short to catch here)";
    }
    if (outcome == Outcome::kDone) return;
    ASSERT_TRUE(server_.Restart()) << server_.process().stderr_text();
  }
}

ShutdownTest::Outcome ShutdownTest::ShutDownOnce(bool loaded, int sig, bool may_retry) {
  Process run = StartRun();
  if (!Eventually([&] { return OperationInFlight(loaded); }, milliseconds(60'000))) {
    // A Load lasts a fraction of a second; a busy machine's `ipupod info`
    // polls (each a new process) can miss it every time. That says nothing
    // about shutdown, so the case is skipped, saying so (docs/testing.md).
    if (!loaded) return Outcome::kLoadNotSeen;
    ADD_FAILURE() << "the Run was never seen in flight";
    return Outcome::kDone;
  }
  server_.process().Signal(sig);
  auto server_code = server_.process().Wait(milliseconds(20'000));
  if (!server_code) {
    ADD_FAILURE() << "the server did not exit";
    return Outcome::kDone;
  }
  EXPECT_EQ(*server_code, 0) << server_.process().stderr_text();
  EXPECT_NE(server_.process().stderr_text().find("stopped"), std::string::npos)
      << server_.process().stderr_text();

  auto run_code = run.Wait(milliseconds(20'000));
  if (!run_code) {
    ADD_FAILURE() << "the client did not exit";
    return Outcome::kDone;
  }
  const std::string said = run.stdout_text() + run.stderr_text();
  // The Load seen in flight may finish before the signal lands (it lasts tens
  // of ms); the client's next call then finds the server gone or refusing new
  // calls. Right for a call made after shutdown, but not the case under test:
  // try again (CI, 2026-11-26).
  const std::string log = server_.process().stderr_text();
  const size_t load_done = log.find("method=Load code=OK");
  if (!loaded && may_retry && load_done != std::string::npos &&
      load_done < log.find("received SIG")) {
    return Outcome::kRetry;
  }
  EXPECT_EQ(*run_code, 8) << "UNAVAILABLE: " << said << "\nserver:\n" << log;
  EXPECT_NE(said.find("shutting down"), std::string::npos) << said << "\nserver:\n" << log;
  EXPECT_EQ(said.find("Socket closed"), std::string::npos) << said;

  const std::string wal = server_.state_dir() + "/state/state.db-wal";
  EXPECT_TRUE(!std::filesystem::exists(wal) || std::filesystem::file_size(wal) == 0)
      << "the WAL was not checkpointed";
  EXPECT_TRUE(server_.Restart()) << server_.process().stderr_text();
  nlohmann::json partitions = Cli({"--json", "partition", "list"}).json();
  if (partitions.is_object()) partitions = partitions["partitions"];
  EXPECT_EQ(partitions.size(), 1u) << partitions.dump();
  if (partitions.size() == 1) {
    EXPECT_EQ(partitions[0]["name"], "kept");
  }
  return Outcome::kDone;
}

TEST_F(ShutdownTest, SigtermDuringALoad) { ShutDownDuring(/*loaded=*/false, SIGTERM); }
TEST_F(ShutdownTest, SigtermDuringARun) { ShutDownDuring(/*loaded=*/true, SIGTERM); }
TEST_F(ShutdownTest, SigintDuringALoad) { ShutDownDuring(/*loaded=*/false, SIGINT); }
TEST_F(ShutdownTest, SigintDuringARun) { ShutDownDuring(/*loaded=*/true, SIGINT); }

}  // namespace
}  // namespace ipupod::testing
