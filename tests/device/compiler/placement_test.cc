#include "device/compiler/placement.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/compiler/test_models.h"

namespace ipupod::compiler {
namespace {

using ::testing::AllOf;
using testing::ChainGraph;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

// n0 ""; n1 wte; n2-n4 h.0; n5-n6 h.1; n7 ln_f; n8 lm_head.
graph::Graph Gpt() {
  return ChainGraph(
      {"", "wte", "h.0.attn", "h.0", "h.0.mlp.0", "h.1.attn", "h.1.mlp.2", "ln_f", "lm_head"});
}

std::vector<int64_t> NodeIpus(const Placement& p) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < p.node_stage.size(); ++i) out.push_back(p.NodeIpu(i));
  return out;
}

TEST(PlacementTest, LayersPerIpuEmbeddingsFirstTailLast) {
  auto p = PlaceByLayers(Gpt(), {1, 1}, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->method, PlacementMethod::kLayersPerIpu);
  EXPECT_THAT(NodeIpus(*p), ElementsAre(0, 0, 0, 0, 0, 1, 1, 1, 1));
  EXPECT_THAT(p->stage_ipu, ElementsAre(0, 1));
  EXPECT_EQ(p->ipus_per_replica, 2);
  EXPECT_THAT(p->notes, Contains(HasSubstr("layers: 2 of h.N")));
  EXPECT_THAT(p->notes, Contains("IPU 1: layer 1"));
  EXPECT_THAT(p->node_names, ElementsAre("n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"));
}

TEST(PlacementTest, LayersPerIpuZeroLayersOnFirstIpu) {
  // BERT's [0, 4, 4, 4]: IPU 0 holds only what precedes the first layer.
  auto p = PlaceByLayers(Gpt(), {0, 1, 1}, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(NodeIpus(*p), ElementsAre(0, 0, 1, 1, 1, 2, 2, 2, 2));
  EXPECT_EQ(p->num_stages(), 3);
}

TEST(PlacementTest, LayersPerIpuIdleIpuIsNoted) {
  auto p = PlaceByLayers(Gpt(), {2, 0}, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_stages(), 1);
  EXPECT_EQ(p->ipus_per_replica, 2);
  EXPECT_THAT(p->notes, Contains(HasSubstr("IPU 1 of each replica has no nodes and idles")));
}

TEST(PlacementTest, OneIpuNeedsNoLayers) {
  auto p = PlaceByLayers(ChainGraph({"fc1", "act", "fc2"}), {-1}, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(NodeIpus(*p), ElementsAre(0, 0, 0));
  EXPECT_EQ(p->num_stages(), 1);
  auto two = PlaceByLayers(ChainGraph({"fc1", "act", "fc2"}), {-1}, 2);
  EXPECT_EQ(two.status().code(), kInvalid);
  EXPECT_THAT(two.status().message(), HasSubstr("found no repeated layers"));
}

TEST(PlacementTest, LayersPerIpuMismatchPropagates) {
  auto p = PlaceByLayers(Gpt(), {1, 2}, 2);
  EXPECT_EQ(p.status().code(), kInvalid);
  EXPECT_THAT(p.status().message(), HasSubstr("places 3 layers but the model has 2"));
}

TEST(PlacementTest, ModuleMapDeepestMatchWins) {
  auto p = PlaceByModuleMap(Gpt(), {{"", 0}, {"h.1", 1}, {"h.1.mlp", 2}, {"lm_head", 3}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->method, PlacementMethod::kModuleMap);
  // ln_f (n7) matches only the root: it stays in the block it falls in.
  EXPECT_THAT(NodeIpus(*p), ElementsAre(0, 0, 0, 0, 0, 1, 2, 2, 3));
  EXPECT_EQ(p->ipus_per_replica, 4);
  EXPECT_THAT(p->stage_ipu, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(p->notes, Contains("module 'h.1.mlp' -> IPU 2 (1 node)"));
}

TEST(PlacementTest, ModuleMapRootSetsStartAndUnmatchedInherit) {
  auto p = PlaceByModuleMap(Gpt(), {{"h.1", 1}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(NodeIpus(*p), ElementsAre(0, 0, 0, 0, 0, 1, 1, 1, 1));
  auto q = PlaceByModuleMap(Gpt(), {{"", 1}, {"h.1", 2}});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_THAT(NodeIpus(*q), ElementsAre(1, 1, 1, 1, 1, 2, 2, 2, 2));
  EXPECT_THAT(q->notes, Contains(HasSubstr("IPU 0 of each replica has no nodes")));
}

TEST(PlacementTest, DescendingStagesNameNodesAndStages) {
  auto p = PlaceByModuleMap(Gpt(), {{"", 0}, {"h.0", 1}, {"h.1", 0}});
  EXPECT_EQ(p.status().code(), kInvalid);
  EXPECT_THAT(
      p.status().message(),
      AllOf(HasSubstr("pipeline stages must ascend"), HasSubstr("node 'n5' (module h.1.attn)"),
            HasSubstr("on stage 0 (IPU 0)"), HasSubstr("from node 'n4' (module h.0.mlp.0)"),
            HasSubstr("later stage 1 (IPU 1)")));
}

TEST(PlacementTest, ModuleMapKeyThatMatchesNothingIsAnError) {
  auto p = PlaceByModuleMap(Gpt(), {{"", 0}, {"layers.2", 1}});
  EXPECT_EQ(p.status().code(), kInvalid);
  EXPECT_THAT(p.status().message(),
              AllOf(HasSubstr("'layers.2' matches no node"), HasSubstr("h.0.attn")));
  // "h.1" must not match "h.10" or "h.1x".
  auto prefix = PlaceByModuleMap(ChainGraph({"h.10.fc", "h.1x"}), {{"h.1", 1}});
  EXPECT_EQ(prefix.status().code(), kInvalid);
}

TEST(PlacementTest, IpuNumbersBeyondThePodAreRejected) {
  auto p = PlaceByModuleMap(Gpt(), {{"lm_head", 300}});
  EXPECT_EQ(p.status().code(), kInvalid);
  EXPECT_THAT(p.status().message(), HasSubstr("IPU 300; IPU numbers run from 0 to 255"));
}

TEST(PlacementTest, AnnotationsWithInheritance) {
  NodeAnnotations a;
  a["n2"].ipu = 1;
  a["n6"].ipu = 2;
  a["n6"].stage = 2;
  auto p = PlaceByAnnotations(Gpt(), a);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->method, PlacementMethod::kOnnxAttributes);
  EXPECT_THAT(NodeIpus(*p), ElementsAre(0, 0, 1, 1, 1, 1, 2, 2, 2));
  EXPECT_THAT(p->node_stage, ElementsAre(0, 0, 1, 1, 1, 1, 2, 2, 2));
  EXPECT_THAT(p->notes, Contains(HasSubstr("2 of 9 nodes carry")));
}

TEST(PlacementTest, AnnotationsMayRevisitAnIpuInALaterStage) {
  NodeAnnotations a;
  a["n3"] = {1, 1};
  a["n6"] = {0, 2};
  auto p = PlaceByAnnotations(Gpt(), a);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->stage_ipu, ElementsAre(0, 1, 0));
  EXPECT_EQ(p->ipus_per_replica, 2);
}

TEST(PlacementTest, AnnotatedStagesAreDenseAndOnOneIpu) {
  NodeAnnotations gap;
  gap["n0"].stage = 3;
  gap["n5"].stage = 7;
  auto p = PlaceByAnnotations(Gpt(), gap);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->node_stage, ElementsAre(0, 0, 0, 0, 0, 1, 1, 1, 1));
  EXPECT_THAT(p->stage_ipu, ElementsAre(3, 7));

  NodeAnnotations split;
  split["n2"] = {1, 1};
  split["n5"] = {2, 1};
  auto bad = PlaceByAnnotations(Gpt(), split);
  EXPECT_EQ(bad.status().code(), kInvalid);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("pipeline stage 1 has nodes on IPU 1 and IPU 2 (node 'n5')"));
}

TEST(PlacementTest, AnnotationsThatDescendAreRejected) {
  NodeAnnotations a;
  a["n0"].ipu = 1;
  a["n4"].ipu = 0;
  auto p = PlaceByAnnotations(Gpt(), a);
  EXPECT_EQ(p.status().code(), kInvalid);
  EXPECT_THAT(p.status().message(), HasSubstr("node 'n4' (module h.0.mlp.0) on stage 0"));
}

TEST(PlacementTest, AscendingCheckFollowsDataNotOrder) {
  // n0 -> n2 and n1 -> n2: n1 on a later IPU than n2 reads nothing from it,
  // but n2 reads n1.
  graph::Graph g = ChainGraph({"a", "b", "c"});
  g.nodes[1].inputs = {"in"};
  g.nodes[2].inputs = {"v0", "v1"};
  auto p = PlaceByModuleMap(g, {{"a", 0}, {"b", 1}, {"c", 0}});
  EXPECT_EQ(p.status().code(), kInvalid);
  EXPECT_THAT(p.status().message(), HasSubstr("reads 'v1' from node 'n1'"));
}

// n0-n2 phase 0 (IPU 0, then IPU 2 from n2), n3-n8 phase 1 (IPU 1, IPU 3
// from n5, IPU 1 again from n7: an intra-phase copy back).
NodeAnnotations TwoPhases() {
  NodeAnnotations a;
  a["n0"] = {.ipu = 0, .phase = 0};
  a["n2"] = {.ipu = 2, .phase = 0};
  a["n3"] = {.ipu = 1, .phase = 1};
  a["n5"] = {.ipu = 3};
  a["n7"] = {.ipu = 1};
  return a;
}

TEST(PlacementTest, PhasedStagesArePhaseAndIpuPairs) {
  for (ExecutionStrategy s :
       {ExecutionStrategy::kSerialPhased, ExecutionStrategy::kParallelPhased}) {
    auto p = PlaceByAnnotations(Gpt(), TwoPhases(), s);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->phased());
    EXPECT_THAT(p->stage_phase, ElementsAre(0, 0, 1, 1));
    EXPECT_THAT(p->stage_ipu, ElementsAre(0, 2, 1, 3));
    EXPECT_THAT(p->node_stage, ElementsAre(0, 0, 1, 2, 2, 3, 3, 2, 2));
    EXPECT_EQ(p->ipus_per_replica, 4);
    EXPECT_THAT(p->notes, Contains("execution phases (2): phase 0: IPU 0, 2; phase 1: IPU 1, 3"));
    EXPECT_THAT(p->notes, Contains(HasSubstr("3 of 9 nodes carry __execution_phase")));
    EXPECT_TRUE(CheckPlacementMatchesGraph(*p, Gpt()).ok());
  }
}

TEST(PlacementTest, PhasesThatDescendAreRejected) {
  NodeAnnotations a = TwoPhases();
  a["n5"].phase = 0;
  auto p = PlaceByAnnotations(Gpt(), a, ExecutionStrategy::kSerialPhased);
  EXPECT_EQ(p.status().code(), kInvalid);
  EXPECT_THAT(p.status().message(),
              AllOf(HasSubstr("execution phases must ascend"),
                    HasSubstr("node 'n5' (module h.1.attn) on phase 0 (IPU 3)"),
                    HasSubstr("on later phase 1 (IPU 1)")));
}

TEST(PlacementTest, ParallelPhasesRunEvenPhasesOnEvenIpus) {
  NodeAnnotations a = TwoPhases();
  a["n5"].ipu = 2;  // phase 1 on an even IPU
  EXPECT_TRUE(PlaceByAnnotations(Gpt(), a, ExecutionStrategy::kSerialPhased).ok());
  auto p = PlaceByAnnotations(Gpt(), a, ExecutionStrategy::kParallelPhased);
  EXPECT_EQ(p.status().code(), kInvalid);
  EXPECT_THAT(p.status().message(),
              AllOf(HasSubstr("even phases must run on even IPUs and odd phases on odd IPUs"),
                    HasSubstr("node 'n5' (module h.1.attn) is in phase 1 on IPU 2"),
                    HasSubstr("on odd IPUs")));
}

TEST(PlacementTest, PhasedPlacementNeedsPhases) {
  NodeAnnotations a;
  a["n3"].ipu = 1;
  auto p = PlaceByAnnotations(Gpt(), a, ExecutionStrategy::kParallelPhased);
  EXPECT_EQ(p.status().code(), kInvalid);
  EXPECT_THAT(p.status().message(),
              HasSubstr("parallel_phased execution runs the model's execution phases, but no "
                        "node carries __execution_phase"));
  // The other strategies ignore phases.
  a["n3"].phase = 1;
  auto pipelined = PlaceByAnnotations(Gpt(), a);
  ASSERT_TRUE(pipelined.ok()) << pipelined.status().message();
  EXPECT_FALSE(pipelined->phased());
}

TEST(PlacementTest, CheckPhasedPlacementMatchesGraph) {
  auto p = PlaceByAnnotations(Gpt(), TwoPhases(), ExecutionStrategy::kSerialPhased);
  ASSERT_TRUE(p.ok());
  Placement short_phases = *p;
  short_phases.stage_phase.pop_back();
  EXPECT_THAT(CheckPlacementMatchesGraph(short_phases, Gpt()).message(),
              HasSubstr("gives 3 stage phases for 4 stages"));
  Placement negative = *p;
  negative.stage_phase[0] = -1;
  EXPECT_EQ(CheckPlacementMatchesGraph(negative, Gpt()).code(), kInvalid);
  Placement descending = *p;
  descending.stage_phase = {1, 1, 0, 0};
  EXPECT_THAT(CheckPlacementMatchesGraph(descending, Gpt()).message(),
              HasSubstr("execution phases must ascend"));
}

TEST(PlacementTest, ParseModuleMapJson) {
  auto map = ParseModuleMapJson(R"({"": 0, "layers.2": 1, "head": 3})");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->size(), 3u);
  EXPECT_EQ(map->at("head"), 3);
  for (const char* bad : {"[1]", "{", R"({"a": -1})", R"({"a": "1"})", R"({"a": 1.5})"}) {
    EXPECT_EQ(ParseModuleMapJson(bad).status().code(), kInvalid) << bad;
  }
  EXPECT_THAT(ParseModuleMapJson(R"({"a": "1"})").status().message(),
              HasSubstr("module map entry 'a'"));
}

TEST(PlacementTest, MethodNames) {
  for (PlacementMethod m : {PlacementMethod::kLayersPerIpu, PlacementMethod::kModuleMap,
                            PlacementMethod::kOnnxAttributes}) {
    EXPECT_EQ(*ParsePlacementMethod(PlacementMethodName(m)), m);
  }
  EXPECT_EQ(ParsePlacementMethod("auto").status().code(), kInvalid);
}

TEST(PlacementTest, CheckPlacementMatchesGraph) {
  const graph::Graph g = Gpt();
  auto p = PlaceByLayers(g, {1, 1}, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(CheckPlacementMatchesGraph(*p, g).ok());
  Placement renamed = *p;
  renamed.node_names[3] = "other";
  EXPECT_THAT(CheckPlacementMatchesGraph(renamed, g).message(),
              HasSubstr("does not match model node 'n3'"));
  Placement shorter = *p;
  shorter.node_names.pop_back();
  shorter.node_stage.pop_back();
  EXPECT_EQ(CheckPlacementMatchesGraph(shorter, g).code(), kInvalid);
  Placement wrong_ipu = *p;
  wrong_ipu.stage_ipu[1] = 5;
  EXPECT_EQ(CheckPlacementMatchesGraph(wrong_ipu, g).code(), kInvalid);
  Placement descending = *p;
  descending.node_stage[2] = 1;
  EXPECT_THAT(CheckPlacementMatchesGraph(descending, g).message(), HasSubstr("must ascend"));
}

}  // namespace
}  // namespace ipupod::compiler
