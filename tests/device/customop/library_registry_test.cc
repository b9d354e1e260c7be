// ipupodd's resolver of custom ops (device/customop/library_registry.h): which library paths a
// model may name (only inside the admin's directories, checked before and after symlinks),
// which op of the library serves the model's domain version, and a model imported,
// run and differentiated through the tests' C library in its helper process.
#include "device/customop/library_registry.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "device/training/autodiff.h"
#include "tests/device/customop/test_library.h"
#include "tests/device/graph/fake_custom_ops.h"
#include "tests/device/training/grad_check.h"
#include "tests/support/temp_dir.h"

namespace ipupod::customop {
namespace {

namespace fs = std::filesystem;
using graph::testing::CubeModel;
using ::testing::HasSubstr;
using testing::TestLimits;
using testing::TestOpsDir;
using testing::TestOpsLibrary;

std::unique_ptr<LibraryRegistry> Registry(std::vector<std::string> dirs = {TestOpsDir()}) {
  absl::StatusOr<std::unique_ptr<LibraryRegistry>> registry =
      LibraryRegistry::Create(RegistryOptions{std::move(dirs), TestLimits(), 4});
  EXPECT_TRUE(registry.ok()) << registry.status();
  return registry.ok() ? *std::move(registry) : nullptr;
}

graph::CustomDomainUse Use(const std::string& library, const std::string& op = "Cube",
                           int64_t version = 1, const std::string& domain = "com.acme") {
  return graph::CustomDomainUse{domain, version, library, {op}};
}

TEST(LibraryRegistryTest, CreateRefusesADirectoryThatIsNotOne) {
  absl::Status status =
      LibraryRegistry::Create(RegistryOptions{{"/nonexistent/ops"}, TestLimits(), 4}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("config key custom_ops.library_dirs lists "
                                          "'/nonexistent/ops'"));
  status = LibraryRegistry::Create(RegistryOptions{{"relative/ops"}, TestLimits(), 4}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(LibraryRegistryTest, CreateRefusesAHelperThatIsNotThere) {
  HostLimits limits = TestLimits();
  limits.host_binary = "/nonexistent/ipupod-custom-op-host";
  absl::Status status =
      LibraryRegistry::Create(RegistryOptions{{TestOpsDir()}, limits, 4}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("custom_ops.host"));
  // Without directories nothing runs, so nothing is needed.
  EXPECT_TRUE(LibraryRegistry::Create(RegistryOptions{{}, limits, 4}).ok());
}

TEST(LibraryRegistryTest, WithoutDirectoriesEveryLibraryIsRefused) {
  absl::Status status = Registry({})->Resolve({Use(TestOpsLibrary())}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("custom op library '" + TestOpsLibrary() + "'"));
  EXPECT_THAT(status.message(), HasSubstr("custom_ops.library_dirs lists no directory"));
}

TEST(LibraryRegistryTest, ALibraryOutsideTheDirectoriesIsRefusedNamingPathAndKey) {
  test_support::TempDir other;
  std::unique_ptr<LibraryRegistry> registry = Registry({other.path()});
  absl::Status status = registry->Resolve({Use(TestOpsLibrary())}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("custom op library '" + TestOpsLibrary() +
                                          "' is not in a directory this ipupodd allows (config key "
                                          "custom_ops.library_dirs: " +
                                          other.path()));
  // ".." cannot climb out, and a missing file outside is not even looked at.
  EXPECT_EQ(registry->CheckLibraryPath(other.path() + "/../x/lib.so").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry->CheckLibraryPath("/nonexistent/lib.so").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry->CheckLibraryPath("lib.so").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LibraryRegistryTest, ASymlinkOutOfTheDirectoryIsRefusedAndOneWithinIsFollowed) {
  test_support::TempDir dir;
  fs::create_symlink(TestOpsLibrary(), dir.sub("escape.so"));
  std::unique_ptr<LibraryRegistry> registry = Registry({dir.path()});
  absl::Status status = registry->CheckLibraryPath(dir.sub("escape.so")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("(which resolves to '"));
  EXPECT_EQ(registry->CheckLibraryPath(dir.sub("missing.so")).status().code(),
            absl::StatusCode::kNotFound);
  // An allowed directory that is itself a symlink admits what lies beneath it.
  fs::create_directory_symlink(TestOpsDir(), dir.sub("ops"));
  std::unique_ptr<LibraryRegistry> linked = Registry({dir.sub("ops")});
  const std::string through = dir.sub("ops") + "/" + fs::path(TestOpsLibrary()).filename().string();
  absl::StatusOr<std::string> path = linked->CheckLibraryPath(through);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, fs::canonical(TestOpsLibrary()).string());
}

TEST(LibraryRegistryTest, TheModelMustNameALibrary) {
  absl::Status status = Registry()->Resolve({Use("")}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("names no library for its custom op domain "
                                          "'com.acme'"));
}

TEST(LibraryRegistryTest, AnOpOrVersionTheLibraryLacksIsRefusedSayingWhatItHas) {
  std::unique_ptr<LibraryRegistry> registry = Registry();
  absl::Status status = registry->Resolve({Use(TestOpsLibrary(), "Square")}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("has no op com.acme::Square; it has com.acme::Cube"));
  status = registry->Resolve({Use(TestOpsLibrary(), "Cube", 0)}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("has com.acme::Cube for domain versions 1.., not for "
                                          "the model's version 0"));
  EXPECT_EQ(registry->running_hosts(), 0);  // a failed resolve keeps no process
}

TEST(LibraryRegistryTest, AModelRunsThroughTheLibraryWhileItsGraphLives) {
  std::unique_ptr<LibraryRegistry> registry = Registry();
  absl::StatusOr<graph::Graph> g =
      graph::ImportOnnx(CubeModel(false, TestOpsLibrary()), {}, registry.get());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(registry->running_hosts(), 1);
  auto interpreter = graph::Interpreter::Create(*std::move(g));
  ASSERT_TRUE(interpreter.ok()) << interpreter.status();
  const std::vector<tensor::Tensor> in = {
      *tensor::Tensor::FromValues<float>({2, 3}, std::vector<float>{1, 2, 3, -1, -2, 0.5f}),
      *tensor::Tensor::FromValues<float>({2, 3}, std::vector<float>(6, 4.0f))};
  absl::StatusOr<std::vector<tensor::Tensor>> out = (*interpreter)->Run(in);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::vector<float>((*out)[0].data<float>(), (*out)[0].data<float>() + 6),
            (std::vector<float>{5, 12, 31, 3, -4, 4.125f}));
  interpreter->reset();
  EXPECT_EQ(registry->running_hosts(), 0);
}

void CubeCase(training::testing::GradCase& c, const std::string& op) {
  const std::string a = c.RandomWeight("a", {2, 3});
  const std::string b = c.RandomWeight("b", {2, 3});
  if (op == "Cube") {
    c.builder().Node("Cube", {a, b}, {"out", "cube"}, "/Cube").set_domain("com.acme");
    c.builder().Node("Add", {"out", "cube"}, {"y"});
  } else {
    c.builder().Node(op, {a}, {"n"}, "/" + op).set_domain("com.acme");
    c.builder().Node("Add", {"n", b}, {"y"});
  }
  auto* opset = c.builder().model().add_opset_import();
  opset->set_domain("com.acme");
  opset->set_version(1);
  auto* entry = c.builder().model().add_metadata_props();
  entry->set_key(graph::kCustomOpLibrariesMetadataKey);
  entry->set_value("com.acme=" + TestOpsLibrary());
  c.Finish("y", {2, 3});
}

TEST(LibraryRegistryTest, TheLibrarysGradientsMatchFiniteDifferences) {
  std::unique_ptr<LibraryRegistry> registry = Registry();
  for (const char* op : {"Cube", "LeakyRelu"}) {
    training::testing::GradCase c(14);
    CubeCase(c, op);
    training::testing::ExpectGradientsMatch(c, 1e-2, registry.get());
  }
}

TEST(LibraryRegistryTest, AnOpWithoutAGradientOnThePathFailsTraining) {
  std::unique_ptr<LibraryRegistry> registry = Registry();
  training::testing::GradCase c(14);
  CubeCase(c, "NoGrad");
  absl::StatusOr<graph::Graph> g = graph::ImportOnnx(c.builder().Bytes(), {}, registry.get());
  ASSERT_TRUE(g.ok()) << g.status();
  absl::Status status = training::Autodiff::Create(*g, "loss", c.weights()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("custom op com.acme::NoGrad (library '" +
                        fs::canonical(TestOpsLibrary()).string() + "') has no gradient function"));
}

}  // namespace
}  // namespace ipupod::customop
