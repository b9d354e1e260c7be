// The helper process (device/customop/host_process.h, host.h), one library per program
// (custom_op_library.h) and graph::CustomOp over it (remote_custom_op.h), running the
// tests' C library: PopTorch's ops compute through the process, and every way a library
// can misbehave - a crash, a hang, a CPU hog, a write past its output, a huge allocation,
// a malformed shape, an exception-free abort - fails the call with what happened while
// the caller (here: the test process, in ipupodd: the server) carries on.
#include "device/customop/host_process.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/customop/custom_op_library.h"
#include "device/customop/remote_custom_op.h"
#include "tests/device/customop/test_library.h"
#include <dlfcn.h>
#include <signal.h>

namespace ipupod::customop {
namespace {

using tensor::DType;
using tensor::Tensor;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::kSanitized;
using testing::NodeFor;
using testing::TestLimits;
using testing::TestOpsLibrary;

std::shared_ptr<CustomOpLibrary> Start(const HostLimits& limits = TestLimits(), int max = 8) {
  absl::StatusOr<std::shared_ptr<CustomOpLibrary>> library =
      CustomOpLibrary::Start(TestOpsLibrary(), limits, std::make_shared<HostBudget>(max));
  EXPECT_TRUE(library.ok()) << library.status();
  return library.ok() ? *library : nullptr;
}

std::unique_ptr<RemoteCustomOp> Op(std::shared_ptr<CustomOpLibrary> library,
                                   const std::string& domain, const std::string& name) {
  const std::vector<OpInfo>& ops = library->info().ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].domain == domain && ops[i].name == name) {
      return std::make_unique<RemoteCustomOp>(library, static_cast<uint32_t>(i));
    }
  }
  ADD_FAILURE() << "no op " << domain << "::" << name;
  return nullptr;
}

Tensor Floats(const std::vector<float>& v) {
  return *Tensor::FromValues<float>({static_cast<int64_t>(v.size())}, v);
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

// Infers and computes `op` on float inputs; the outputs, or the first failure.
absl::StatusOr<std::vector<Tensor>> RunOp(const RemoteCustomOp& op, const graph::Node& node,
                                          const std::vector<Tensor>& inputs) {
  std::vector<graph::TensorType> types;
  for (const Tensor& t : inputs) types.push_back({t.dtype(), t.shape()});
  std::vector<const graph::TensorType*> type_ptrs;
  std::vector<const Tensor*> value_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    type_ptrs.push_back(&types[i]);
    value_ptrs.push_back(&inputs[i]);
  }
  absl::StatusOr<std::vector<graph::TensorType>> out = op.Infer(node, type_ptrs);
  if (!out.ok()) return out.status();
  std::vector<Tensor> outputs;
  for (const graph::TensorType& t : *out) outputs.push_back(*Tensor::Create(t.dtype, t.shape));
  absl::Status status = op.Compute(node, value_ptrs, absl::MakeSpan(outputs));
  if (!status.ok()) return status;
  return outputs;
}

absl::Status RunBad(std::shared_ptr<CustomOpLibrary> library, const std::string& name) {
  std::unique_ptr<RemoteCustomOp> op = Op(library, "test.bad", name);
  return RunOp(*op, NodeFor("test.bad::" + name, 1, 1), {Floats({1, 2, 3, 4})}).status();
}

// The crash's text: a sanitized host reports the crash itself and exits.
std::string Crash(const std::string& signal) {
  return kSanitized ? "in its compute function" : signal + " in its compute function";
}

TEST(HostProcessTest, StartReadsTheLibrarysTable) {
  std::shared_ptr<CustomOpLibrary> library = Start();
  ASSERT_NE(library, nullptr);
  EXPECT_EQ(library->info().name, "ipupod test ops");
  std::unique_ptr<RemoteCustomOp> cube = Op(library, "com.acme", "Cube");
  EXPECT_EQ(cube->name(), "com.acme::Cube");
  EXPECT_TRUE(cube->has_gradient());
  EXPECT_EQ(cube->info().input_types, (std::vector<int32_t>{1, 1}));
  EXPECT_FALSE(Op(library, "com.acme", "NoGrad")->has_gradient());
  EXPECT_EQ(Op(library, "com.acme", "LeakyRelu")->info().attributes,
            std::vector<std::string>{"alpha"});
}

TEST(HostProcessTest, CubeComputesAndDifferentiatesThroughTheHost) {
  std::shared_ptr<CustomOpLibrary> library = Start();
  std::unique_ptr<RemoteCustomOp> cube = Op(library, "com.acme", "Cube");
  const graph::Node node = NodeFor("com.acme::Cube", 2, 2);
  absl::StatusOr<std::vector<Tensor>> out =
      RunOp(*cube, node, {Floats({2, -1, 0.5f}), Floats({4, 4, 4})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{12, 3, 4.125f}));
  EXPECT_EQ(Values((*out)[1]), (std::vector<float>{8, -1, 0.125f}));
  const Tensor x = Floats({2, -1, 0.5f}), bias = Floats({4, 4, 4}), g0 = Floats({1, 1, 2});
  std::vector<std::optional<Tensor>> grads(2);
  ASSERT_TRUE(cube->Gradient(node, {&x, &bias}, {&(*out)[0], &(*out)[1]}, {&g0, nullptr},
                             {true, true}, grads)
                  .ok());
  EXPECT_EQ(Values(*grads[0]), (std::vector<float>{12, 3, 1.5f}));  // 3 x^2 (g0 + 0)
  EXPECT_EQ(Values(*grads[1]), (std::vector<float>{1, 1, 2}));
}

TEST(HostProcessTest, LeakyReluReadsItsAttribute) {
  std::shared_ptr<CustomOpLibrary> library = Start();
  std::unique_ptr<RemoteCustomOp> op = Op(library, "com.acme", "LeakyRelu");
  graph::Node node = NodeFor("com.acme::LeakyRelu", 1, 1);
  node.attributes["alpha"] = 0.02f;
  absl::StatusOr<std::vector<Tensor>> out = RunOp(*op, node, {Floats({-1, -0.5f, 0, 0.5f, 1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), (std::vector<float>{-0.02f, -0.01f, 0, 0.5f, 1}));
}

TEST(HostProcessTest, ANodeTheOpDoesNotTakeIsRefused) {
  std::shared_ptr<CustomOpLibrary> library = Start();
  std::unique_ptr<RemoteCustomOp> op = Op(library, "com.acme", "LeakyRelu");
  graph::Node node = NodeFor("com.acme::LeakyRelu", 1, 1);
  node.attributes["beta"] = 1.0f;
  absl::Status status = op->CheckNode(node);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("attribute 'beta' is not one custom op "
                                          "com.acme::LeakyRelu"));
  node.attributes.clear();
  node.attributes["alpha"] = *Tensor::Create(DType::kFloat32, {1});
  EXPECT_THAT(op->CheckNode(node).message(), HasSubstr("is a tensor"));
  EXPECT_THAT(op->CheckNode(NodeFor("com.acme::LeakyRelu", 2, 1)).message(),
              HasSubstr("has 2 inputs and 1 outputs"));
  const Tensor ints = *Tensor::FromValues<int64_t>({1}, std::vector<int64_t>{1});
  absl::Status typed = RunOp(*op, NodeFor("com.acme::LeakyRelu", 1, 1), {ints}).status();
  EXPECT_EQ(typed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(typed.message(), HasSubstr("input 0 is int64; custom op com.acme::LeakyRelu "
                                         "takes float32 there"));
}

TEST(HostProcessTest, ACrashFailsTheCallAndTheNextCallStartsAnotherHost) {
  std::shared_ptr<CustomOpLibrary> library = Start();
  const pid_t first = library->pid();
  absl::Status status = RunBad(library, "Segfault");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("custom op test.bad::Segfault"),
                                      HasSubstr(Crash("crashed (signal 11, SIGSEGV)"))));
  EXPECT_EQ(library->pid(), 0);
  EXPECT_NE(kill(first, 0), 0);  // gone and reaped
  std::unique_ptr<RemoteCustomOp> cube = Op(library, "com.acme", "Cube");
  absl::StatusOr<std::vector<Tensor>> out =
      RunOp(*cube, NodeFor("com.acme::Cube", 2, 2), {Floats({2}), Floats({4})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values((*out)[0]), std::vector<float>{12});
  EXPECT_NE(library->pid(), first);
}

TEST(HostProcessTest, AfterThreeRestartsTheLibraryIsRefused) {
  std::shared_ptr<CustomOpLibrary> library = Start();
  for (int i = 0; i <= kRestartsMax; ++i) {
    EXPECT_EQ(RunBad(library, "Abort").code(), absl::StatusCode::kInternal) << i;
  }
  absl::Status status = RunBad(library, "Abort");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("failed 4 times in this program; fix the library, "
                                          "then load the program again"));
}

TEST(HostProcessTest, AbortIsACrash) {
  absl::Status status = RunBad(Start(), "Abort");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr(Crash("crashed (signal 6, SIGABRT)")));
}

TEST(HostProcessTest, AHangIsKilledAtTheCallsDeadline) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = RunBad(Start(TestLimits(absl::Seconds(1))), "Spin");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(),
              HasSubstr("custom op test.bad::Spin did not return from its compute function "
                        "within 1s; its host process was killed"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(HostProcessTest, TheCpuLimitEndsASpinBeforeTheDeadline) {
  HostLimits limits = TestLimits(absl::Seconds(60));
  limits.cpu_seconds_per_call = 1;
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = RunBad(Start(limits), "Spin");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(),
              HasSubstr("exceeded its CPU time (signal 24, SIGXCPU) in its compute function"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(HostProcessTest, WritingPastAnOutputIsCaught) {
  absl::Status status = RunBad(Start(), "Overrun");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(),
              HasSubstr("custom op test.bad::Overrun misbehaved in its compute function: wrote "
                        "past the end of output 0 (dtype 1 [4], 16 bytes); its host process "
                        "was stopped"));
}

TEST(HostProcessTest, AHugeAllocationStopsAtTheAddressSpaceLimit) {
  if (kSanitized) GTEST_SKIP() << "a sanitized host runs without RLIMIT_AS";
  HostLimits limits = TestLimits();
  limits.address_space_bytes = int64_t{512} << 20;
  absl::Status status = RunBad(Start(limits), "HugeAlloc");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("MiB before malloc failed"));
  int mib = 0;
  ASSERT_EQ(std::sscanf(status.message().data() + status.message().find("allocated"),
                        "allocated %d MiB", &mib),
            1);
  EXPECT_LT(mib, 512);
}

TEST(HostProcessTest, AMalformedShapeIsCaught) {
  absl::Status status = RunBad(Start(), "BadShape");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("custom op test.bad::BadShape misbehaved in its shape "
                                          "function: gave output 0 rank 9 (0 to 8)"));
}

TEST(HostProcessTest, TheLibrarysOwnErrorIsInvalidArgument) {
  absl::Status status = RunBad(Start(), "Fails");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("custom op test.bad::Fails: its compute function "
                                          "failed: this op always fails"));
}

TEST(HostProcessTest, ALibraryThatDoesNotLoadSaysWhy) {
  // libm: a shared library without the entry point (a sanitizer intercepts libc's
  // functions, whose address would then be the test's own).
  Dl_info libm{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(static_cast<double (*)(double)>(&::cos)), &libm), 0);
  absl::Status status = HostProcess::Start(libm.dli_fname, TestLimits()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("exports no IpupodCustomOpLibraryGet"));
  status = HostProcess::Start("/nonexistent/libx.so", TestLimits()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("dlopen failed"));
  status = HostProcess::Start(IPUPOD_TEST_CUSTOM_OPS_BAD_ABI, TestLimits()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("is of ABI version 99; this ipupod reads 1"));
}

TEST(HostProcessTest, AMissingHostBinaryIsUnavailable) {
  HostLimits limits = TestLimits();
  limits.host_binary = "/nonexistent/ipupod-custom-op-host";
  absl::Status status = HostProcess::Start(TestOpsLibrary(), limits).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("cannot start the custom op host"));
}

std::string ReadProc(pid_t pid, const std::string& file) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(HostProcessTest, TheHostHasNoneOfItsParentsDescriptorsOrEnvironment) {
  std::shared_ptr<CustomOpLibrary> library = Start();
  const pid_t pid = library->pid();
  // /dev/null as 0-2, the socket as 3, and only the host's own watch of its parent
  // (a pidfd, host.h) besides.
  std::map<int, std::string> fds;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    fds[std::stoi(entry.path().filename().string())] =
        std::filesystem::read_symlink(entry.path()).string();
  }
  ASSERT_EQ(fds.size(), 5u);
  for (int fd : {0, 1, 2}) EXPECT_EQ(fds[fd], "/dev/null");
  EXPECT_THAT(fds[3], HasSubstr("socket:"));
  EXPECT_EQ(fds[4], "anon_inode:[pidfd]");
  EXPECT_EQ(ReadProc(pid, "environ"), "");
  const std::string limits = ReadProc(pid, "limits");
  EXPECT_THAT(limits, HasSubstr("Max core file size        0"));
  if (!kSanitized) {
    EXPECT_THAT(limits, HasSubstr("Max address space         1073741824"));
  }
  library.reset();
  EXPECT_NE(kill(pid, 0), 0);  // the library's end is the process's
}

// What a loaded library tries beyond its operands (host_sandbox.h).
std::string Escape(std::shared_ptr<CustomOpLibrary> library, const std::string& what) {
  std::unique_ptr<RemoteCustomOp> op = Op(library, "test.bad", "Escape");
  graph::Node node = NodeFor("test.bad::Escape", 1, 1);
  node.attributes["what"] = what;
  return std::string(RunOp(*op, node, {Floats({1})}).status().message());
}

TEST(HostProcessTest, ALoadedLibraryCannotOpenFilesSpawnOrReachOtherProcesses) {
  if (kSanitized) GTEST_SKIP() << "a sanitized host runs without its system call filter";
  std::shared_ptr<CustomOpLibrary> library = Start();
  EXPECT_THAT(Escape(library, "open"), HasSubstr("open: Permission denied"));
  EXPECT_THAT(Escape(library, "socket"), HasSubstr("socket: Operation not permitted"));
  EXPECT_THAT(Escape(library, "fork"), HasSubstr("fork: Operation not permitted"));
  EXPECT_THAT(Escape(library, "exec"), HasSubstr("exec: Operation not permitted"));
  EXPECT_THAT(Escape(library, "parent"), HasSubstr("parent: Operation not permitted"));
  EXPECT_THAT(Escape(library, "thread"), HasSubstr("thread: done"));  // threads stay
  EXPECT_NE(library->pid(), 0);  // refusals are errors the library sees, not crashes
}

TEST(HostProcessTest, TheBudgetBoundsHowManyLibrariesRun) {
  auto budget = std::make_shared<HostBudget>(1);
  auto first = CustomOpLibrary::Start(TestOpsLibrary(), TestLimits(), budget);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::Status second = CustomOpLibrary::Start(TestOpsLibrary(), TestLimits(), budget).status();
  EXPECT_EQ(second.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.message(), HasSubstr("custom_ops.max_hosts"));
  first->reset();
  EXPECT_TRUE(CustomOpLibrary::Start(TestOpsLibrary(), TestLimits(), budget).ok());
  EXPECT_EQ(budget->running(), 0);
}

TEST(HostProcessTest, CallsFromManyThreadsAreSerialisedAndEachGetsItsOwnResult) {
  std::shared_ptr<CustomOpLibrary> library = Start();
  std::unique_ptr<RemoteCustomOp> cube = Op(library, "com.acme", "Cube");
  const graph::Node node = NodeFor("com.acme::Cube", 2, 2);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const float x = static_cast<float>(t), b = static_cast<float>(i);
        absl::StatusOr<std::vector<Tensor>> out = RunOp(*cube, node, {Floats({x}), Floats({b})});
        if (!out.ok() || Values((*out)[0]) != std::vector<float>{x * x * x + b}) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace ipupod::customop
