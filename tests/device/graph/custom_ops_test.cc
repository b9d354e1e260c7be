// Custom ops in the graph (device/graph/custom_ops.h): ImportOnnx asks the resolver for the
// model's custom domains and binds the nodes; shape inference, the interpreter and the
// signature check go through the bound op; custom nodes are never folded. The op here is
// in-process (tests/device/graph/fake_custom_ops.h); tests/customop run real libraries.
#include "device/graph/custom_ops.h"

#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "tests/device/graph/fake_custom_ops.h"

namespace ipupod::graph {
namespace {

using testing::CubeModel;
using testing::FakeCube;
using testing::FakeResolver;
using ::testing::HasSubstr;

Tensor Values(std::vector<float> v) { return *Tensor::FromValues<float>({2, 3}, v); }

TEST(CustomOpsTest, ImportWithoutAResolverRefusesACustomDomain) {
  absl::StatusOr<Graph> g = ImportOnnx(CubeModel(false));
  ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("op domain 'com.acme' is a custom op's"));
  EXPECT_THAT(g.status().message(), HasSubstr("custom_ops.library_dirs"));
}

TEST(CustomOpsTest, TheResolverIsAskedForEachDomainWithItsVersionAndLibrary) {
  auto cube = std::make_shared<FakeCube>();
  FakeResolver resolver(cube);
  ASSERT_TRUE(ImportOnnx(CubeModel(false, "/opt/ops/libacme.so", 3), {}, &resolver).ok());
  ASSERT_EQ(resolver.asked.size(), 1u);
  EXPECT_EQ(resolver.asked[0].domain, "com.acme");
  EXPECT_EQ(resolver.asked[0].version, 3);
  EXPECT_EQ(resolver.asked[0].library, "/opt/ops/libacme.so");
  EXPECT_EQ(resolver.asked[0].ops, (std::set<std::string>{"Cube"}));
}

TEST(CustomOpsTest, AModelWithoutTheMetadataAsksWithNoLibrary) {
  FakeResolver resolver(std::make_shared<FakeCube>());
  ASSERT_TRUE(ImportOnnx(CubeModel(false, ""), {}, &resolver).ok());
  EXPECT_EQ(resolver.asked.at(0).library, "");
}

TEST(CustomOpsTest, TheInterpreterRunsTheBoundOp) {
  auto cube = std::make_shared<FakeCube>();
  FakeResolver resolver(cube);
  absl::StatusOr<Graph> g = ImportOnnx(CubeModel(false), {}, &resolver);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->nodes[0].op_type, "com.acme::Cube");
  auto interpreter = Interpreter::Create(*std::move(g));
  ASSERT_TRUE(interpreter.ok()) << interpreter.status();
  const std::vector<Tensor> in = {Values({1, 2, 3, -1, -2, 0.5f}), Values({4, 4, 4, 4, 4, 4})};
  absl::StatusOr<std::vector<Tensor>> out = (*interpreter)->Run(in);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<float> y((*out)[0].data<float>(), (*out)[0].data<float>() + 6);
  const std::vector<float> c((*out)[1].data<float>(), (*out)[1].data<float>() + 6);
  EXPECT_EQ(y, (std::vector<float>{5, 12, 31, 3, -4, 4.125f}));
  EXPECT_EQ(c, (std::vector<float>{1, 8, 27, -1, -8, 0.125f}));
  EXPECT_EQ(cube->computes.load(), 1);
  EXPECT_EQ((*interpreter)->node_costs()[0].flops, 12);  // one per output element
}

TEST(CustomOpsTest, ACustomNodeOnConstantsIsNeitherFoldedNorPrepared) {
  auto cube = std::make_shared<FakeCube>();
  FakeResolver resolver(cube);
  absl::StatusOr<Graph> g = ImportOnnx(
      CubeModel(/*bias_constant=*/true, "/ops/libacme.so", 1, /*x_constant=*/true), {}, &resolver);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].op_type, "com.acme::Cube");
  auto interpreter = Interpreter::Create(*std::move(g));
  ASSERT_TRUE(interpreter.ok()) << interpreter.status();
  EXPECT_EQ(cube->computes.load(), 0);
  ASSERT_TRUE((*interpreter)->Run({}).ok());
  ASSERT_TRUE((*interpreter)->Run({}).ok());
  EXPECT_EQ(cube->computes.load(), 2);
}

TEST(CustomOpsTest, WhatTheOpRefusesInANodeFailsTheImportNamingTheNode) {
  auto cube = std::make_shared<FakeCube>(true, absl::InvalidArgumentError("too many inputs"));
  FakeResolver resolver(cube);
  absl::StatusOr<Graph> g = ImportOnnx(CubeModel(false), {}, &resolver);
  ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("com.acme::Cube node '/Cube_0': too many inputs"));
}

TEST(CustomOpsTest, TheResolversErrorKeepsItsCode) {
  FakeResolver resolver(nullptr, absl::PermissionDeniedError("not in custom_ops.library_dirs"));
  absl::StatusOr<Graph> g = ImportOnnx(CubeModel(false), {}, &resolver);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(CustomOpsTest, AMalformedLibrariesLineIsRefused) {
  std::string bytes = CubeModel(false, "");
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(bytes));
  auto* entry = model.add_metadata_props();
  entry->set_key(kCustomOpLibrariesMetadataKey);
  entry->set_value("no equals sign here");
  FakeResolver resolver(std::make_shared<FakeCube>());
  absl::StatusOr<Graph> g = ImportOnnx(model.SerializeAsString(), {}, &resolver);
  ASSERT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("ipupod.custom_op_libraries"));
}

TEST(CustomOpsTest, ADomainIsCustomUnlessItIsOnnxsOrPopTorchs) {
  EXPECT_FALSE(IsCustomDomain(""));
  EXPECT_FALSE(IsCustomDomain("ai.onnx"));
  EXPECT_FALSE(IsCustomDomain("ai.graphcore"));
  EXPECT_TRUE(IsCustomDomain("com.acme"));
  EXPECT_EQ(CustomOpName("com.acme", "Cube"), "com.acme::Cube");
}

}  // namespace
}  // namespace ipupod::graph
