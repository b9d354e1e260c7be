#include "device/compiler/executable.h"

#include <cmath>
#include <cstdio>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace ipupod::compiler {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

Executable Sample() {
  Executable e;
  e.producer = "ipupod test";
  e.strategy = ExecutionStrategy::kPipelined;
  e.output_mode = {OutputMode::Kind::kEveryN, 2};
  e.micro_batch_size = 2;
  e.replication_factor = 2;
  e.device_iterations = 4;
  e.batch_size_factor = 8;
  e.ipus = {2, 2, 4, 4};
  e.config.layers_per_ipu = {1, 1};
  e.config.inference_device_iterations = 4;
  e.config.inference_replication_factor = 2;
  e.config.seed = 9;
  e.placement.method = PlacementMethod::kLayersPerIpu;
  e.placement.node_names = {"/h.0/MatMul", "/h.1/MatMul"};
  e.placement.node_stage = {0, 1};
  e.placement.stage_ipu = {0, 1};
  e.placement.ipus_per_replica = 2;
  e.placement.notes = {"IPU 0: layer 0"};
  e.inputs = {{"ids", tensor::DType::kInt64, {2, 8}}};
  e.outputs = {{"logits", tensor::DType::kFloat32, {2, 8, 50}},
               {"loss", tensor::DType::kFloat32, {}}};
  e.report_json = R"({"step_s":0.5})";
  e.warnings = {"ignored 'profile_dir'"};
  e.model_bytes = std::string("\x08\x08\x00\xff model bytes", 16);
  return e;
}

std::string Bytes(const Executable& e) {
  auto bytes = WriteExecutable(e);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return *bytes;
}

void PutLe(std::string& s, size_t offset, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) s[offset + i] = static_cast<char>(v >> (8 * i));
}

// A well-formed container (right length and hash) around any payload.
std::string Wrap(const std::string& payload) {
  std::string out = Bytes(Sample()).substr(0, kExecutableHeaderBytes);
  PutLe(out, 16, payload.size(), 8);
  const Sha256Digest d = Sha256Of(payload);
  out.replace(24, 32, std::string(reinterpret_cast<const char*>(d.data()), 32));
  return out + payload;
}

std::string Section(const std::string& s) {
  std::string out(8, '\0');
  PutLe(out, 0, s.size(), 8);
  return out + s;
}

TEST(ExecutableTest, RoundTripsEveryField) {
  const Executable e = Sample();
  const std::string bytes = Bytes(e);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89IPX\r\n\x1a\n", 8));
  auto back = ReadExecutable(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->content_hash,
            DigestHex(Sha256Of(absl::string_view(bytes).substr(kExecutableHeaderBytes))));
  Executable expected = e;
  expected.content_hash = back->content_hash;
  EXPECT_EQ(*back, expected);
  EXPECT_EQ(Bytes(*back), bytes);  // deterministic
}

TEST(ExecutableTest, PhasedPlacementRoundTripsItsPhases) {
  Executable e = Sample();
  e.strategy = ExecutionStrategy::kParallelPhased;
  e.config.execution_strategy = "parallel_phased";
  e.placement.stage_phase = {0, 1};
  auto back = ReadExecutable(Bytes(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->strategy, ExecutionStrategy::kParallelPhased);
  EXPECT_THAT(back->placement.stage_phase, ::testing::ElementsAre(0, 1));
  EXPECT_FALSE(ReadExecutable(Bytes(Sample()))->placement.phased());
  Executable short_phases = e;
  short_phases.placement.stage_phase = {0};
  EXPECT_THAT(ReadExecutable(Bytes(short_phases)).status().message(),
              HasSubstr("placement is inconsistent (stage, IPU or phase out of range)"));
  Executable negative = e;
  negative.placement.stage_phase = {0, -1};
  EXPECT_EQ(ReadExecutable(Bytes(negative)).status().code(), kInvalid);
}

TEST(ExecutableTest, TrainingSectionRoundTripsWithInfiniteAttributes) {
  Executable e = Sample();
  e.mode = ExecutableMode::kTraining;
  e.training.loss = "loss";
  e.training.weights = {"fc1.w", "fc2.w"};
  e.training.gradient_accumulation_steps = 3;
  e.batch_size_factor = 4 * 2 * 3;
  e.training.optimizer = "lamb";
  e.training.variables = {{"lr", 1e-3}};
  e.training.constants = {{"beta1", 0.9}, {"max_weight_norm", HUGE_VAL}, {"low", -HUGE_VAL}};
  e.training.buffers = {{"bn.running_mean", "rm_next"}};
  EXPECT_THAT(TrainingSpecJson(e.training),
              AllOf(HasSubstr(R"("max_weight_norm":"inf")"), HasSubstr(R"("low":"-inf")"),
                    HasSubstr(R"("variables":{"lr":0.001})")));
  auto back = ReadExecutable(Bytes(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training, e.training);
}

TEST(ExecutableTest, ParamGroupsRoundTripAndAreAbsentWithoutGroups) {
  Executable e = Sample();
  e.mode = ExecutableMode::kTraining;
  e.training.loss = "loss";
  e.training.weights = {"fc.bias", "fc.weight", "ln.weight"};
  e.batch_size_factor = 4 * 2;
  e.training.optimizer = "adamw";
  e.training.variables = {{"lr", 1e-3}, {"weight_decay", 0.01}};
  EXPECT_THAT(TrainingSpecJson(e.training), Not(HasSubstr("param_groups")));
  const std::string without = Bytes(e);
  e.training.param_groups = {{{"fc.bias", "ln.weight"}, {{"weight_decay", 0}, {"lr", 1e-3}}},
                             {{}, {{"max_weight_norm", HUGE_VAL}}}};
  EXPECT_THAT(TrainingSpecJson(e.training),
              HasSubstr(R"("param_groups":[{"variables":{"lr":0.001,"weight_decay":0.0},)"
                        R"("weights":["fc.bias","ln.weight"]},{"variables":{"max_weight_norm":)"
                        R"("inf"},"weights":[]}])"));
  auto back = ReadExecutable(Bytes(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->training, e.training);
  // A file without the key (and so every file of earlier versions) reads with no groups.
  auto old = ReadExecutable(without);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->training.param_groups.empty());
}

TEST(ExecutableTest, ParamGroupsMustNameTrainableWeights) {
  Executable e = Sample();
  e.mode = ExecutableMode::kTraining;
  e.training.loss = "loss";
  e.training.weights = {"fc.weight"};
  e.batch_size_factor = 4 * 2;
  e.training.param_groups = {{{"fc.bias"}, {{"lr", 1}}}};
  const absl::Status s = ReadExecutable(Bytes(e)).status();
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_THAT(s.message(), HasSubstr("param group weight 'fc.bias' is not a trainable weight"));
  e.training.param_groups = {{{"fc.weight"}, {{"lr", 1.0}}}};
  EXPECT_TRUE(ReadExecutable(Bytes(e)).ok());
}

TEST(ExecutableTest, RejectsGarbageAndWrongMagic) {
  for (const std::string& bytes :
       {std::string(), std::string("hello, world: certainly not an executable file"),
        std::string("\x89IPX", 4), std::string(100, '\0')}) {
    auto e = ReadExecutable(bytes);
    EXPECT_EQ(e.status().code(), kInvalid);
    EXPECT_THAT(e.status().message(), HasSubstr("not an ipupod executable"));
  }
  std::string bytes = Bytes(Sample());
  bytes[4] = '\n';  // a copy that turned CR LF into LF
  EXPECT_THAT(ReadExecutable(bytes).status().message(), HasSubstr("not an ipupod executable"));
}

TEST(ExecutableTest, OtherFormatVersionSaysRecompile) {
  std::string bytes = Bytes(Sample());
  PutLe(bytes, 8, 3, 4);
  bytes.resize(20);  // a future layout: nothing else is read
  auto e = ReadExecutable(bytes);
  EXPECT_EQ(e.status().code(), kInvalid);
  EXPECT_THAT(
      e.status().message(),
      HasSubstr("executable format 3 but this ipupod reads 1: recompile with this version"));
}

TEST(ExecutableTest, RejectsTruncationAtEveryLength) {
  const std::string bytes = Bytes(Sample());
  for (size_t n = 8; n < bytes.size(); ++n) {
    auto e = ReadExecutable(bytes.substr(0, n));
    ASSERT_FALSE(e.ok()) << n;
    EXPECT_EQ(e.status().code(), kInvalid);
    EXPECT_THAT(e.status().message(), HasSubstr("truncated")) << n;
  }
  EXPECT_THAT(ReadExecutable(bytes.substr(0, bytes.size() - 1)).status().message(),
              HasSubstr(absl::StrCat("the header says ", bytes.size() - 64,
                                     " payload bytes but the file has ", bytes.size() - 65)));
}

TEST(ExecutableTest, RejectsTrailingBytes) {
  auto e = ReadExecutable(Bytes(Sample()) + "x");
  EXPECT_EQ(e.status().code(), kInvalid);
  EXPECT_THAT(e.status().message(), HasSubstr("corrupted: the header says"));
}

TEST(ExecutableTest, HashCatchesAnyFlippedPayloadByte) {
  const std::string bytes = Bytes(Sample());
  for (size_t i = kExecutableHeaderBytes; i < bytes.size(); i += 7) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    auto e = ReadExecutable(bad);
    EXPECT_EQ(e.status().code(), kInvalid);
    EXPECT_THAT(e.status().message(), HasSubstr("content hash does not match")) << i;
  }
  std::string bad_hash = bytes;
  bad_hash[30] ^= 0x40;
  EXPECT_THAT(ReadExecutable(bad_hash).status().message(), HasSubstr("content hash"));
}

TEST(ExecutableTest, DeclaredHashIsCheckedAgainstHeaderAndPayload) {
  const std::string bytes = Bytes(Sample());
  auto executable = ReadExecutable(bytes);
  ASSERT_TRUE(executable.ok()) << executable.status();
  const std::string hash = executable->content_hash;
  EXPECT_TRUE(CheckDeclaredHash(bytes, hash).ok());
  const std::string other(64, 'a');
  absl::Status wrong = CheckDeclaredHash(bytes, other);
  EXPECT_EQ(wrong.code(), kInvalid);
  EXPECT_THAT(wrong.message(), HasSubstr("declare the header's hash"));
  std::string flipped = bytes;
  flipped.back() ^= 0x01;
  EXPECT_EQ(CheckDeclaredHash(flipped, hash).code(), absl::StatusCode::kDataLoss);
  // Not an .ipx, or one cut inside its header: left to ReadExecutable, never read past the end.
  EXPECT_TRUE(CheckDeclaredHash("not an executable", hash).ok());
  for (size_t n = 0; n < kExecutableHeaderBytes; ++n) {
    EXPECT_TRUE(CheckDeclaredHash(absl::string_view(bytes).substr(0, n), hash).ok()) << n;
  }
}

TEST(ExecutableTest, RejectsInconsistentHeader) {
  std::string header_size = Bytes(Sample());
  PutLe(header_size, 12, 48, 4);
  EXPECT_THAT(ReadExecutable(header_size).status().message(), HasSubstr("header is inconsistent"));
  std::string reserved = Bytes(Sample());
  reserved[60] = 1;
  EXPECT_THAT(ReadExecutable(reserved).status().message(), HasSubstr("header is inconsistent"));
}

TEST(ExecutableTest, RejectsBadPayloadSectionsEvenWithAGoodHash) {
  auto status = [](const std::string& payload) { return ReadExecutable(Wrap(payload)).status(); };
  EXPECT_THAT(status("").message(), HasSubstr("the metadata is missing"));
  EXPECT_THAT(status(std::string(8, '\xff')).message(),
              HasSubstr("metadata length is out of range"));
  EXPECT_THAT(status(Section("{}")).message(), HasSubstr("the model is missing"));
  EXPECT_THAT(status(Section("{}") + Section("m") + "z").message(),
              HasSubstr("bytes follow the model"));
  const absl::Status bad_json = status(Section("{not json") + Section("m"));
  EXPECT_EQ(bad_json.code(), kInvalid);
  EXPECT_THAT(bad_json.message(),
              AllOf(HasSubstr("executable metadata is malformed"), HasSubstr("recompile")));
  EXPECT_THAT(status(Section("{}") + Section("m")).message(), HasSubstr("'producer' not found"));
}

TEST(ExecutableTest, RejectsInconsistentMetadata) {
  Executable stage_out_of_range = Sample();
  stage_out_of_range.placement.node_stage = {0, 2};
  EXPECT_THAT(ReadExecutable(Bytes(stage_out_of_range)).status().message(),
              HasSubstr("placement is inconsistent"));
  Executable ipus = Sample();
  ipus.ipus.ipus_per_replica = 4;
  EXPECT_THAT(ReadExecutable(Bytes(ipus)).status().message(),
              HasSubstr("disagree on IPUs per replica"));
  Executable batch = Sample();
  batch.device_iterations = 0;
  EXPECT_EQ(ReadExecutable(Bytes(batch)).status().code(), kInvalid);
  Executable config = Sample();
  config.config.replication_factor = 0;
  EXPECT_THAT(ReadExecutable(Bytes(config)).status().message(), HasSubstr("replication_factor"));
}

TEST(ExecutableTest, NonUtf8NamesCannotBeWritten) {
  Executable e = Sample();
  e.inputs[0].name = "\xff\xfe";
  EXPECT_EQ(WriteExecutable(e).status().code(), kInvalid);
}

TEST(ExecutableTest, FilesRoundTripAndReportPaths) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/executable_test.ipx");
  ASSERT_TRUE(WriteExecutableFile(path, Sample()).ok());
  auto back = ReadExecutableFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->placement, Sample().placement);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  std::fputc('x', f);
  std::fclose(f);
  auto corrupted = ReadExecutableFile(path);
  EXPECT_EQ(corrupted.status().code(), kInvalid);
  EXPECT_THAT(corrupted.status().message(), HasSubstr(path));
  std::remove(path.c_str());
  EXPECT_EQ(ReadExecutableFile(path).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(WriteExecutableFile("/nonexistent-dir/x.ipx", Sample()).code(),
            absl::StatusCode::kInternal);
}

TEST(ExecutableTest, HostShapesFollowBatchFactorAndOutputMode) {
  Executable e = Sample();  // micro-batch 2, 4 iterations, 2 replicas, every_n:2
  EXPECT_EQ(HostInputShape(e, e.inputs[0]), (tensor::Shape{16, 8}));
  EXPECT_EQ(HostOutputShape(e, e.outputs[0]), (tensor::Shape{8, 8, 50}));
  EXPECT_EQ(HostOutputShape(e, e.outputs[1]), (tensor::Shape{4}));
  e.output_mode = {OutputMode::Kind::kAll, 1};
  EXPECT_EQ(HostOutputShape(e, e.outputs[0]), (tensor::Shape{16, 8, 50}));
  e.output_mode = {OutputMode::Kind::kFinal, 1};
  EXPECT_EQ(HostOutputShape(e, e.outputs[0]), (tensor::Shape{4, 8, 50}));
  e.replication_factor = 1;
  e.output_mode = {OutputMode::Kind::kSum, 1};
  EXPECT_EQ(HostOutputShape(e, e.outputs[1]), tensor::Shape{});
}

TEST(ExecutableTest, ModeNames) {
  EXPECT_EQ(ExecutableModeName(ExecutableMode::kInference), "inference");
  EXPECT_EQ(ExecutableModeName(ExecutableMode::kTraining), "training");
}

}  // namespace
}  // namespace ipupod::compiler
