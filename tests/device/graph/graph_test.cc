#include "device/graph/graph.h"

#include <gtest/gtest.h>

#include "device/graph/ops.h"

namespace ipupod::graph {
namespace {

TEST(GraphTest, ModulePathFromTorchNodeNames) {
  EXPECT_EQ(ModulePathFromNodeName("/layers.0/fc/Gemm"), "layers.0.fc");
  EXPECT_EQ(ModulePathFromNodeName("/h.3/attn/MatMul"), "h.3.attn");
  // Children of a called Sequential repeat its attribute name with an index.
  EXPECT_EQ(ModulePathFromNodeName("/h.0/mlp/mlp.0/MatMul"), "h.0.mlp.0");
  EXPECT_EQ(ModulePathFromNodeName("/ff.0/ff.0.2/Add"), "ff.0.2");
  EXPECT_EQ(ModulePathFromNodeName("/h.0/mlp/mlp.0/mlp.0.1/Relu"), "h.0.mlp.0.1");
  EXPECT_EQ(ModulePathFromNodeName("/blocks/blocks.0/blocks.0.0/Gemm"), "blocks.0.0");
  // A root Sequential: numeric names all the way.
  EXPECT_EQ(ModulePathFromNodeName("/0/Gemm"), "0");
  EXPECT_EQ(ModulePathFromNodeName("/0/0.1/Relu"), "0.1");
  // Root-level ops and unscoped names.
  EXPECT_EQ(ModulePathFromNodeName("/Add"), "");
  EXPECT_EQ(ModulePathFromNodeName("Identity_3"), "");
  EXPECT_EQ(ModulePathFromNodeName(""), "");
  // A child whose name merely starts like its parent's is not an index.
  EXPECT_EQ(ModulePathFromNodeName("/mlp/mlp.proj/MatMul"), "mlp.mlp.proj");
  // ipupod.poptorch's export scopes (blocks, attributes) are not modules.
  EXPECT_EQ(ModulePathFromNodeName("/transformer/__ipupod_block_3/h.0/attn/MatMul"),
            "transformer.h.0.attn");
  EXPECT_EQ(ModulePathFromNodeName("/__ipupod_block_0/h/__ipupod_attr_1/h.2/Add"), "h.2");
}

TEST(GraphTest, Lookups) {
  Graph g;
  g.initializers.emplace("w", *Tensor::Create(DType::kFloat32, {4}));
  g.value_types["w"] = {DType::kFloat32, {4}};
  EXPECT_NE(g.FindInitializer("w"), nullptr);
  EXPECT_EQ(g.FindInitializer("x"), nullptr);
  EXPECT_EQ(g.FindType("w")->shape, (Shape{4}));
  EXPECT_EQ(g.InitializerBytes(), 16);
  EXPECT_EQ(TypeString({DType::kInt64, {2, 3}}), "int64[2, 3]");
  Node n;
  n.attributes["axis"] = int64_t{1};
  ASSERT_NE(n.FindAttribute("axis"), nullptr);
  EXPECT_EQ(std::get<int64_t>(*n.FindAttribute("axis")), 1);
  EXPECT_EQ(n.FindAttribute("perm"), nullptr);
}

TEST(GraphTest, RegistryCoversTheRequiredOps) {
  for (const char* op : {"MatMul",
                         "Gemm",
                         "Add",
                         "Sub",
                         "Mul",
                         "Div",
                         "Pow",
                         "Sqrt",
                         "Erf",
                         "Neg",
                         "Relu",
                         "Sigmoid",
                         "Tanh",
                         "Softmax",
                         "LogSoftmax",
                         "ReduceMean",
                         "ReduceSum",
                         "Gather",
                         "Reshape",
                         "Flatten",
                         "Transpose",
                         "Unsqueeze",
                         "Squeeze",
                         "Concat",
                         "Slice",
                         "Shape",
                         "Cast",
                         "Constant",
                         "ConstantOfShape",
                         "Identity",
                         "Dropout",
                         "Where",
                         "Equal",
                         "Expand",
                         "LayerNormalization",
                         "BatchNormalization",
                         "Split",
                         "Range"}) {
    EXPECT_NE(FindOp(op), nullptr) << op;
  }
  EXPECT_EQ(FindOp("ConvInteger"), nullptr);
}

}  // namespace
}  // namespace ipupod::graph
