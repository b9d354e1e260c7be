// The backward rule of custom ops (device/training/grad_custom.cc): the op's own gradient
// function against central finite differences, and the compile error for a custom op
// without one on the gradient's path. The op is in-process (tests/device/graph/fake_custom_ops.h);
// tests/device/customop/library_registry_test.cc runs the C library's through its host process.
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/onnx_import.h"
#include "device/training/autodiff.h"
#include "tests/device/graph/fake_custom_ops.h"
#include "tests/device/training/grad_check.h"

namespace ipupod::training {
namespace {

using graph::testing::FakeCube;
using graph::testing::FakeResolver;
using testing::ExpectGradientsMatch;
using testing::GradCase;
using ::testing::HasSubstr;

// y = out + cube of Cube(a, b): both outputs carry a gradient back.
void CubeCase(GradCase& c) {
  const std::string a = c.RandomWeight("a", {2, 3});
  const std::string b = c.RandomWeight("b", {2, 3});
  c.builder().Node("Cube", {a, b}, {"out", "cube"}, "/Cube").set_domain("com.acme");
  c.builder().Node("Add", {"out", "cube"}, {"y"});
  auto* opset = c.builder().model().add_opset_import();
  opset->set_domain("com.acme");
  opset->set_version(1);
  c.Finish("y", {2, 3});
}

TEST(CustomGradTest, TheOpsGradientMatchesFiniteDifferences) {
  auto cube = std::make_shared<FakeCube>();
  FakeResolver resolver(cube);
  GradCase c(14);
  CubeCase(c);
  ExpectGradientsMatch(c, 1e-2, &resolver);
  EXPECT_GT(cube->gradients.load(), 0);
}

TEST(CustomGradTest, AnOpWithoutAGradientOnThePathFailsNamingIt) {
  FakeResolver resolver(std::make_shared<FakeCube>(/*with_gradient=*/false));
  GradCase c(14);
  CubeCase(c);
  absl::StatusOr<graph::Graph> g = graph::ImportOnnx(c.builder().Bytes(), {}, &resolver);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::unique_ptr<Autodiff>> ad = Autodiff::Create(*g, "loss", c.weights());
  ASSERT_EQ(ad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ad.status().message(),
              HasSubstr("custom op com.acme::Cube (library 'fake') has no gradient function"));
}

TEST(CustomGradTest, AnOpWithoutAGradientOffThePathTrains) {
  FakeResolver resolver(std::make_shared<FakeCube>(/*with_gradient=*/false));
  GradCase c(14);
  const std::string w = c.RandomWeight("w", {2, 3});
  c.builder().Floats("x", {2, 3}, std::vector<float>(6, 0.5f));
  c.builder().Node("Cube", {"x", "x"}, {"out", "cube"}, "/Cube").set_domain("com.acme");
  c.builder().Node("Mul", {"out", w}, {"y"});
  auto* opset = c.builder().model().add_opset_import();
  opset->set_domain("com.acme");
  opset->set_version(1);
  c.Finish("y", {2, 3});
  ExpectGradientsMatch(c, 1e-2, &resolver);
}

}  // namespace
}  // namespace ipupod::training
