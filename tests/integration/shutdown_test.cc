// End to end: SIGTERM and SIGINT shut a real ipupodd down in order, with
// OpenBLAS's worker threads present (the server runs with every CPU's BLAS
// threads; OPENBLAS_NUM_THREADS is not set), while a client is in the middle
// of a Load or a Run: the server exits 0 with its "stopped" line, the client
// gets UNAVAILABLE saying the server is shutting down, and the store is
// clean (the WAL checkpointed) and complete after a restart. A compile in
// flight is stopped at once, not awaited.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/tensor/tensor_files.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/integration/harness.h"
#include <signal.h>
#include <unistd.h>

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

// A compile that spends seconds in each node: ConstantOfShape [4096, 8192]
// folded, then two products of it (2^37 and 2^36 multiply-adds) folded too.
std::string SlowCompileModel() {
  OnnxBuilder b(13);
  b.Input("x", kFloat, {1}).Output("y", kFloat);
  b.Ints("shape", {2}, {4096, 8192});
  OnnxBuilder::AttrFloatTensor(b.Node("ConstantOfShape", {"shape"}, {"c"}), "value", {1}, {1.0f});
  OnnxBuilder::AttrInt(b.Node("Gemm", {"c", "c"}, {"g"}, "gram"), "transB", 1);
  b.Node("MatMul", {"g", "g"}, {"g2"}, "square");
  OnnxBuilder::AttrInt(b.Node("ReduceSum", {"g2"}, {"s"}), "keepdims", 0);
  b.Node("Add", {"x", "s"}, {"y"});
  return b.Bytes();
}

// CPU seconds (user + system) process `pid` has used, from /proc.
double CpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(fields),
                             std::istream_iterator<std::string>()};
  if (f.size() < 13) return 0;
  return static_cast<double>(std::stoll(f[11]) + std::stoll(f[12])) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Issue 29: SIGTERM during a compile waited for its node to end (107 s once).
// The shutdown now stops compiles in flight at once (RemoteCompiler::Stop,
// device/kernels/interrupt.h), so the server exits well inside a service manager's
// stop timeout, and the client hears why.
TEST_F(ShutdownTest, SigtermDuringALongCompileExitsWithinSeconds) {
  std::ofstream(Path("slow_compile.onnx"), std::ios::binary) << SlowCompileModel();
  Process compile =
      StartCli(server_.address(), "alice",
               {"compile", "--remote", Path("slow_compile.onnx"), "-o", Path("slow_compile.ipx")});
  ASSERT_TRUE(server_.process().WaitForStderr("compiling", milliseconds(60'000)))
      << server_.process().stderr_text();
  // Inside the products (the constant before them fills in a fraction of
  // that): the server has computed for a second since the compile began.
  const double cpu_at_start = CpuSeconds(server_.process().pid());
  ASSERT_TRUE(Eventually([&] { return CpuSeconds(server_.process().pid()) - cpu_at_start >= 1.0; },
                         milliseconds(60'000)));
  const auto signalled = std::chrono::steady_clock::now();
  server_.process().Signal(SIGTERM);
  auto server_code = server_.process().Wait(milliseconds(60'000));
  const auto took = std::chrono::steady_clock::now() - signalled;
  ASSERT_TRUE(server_code.has_value()) << "the server did not exit";
  EXPECT_EQ(*server_code, 0) << server_.process().stderr_text();
  EXPECT_LT(took, seconds(2)) << "the shutdown waited for the compile's node";
  auto compile_code = compile.Wait(milliseconds(20'000));
  ASSERT_TRUE(compile_code.has_value());
  EXPECT_EQ(*compile_code, 8) << compile.stderr_text();  // UNAVAILABLE
  EXPECT_NE(compile.stderr_text().find("shutting down"), std::string::npos)
      << compile.stderr_text();
  std::printf("SIGTERM during a compile: exited in %.3f s\n",
              std::chrono::duration<double>(took).count());
  EXPECT_TRUE(server_.Restart()) << server_.process().stderr_text();
}

TEST_F(ShutdownTest, SigtermDuringALoad) { ShutDownDuring(/*loaded=*/false, SIGTERM); }
TEST_F(ShutdownTest, SigtermDuringARun) { ShutDownDuring(/*loaded=*/true, SIGTERM); }
TEST_F(ShutdownTest, SigintDuringALoad) { ShutDownDuring(/*loaded=*/false, SIGINT); }
TEST_F(ShutdownTest, SigintDuringARun) { ShutDownDuring(/*loaded=*/true, SIGINT); }

}  // namespace
}  // namespace ipupod::testing
