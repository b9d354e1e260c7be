#include "device/compiler/ipu_config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ipupod::compiler {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

std::string ReadTestData(const std::string& name) {
  const char* src = std::getenv("IPUPOD_SOURCE_DIR");
  const std::string dir = src != nullptr ? src : IPUPOD_TEST_SOURCE_DIR;
  std::ifstream file(absl::StrCat(dir, "/tests/device/compiler/testdata/", name));
  std::stringstream ss;
  ss << file.rdbuf();
  return ss.str();
}

TEST(IpuConfigTest, DefaultsFollowOptimumGraphcore) {
  const IpuConfig c;
  EXPECT_EQ(c.replication_factor, 1);
  EXPECT_EQ(c.inference_replication_factor, 1);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.device_iterations, 1);
  EXPECT_EQ(c.inference_device_iterations, 1);
  EXPECT_THAT(c.layers_per_ipu, ElementsAre(-1));
  EXPECT_FALSE(c.ipus_per_replica.has_value());
  EXPECT_EQ(c.output_mode, "final");
  EXPECT_FALSE(c.auto_round_num_ipus);
  EXPECT_TRUE(c.optimizer_state_offchip);
  EXPECT_FALSE(c.replicated_tensor_sharding);
  EXPECT_THAT(c.matmul_proportion.values, ElementsAre(0.6));
  EXPECT_FALSE(c.matmul_proportion.is_list);
  EXPECT_TRUE(c.enable_half_partials);
  EXPECT_EQ(c.embedding_serialization_factor, 1);
  EXPECT_FALSE(c.recompute_checkpoint_every_layer);
  EXPECT_FALSE(c.seed.has_value());
  EXPECT_FALSE(c.auto_loss_scaling);
  EXPECT_EQ(c.executable_cache_dir, "");
  EXPECT_TRUE(ValidateIpuConfig(c).ok());
  auto mode = ResolveMode(c, true);
  ASSERT_TRUE(mode.ok()) << mode.status();
  EXPECT_EQ(mode->ipus_per_replica, 1);
  EXPECT_EQ(mode->output_mode.kind, OutputMode::Kind::kAll);
}

TEST(IpuConfigTest, LoadsPublishedGpt2ConfigWithWarnings) {
  auto parsed = ParseIpuConfigJson(ReadTestData("gpt2_ipu_config.json"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const IpuConfig& c = parsed->config;
  EXPECT_THAT(c.layers_per_ipu, ElementsAre(0, 4, 4, 4));
  EXPECT_EQ(c.ipus_per_replica, 4);
  EXPECT_EQ(c.replication_factor, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 512);
  EXPECT_EQ(c.seed, 42);
  EXPECT_EQ(c.embedding_serialization_factor, 4);
  EXPECT_TRUE(c.matmul_proportion.is_list);
  EXPECT_EQ(c.executable_cache_dir, "./exe_cache");
  EXPECT_FALSE(c.sharded_execution_for_inference);
  EXPECT_EQ(parsed->warnings.size(), 4u) << "sharded_execution_for_inference is a key now";
  EXPECT_THAT(parsed->warnings,
              ::testing::Contains(AllOf(HasSubstr("'profile_dir'"), HasSubstr("does not model"))));
  EXPECT_EQ(BatchSizeFactor(c, false), 4 * 512 * 1);
  EXPECT_EQ(BatchSizeFactor(c, true), 1 * 4);
}

TEST(IpuConfigTest, LoadsPublishedBertConfigWithInferenceKeys) {
  auto parsed = ParseIpuConfigJson(ReadTestData("bert_ipu_config.json"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->warnings, ::testing::Contains(HasSubstr("unknown key 'squad_v2_extra'")));
  EXPECT_THAT(parsed->warnings, ::testing::Contains(HasSubstr("'parallelize_kwargs'")));
  auto inference = ResolveMode(parsed->config, true);
  ASSERT_TRUE(inference.ok()) << inference.status();
  EXPECT_THAT(inference->layers_per_ipu, ElementsAre(12));
  EXPECT_EQ(inference->ipus_per_replica, 1);
  EXPECT_EQ(inference->replication_factor, 2);
  EXPECT_EQ(inference->device_iterations, 4);
  EXPECT_THAT(inference->matmul_proportion.values, ElementsAre(0.2));
  auto training = ResolveMode(parsed->config, false);
  ASSERT_TRUE(training.ok());
  EXPECT_EQ(training->ipus_per_replica, 4);
  EXPECT_EQ(training->output_mode.kind, OutputMode::Kind::kFinal);
  EXPECT_EQ(BatchSizeFactor(parsed->config, true), 8);
}

TEST(IpuConfigTest, UnknownKeyWarningSuggestsCloseKeys) {
  auto parsed = ParseIpuConfigJson(R"({"replication_factr": 2, "layers": [1]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->warnings, UnorderedElementsAre(HasSubstr("did you mean 'replication_factor'"),
                                                     HasSubstr("did you mean 'layers_per_ipu'")));
  EXPECT_EQ(parsed->config.replication_factor, 1);
}

TEST(IpuConfigTest, NullMeansTheDefault) {
  auto parsed = ParseIpuConfigJson(
      R"({"embedding_serialization_factor": null, "seed": null, "ipus_per_replica": null,
          "replication_factor": 2})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->config.embedding_serialization_factor, 1);
  EXPECT_FALSE(parsed->config.seed.has_value());
  EXPECT_EQ(parsed->config.replication_factor, 2);
}

TEST(IpuConfigTest, WrongTypesNameKeyExpectedAndGot) {
  struct Case {
    std::string json, key, expected, got;
  };
  const Case cases[] = {
      {R"({"replication_factor": "4"})", "replication_factor", "an integer", "a string \"4\""},
      {R"({"replication_factor": 2.5})", "replication_factor", "an integer", "a number 2.5"},
      {R"({"enable_half_partials": 1})", "enable_half_partials", "true or false", "an integer 1"},
      {R"({"layers_per_ipu": [1, "2"]})", "layers_per_ipu", "a list of integers", "an array"},
      {R"({"matmul_proportion": "0.3"})", "matmul_proportion", "a number or a list", "a string"},
      {R"({"seed": true})", "seed", "an integer or null", "a boolean true"},
      {R"({"output_mode": 3})", "output_mode", "a string", "an integer 3"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseIpuConfigJson(c.json);
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), kInvalid);
    EXPECT_THAT(parsed.status().message(),
                AllOf(HasSubstr(absl::StrCat("'", c.key, "'")), HasSubstr(c.expected),
                      HasSubstr(absl::StrCat("got ", c.got))));
  }
}

TEST(IpuConfigTest, RejectsBadJsonAndNonObjects) {
  for (const char* text : {"", "{", "[1, 2]", "42", "{\"seed\": 1,}"}) {
    auto parsed = ParseIpuConfigJson(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), kInvalid);
  }
  EXPECT_THAT(ParseIpuConfigJson("[1]").status().message(), HasSubstr("JSON object"));
  EXPECT_THAT(ParseIpuConfigJson("{").status().message(), HasSubstr("not valid JSON"));
}

TEST(IpuConfigTest, RejectsOutOfRangeAndIncoherentValues) {
  struct Case {
    std::string json, needle;
  };
  const Case cases[] = {
      {R"({"replication_factor": 0})", "'replication_factor' is 0"},
      {R"({"device_iterations": -3})", "'device_iterations' is -3"},
      {R"({"layers_per_ipu": [2, -2]})", "'layers_per_ipu' is -2"},
      {R"({"layers_per_ipu": []})", "'layers_per_ipu' is empty"},
      {R"({"matmul_proportion": 1.5})", "between 0 and 1"},
      {R"({"output_mode": "everything"})", "output mode 'everything'"},
      {R"({"inference_output_mode": "every_n:0"})", "inference_output_mode"},
      {R"({"layers_per_ipu": [2, 2], "ipus_per_replica": 4})",
       "layers_per_ipu=[2, 2] should use the same number of IPUs as ipus_per_replica=4"},
      {R"({"layers_per_ipu": [2, 2], "matmul_proportion": [0.1, 0.2, 0.3]})",
       "matmul_proportion has 3 values but ipus_per_replica is 2"},
      {R"({"replication_factor": 512})", "between 1 and 256"},
      {R"({"execution_strategy": "phased"})",
       "'execution_strategy': execution strategy 'phased' is not one of pipelined, sharded, "
       "serial_phased, parallel_phased"},
      {R"({"tensors_liveness": "sometimes"})", "'tensors_liveness': tensors liveness 'sometimes'"},
      {R"({"execution_strategy": "parallel_phased", "tensors_liveness": "off_chip_after_each_phase"})",
       "tensors_liveness=off_chip_after_each_phase is only supported for serial phased execution"},
      {R"({"execution_strategy": "parallel_phased",
           "tensors_liveness": "off_chip_after_fwd_no_overlap"})",
       "with parallel_phased use always_live or off_chip_after_fwd"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseIpuConfigJson(c.json);
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), kInvalid);
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.needle)) << c.json;
  }
}

TEST(IpuConfigTest, JsonRoundTripsEveryKey) {
  IpuConfig c;
  ASSERT_TRUE(UpdateFromString(c,
                               "layers_per_ipu=[1 2 3 2],replication_factor=2,seed=7,"
                               "matmul_proportion=[0.1 0.2 0.3 0.4],inference_output_mode=sum,"
                               "executable_cache_dir=/tmp/x,auto_round_num_ipus=true,"
                               "execution_strategy=serial_phased,"
                               "tensors_liveness=off_chip_after_each_phase,"
                               "synthetic_data=true,broadcast_buffers=false")
                  .ok());
  const std::string json = IpuConfigToJson(c);
  auto parsed = ParseIpuConfigJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->config, c);
  EXPECT_THAT(parsed->warnings, IsEmpty());
  EXPECT_EQ(ParseIpuConfigJson(IpuConfigToJson(IpuConfig()))->config, IpuConfig());
  EXPECT_EQ(IpuConfigKeys().size(), 27u);
}

TEST(IpuConfigTest, UpdateFromStringParsesEveryType) {
  IpuConfig c;
  auto status = UpdateFromString(
      c,
      "replication_factor=4, inference_device_iterations=8,matmul_proportion=0.3,"
      "enable_half_partials=false,auto_round_num_ipus=yes,output_mode=sum,"
      "layers_per_ipu=[0 4 4 4],ipus_per_replica=4,executable_cache_dir=./cache,seed=42");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(c.replication_factor, 4);
  EXPECT_EQ(c.inference_device_iterations, 8);
  EXPECT_THAT(c.matmul_proportion.values, ElementsAre(0.3));
  EXPECT_FALSE(c.enable_half_partials);
  EXPECT_TRUE(c.auto_round_num_ipus);
  EXPECT_EQ(c.output_mode, "sum");
  EXPECT_THAT(c.layers_per_ipu, ElementsAre(0, 4, 4, 4));
  EXPECT_EQ(c.ipus_per_replica, 4);
  EXPECT_EQ(c.executable_cache_dir, "./cache");
  EXPECT_EQ(c.seed, 42);
}

TEST(IpuConfigTest, UpdateFromStringListsOptionalsAndEmptyItems) {
  IpuConfig c;
  ASSERT_TRUE(UpdateFromString(c, "layers_per_ipu=[1, 2],matmul_proportion=[0.08 0.2],").ok());
  EXPECT_THAT(c.layers_per_ipu, ElementsAre(1, 2));
  EXPECT_TRUE(c.matmul_proportion.is_list);
  EXPECT_THAT(c.matmul_proportion.values, ElementsAre(0.08, 0.2));
  EXPECT_EQ(ResolveMode(c, false)->ipus_per_replica, 2);
  ASSERT_TRUE(UpdateFromString(c, "seed=3").ok());
  ASSERT_TRUE(UpdateFromString(c, "seed=none,inference_output_mode=every_n:2").ok());
  EXPECT_FALSE(c.seed.has_value());
  EXPECT_EQ(c.inference_output_mode, "every_n:2");
  EXPECT_TRUE(UpdateFromString(c, "").ok());
}

TEST(IpuConfigTest, UpdateFromStringErrorsChangeNothing) {
  IpuConfig c;
  c.replication_factor = 2;
  const IpuConfig before = c;
  struct Case {
    std::string update, needle;
  };
  const Case cases[] = {
      {"replication_factr=4", "did you mean 'replication_factor'"},
      {"nonsense_key_entirely=1", "keys are: replication_factor"},
      {"profile_dir=x", "does not model"},
      {"replication_factor=four", "'replication_factor': expected an integer, got 'four'"},
      {"enable_half_partials=maybe", "expected true or false"},
      {"layers_per_ipu=1 2", "expected a list of integers"},
      {"layers_per_ipu=[1 x]", "expected a list of integers"},
      {"matmul_proportion=[0.1 y]", "a number or a list of numbers"},
      {"replication_factor", "is not key=value"},
      {"device_iterations=8,replication_factor=0", "'replication_factor' is 0"},
  };
  for (const Case& tc : cases) {
    auto status = UpdateFromString(c, tc.update);
    EXPECT_EQ(status.code(), kInvalid) << tc.update;
    EXPECT_THAT(status.message(), HasSubstr(tc.needle)) << tc.update;
    EXPECT_EQ(c, before) << tc.update;
  }
}

TEST(IpuConfigTest, InferenceFallbacksFollowOptimum) {
  IpuConfig c;
  ASSERT_TRUE(UpdateFromString(c, "layers_per_ipu=[2 2],matmul_proportion=[0.1 0.2]").ok());
  auto m = ResolveMode(c, true);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(m->layers_per_ipu, ElementsAre(2, 2));
  EXPECT_EQ(m->ipus_per_replica, 2);
  EXPECT_TRUE(m->matmul_proportion.is_list);
  // inference_layers_per_ipu of another length: its own IPU count, and the
  // per-IPU matmul list falls back to the default single value.
  ASSERT_TRUE(UpdateFromString(c, "inference_layers_per_ipu=[4]").ok());
  m = ResolveMode(c, true);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ipus_per_replica, 1);
  EXPECT_FALSE(m->matmul_proportion.is_list);
  EXPECT_THAT(m->matmul_proportion.values, ElementsAre(kDefaultMatmulProportion));
  // [-1] with an explicit ipus_per_replica keeps that count for inference.
  IpuConfig w;
  ASSERT_TRUE(UpdateFromString(w, "ipus_per_replica=4").ok());
  EXPECT_EQ(ResolveMode(w, true)->ipus_per_replica, 4);
  EXPECT_EQ(ResolveMode(w, false)->ipus_per_replica, 4);
}

TEST(IpuConfigTest, OutputModes) {
  EXPECT_EQ(ParseOutputMode("all", false)->kind, OutputMode::Kind::kAll);
  EXPECT_EQ(ParseOutputMode("final", true)->kind, OutputMode::Kind::kFinal);
  EXPECT_EQ(ParseOutputMode("sum", true)->kind, OutputMode::Kind::kSum);
  EXPECT_EQ(ParseOutputMode("default", true)->kind, OutputMode::Kind::kAll);
  EXPECT_EQ(ParseOutputMode("default", false)->kind, OutputMode::Kind::kFinal);
  auto every = ParseOutputMode("every_n:4", true);
  ASSERT_TRUE(every.ok());
  EXPECT_EQ(every->kind, OutputMode::Kind::kEveryN);
  EXPECT_EQ(every->every_n, 4);
  EXPECT_EQ(OutputModeName(*every), "every_n:4");
  for (const char* bad : {"every_n:0", "every_n:", "every_n:x", "All", ""}) {
    EXPECT_EQ(ParseOutputMode(bad, true).status().code(), kInvalid) << bad;
  }
  // optimum returns every result for inference unless told otherwise.
  IpuConfig c;
  c.output_mode = "final";
  EXPECT_EQ(ResolveMode(c, true)->output_mode.kind, OutputMode::Kind::kAll);
  c.inference_output_mode = "final";
  EXPECT_EQ(ResolveMode(c, true)->output_mode.kind, OutputMode::Kind::kFinal);
}

TEST(IpuConfigTest, BatchSizeFactorIgnoresAccumulationForInference) {
  IpuConfig c;
  c.replication_factor = 2;
  c.gradient_accumulation_steps = 16;
  c.device_iterations = 3;
  c.inference_replication_factor = 4;
  c.inference_device_iterations = 5;
  EXPECT_EQ(BatchSizeFactor(c, false), 96);
  EXPECT_EQ(BatchSizeFactor(c, true), 20);
}

}  // namespace
}  // namespace ipupod::compiler
