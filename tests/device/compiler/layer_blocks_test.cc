#include "device/compiler/layer_blocks.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/compiler/test_models.h"

namespace ipupod::compiler {
namespace {

using testing::ChainGraph;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

TEST(LayerBlocksTest, FindsGpt2Blocks) {
  auto blocks = FindLayerBlocks(ChainGraph(
      {"", "transformer.wte", "transformer.h.0.attn", "transformer.h.0", "transformer.h.0.mlp.0",
       "transformer.h.1.attn", "transformer.h.1.mlp.2", "transformer.ln_f", "lm_head"}));
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_THAT(blocks->containers, ElementsAre("transformer.h"));
  EXPECT_EQ(blocks->Pattern(), "transformer.h.N");
  EXPECT_EQ(blocks->num_layers, 2);
  EXPECT_THAT(blocks->node_layer, ElementsAre(-1, -1, 0, 0, 0, 1, 1, -1, -1));
}

TEST(LayerBlocksTest, FindsBertEncoderLayers) {
  std::vector<std::string> paths = {"bert.embeddings.word_embeddings", "bert.embeddings"};
  for (int l = 0; l < 12; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l);
    paths.push_back(p + ".attention.self.query");
    paths.push_back(p + ".attention.self");
    paths.push_back(p + ".output.dense");
  }
  paths.push_back("bert.pooler.dense");
  auto blocks = FindLayerBlocks(ChainGraph(paths));
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(blocks->Pattern(), "bert.encoder.layer.N");
  EXPECT_EQ(blocks->num_layers, 12);
  EXPECT_EQ(blocks->node_layer.front(), -1);
  EXPECT_EQ(blocks->node_layer[2], 0);
  EXPECT_EQ(blocks->node_layer[paths.size() - 2], 11);
  EXPECT_EQ(blocks->node_layer.back(), -1);
}

TEST(LayerBlocksTest, FindsCommonContainerNames) {
  for (const std::string name : {"layers", "layer", "blocks", "h", "encoder.layer"}) {
    auto blocks = FindLayerBlocks(ChainGraph(
        {"embed", name + ".0.fc", name + ".0.act", name + ".1.fc", name + ".1.act", "head"}));
    ASSERT_TRUE(blocks.ok()) << name;
    EXPECT_EQ(blocks->Pattern(), name + ".N");
    EXPECT_EQ(blocks->num_layers, 2);
  }
}

TEST(LayerBlocksTest, NestedIndexedContainersCountTheOutermost) {
  // h.N.mlp.M: mlp.M (3 indices) is inside h.N (2): h covers more nodes.
  auto blocks = FindLayerBlocks(
      ChainGraph({"h.0.mlp.0", "h.0.mlp.1", "h.0.mlp.2", "h.0.attn", "h.1.mlp.0", "h.1.mlp.2"}));
  ASSERT_TRUE(blocks.ok());
  EXPECT_THAT(blocks->containers, ElementsAre("h"));
  EXPECT_THAT(blocks->node_layer, ElementsAre(0, 0, 0, 0, 1, 1));
}

TEST(LayerBlocksTest, ZippedSiblingListsAreTheSameLayers) {
  auto blocks =
      FindLayerBlocks(ChainGraph({"embed", "attn.0", "norm1.0", "ff.0.0", "ff.0.2", "norm2.0",
                                  "attn.1", "norm1.1", "ff.1.0", "ff.1.2", "norm2.1", "head"}));
  ASSERT_TRUE(blocks.ok());
  EXPECT_EQ(blocks->containers.front(), "ff");
  EXPECT_EQ(blocks->containers.size(), 4u);
  EXPECT_THAT(blocks->node_layer, ElementsAre(-1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, -1));
}

TEST(LayerBlocksTest, LayerCountIsLargestIndexPlusOne) {
  // layers.2 (a Dropout in eval mode) has no nodes but still counts.
  auto blocks = FindLayerBlocks(ChainGraph({"layers.0", "layers.1", "layers.3"}));
  ASSERT_TRUE(blocks.ok());
  EXPECT_EQ(blocks->num_layers, 4);
}

TEST(LayerBlocksTest, RootSequential) {
  auto blocks = FindLayerBlocks(ChainGraph({"0", "1.fc", "2"}));
  ASSERT_TRUE(blocks.ok());
  EXPECT_EQ(blocks->Pattern(), "N");
  EXPECT_EQ(blocks->num_layers, 3);
}

TEST(LayerBlocksTest, NoLayersIsAClearError) {
  auto blocks = FindLayerBlocks(ChainGraph({"fc1", "act", "fc2", ""}));
  EXPECT_EQ(blocks.status().code(), kInvalid);
  EXPECT_THAT(blocks.status().message(), HasSubstr("found no repeated layers"));
}

TEST(LayerIpusTest, OneIpuIgnoresLayersPerIpu) {
  EXPECT_THAT(*LayerIpus({7}, 1, 3), ElementsAre(0, 0, 0));
}

TEST(LayerIpusTest, WildcardsSplitEvenlyRemainderLast) {
  EXPECT_THAT(*LayerIpus({-1}, 4, 10), ElementsAre(0, 0, 1, 1, 2, 2, 3, 3, 3, 3));
  EXPECT_THAT(*LayerIpus({-1, -1, -1, -1}, 4, 10), ElementsAre(0, 0, 1, 1, 2, 2, 3, 3, 3, 3));
  EXPECT_THAT(*LayerIpus({1, 2, -1, -1}, 4, 10), ElementsAre(0, 1, 1, 2, 2, 2, 3, 3, 3, 3));
  EXPECT_THAT(*LayerIpus({-1, 1}, 2, 3), ElementsAre(0, 0, 1));
}

TEST(LayerIpusTest, ExplicitCounts) {
  EXPECT_THAT(*LayerIpus({0, 2, 1}, 3, 3), ElementsAre(1, 1, 2));
}

TEST(LayerIpusTest, CountsThatDoNotFitAreClearErrors) {
  auto sum = LayerIpus({2, 2}, 2, 6);
  EXPECT_EQ(sum.status().code(), kInvalid);
  EXPECT_THAT(sum.status().message(),
              HasSubstr("layers_per_ipu=[2, 2] places 4 layers but the model has 6"));
  auto over = LayerIpus({5, -1}, 2, 4);
  EXPECT_EQ(over.status().code(), kInvalid);
  EXPECT_THAT(over.status().message(), HasSubstr("places 5 layers before the -1 entries"));
  auto length = LayerIpus({2, 2, 2}, 2, 6);
  EXPECT_EQ(length.status().code(), kInvalid);
  EXPECT_THAT(length.status().message(), HasSubstr("has 3 entries but ipus_per_replica is 2"));
}

}  // namespace
}  // namespace ipupod::compiler
