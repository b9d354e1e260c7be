// `ipupod submit`'s local checks (client/cli/submit.h): what is refused
// before anything is uploaded, and the request built from good flags.
#include "client/cli/submit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::cli {
namespace {

using ::testing::HasSubstr;

SubmitArgs Inference() {
  SubmitArgs args;
  args.executable = "mlp.ipx";
  args.inputs = "x.npz";
  return args;
}

SubmitArgs Training() {
  SubmitArgs args = Inference();
  args.train = true;
  args.epochs = std::string("3");  // not = "3": gcc 12's false -Wstringop-overflow at -O3
  return args;
}

void ExpectRefused(const SubmitArgs& args, const std::string& why) {
  absl::StatusOr<v1::SubmitJobRequest> request = BuildSubmitRequest(args);
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << why;
  EXPECT_THAT(request.status().message(), HasSubstr(why));
}

TEST(SubmitArgsTest, InferenceRequestCarriesEveryFlag) {
  SubmitArgs args = Inference();
  args.weights = "w.safetensors";
  args.outputs = "logits, probs";
  args.ipus = "4";
  args.partition = "p1";
  args.auto_round = true;
  args.name = "eval";
  args.time_limit = "1h30m";
  args.after = "16.2";
  args.account = "vision";
  args.qos = "scavenger";
  absl::StatusOr<v1::SubmitJobRequest> request = BuildSubmitRequest(args);
  ASSERT_TRUE(request.ok()) << request.status();
  const v1::JobSpec& spec = request->spec();
  EXPECT_EQ(spec.inputs().format(), "npz");
  EXPECT_EQ(spec.weights().format(), "safetensors");
  EXPECT_TRUE(spec.inputs().sha256().empty()) << "filled in after the upload";
  EXPECT_EQ(std::vector<std::string>(spec.outputs().begin(), spec.outputs().end()),
            (std::vector<std::string>{"logits", "probs"}));
  EXPECT_FALSE(spec.train());
  EXPECT_EQ(spec.num_ipus(), 4u);
  EXPECT_EQ(spec.partition(), "p1");
  EXPECT_TRUE(spec.auto_round());
  EXPECT_EQ(spec.name(), "eval");
  EXPECT_EQ(spec.time_limit_seconds(), 5400u);
  EXPECT_EQ(spec.after(), "16.2");
  EXPECT_EQ(spec.account(), "vision");
  EXPECT_EQ(spec.qos(), "scavenger");
  EXPECT_TRUE(request->sweep().empty());
}

TEST(SubmitArgsTest, DefaultsLeaveTheChoiceToTheServer) {
  SubmitArgs args = Inference();
  args.executable = std::string("models/") + std::string(70, 'm') + ".ipx";
  absl::StatusOr<v1::SubmitJobRequest> request = BuildSubmitRequest(Inference());
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->spec().name(), "mlp.ipx") << "the server sees only the blob's hash";
  EXPECT_EQ(BuildSubmitRequest(args)->spec().name(), std::string(64, 'm')) << "made to fit";
  EXPECT_EQ(request->spec().num_ipus(), 0u) << "the executable's own count";
  EXPECT_EQ(request->spec().time_limit_seconds(), 0u) << "the server's default";
  EXPECT_TRUE(request->spec().weights().format().empty());
  EXPECT_TRUE(request->spec().outputs().empty());
}

TEST(SubmitArgsTest, TrainingRequestSetsLrAndTheSweep) {
  SubmitArgs args = Training();
  args.lr = "0.05";
  args.checkpoint_every = "10";
  absl::StatusOr<v1::SubmitJobRequest> request = BuildSubmitRequest(args);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(request->spec().train());
  EXPECT_EQ(request->spec().epochs(), 3);
  EXPECT_EQ(request->spec().steps(), 0);
  EXPECT_EQ(request->spec().checkpoint_every(), 10);
  EXPECT_DOUBLE_EQ(request->spec().optimizer().at("lr"), 0.05);

  args = Training();
  args.epochs.clear();
  args.steps = "800";
  args.sweep = " lr=0.1,0.01,0.001 ";
  request = BuildSubmitRequest(args);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->spec().steps(), 800);
  EXPECT_EQ(request->sweep(), "lr=0.1,0.01,0.001");
  EXPECT_TRUE(request->spec().optimizer().empty());
}

TEST(SubmitArgsTest, TrainNeedsExactlyOneLength) {
  SubmitArgs args = Training();
  args.epochs.clear();
  ExpectRefused(args, "--train needs how long to train: exactly one of --epochs");
  args.epochs = "3";
  args.steps = "100";
  ExpectRefused(args, "exactly one of --epochs E");
}

TEST(SubmitArgsTest, TrainingOnlyFlagsNeedTrain) {
  SubmitArgs args = Inference();
  args.epochs = "3";
  ExpectRefused(args, "--epochs is for training jobs: add --train");
  args = Inference();
  args.lr = "0.1";
  args.sweep = "lr=0.1,0.2";
  ExpectRefused(args, "--lr, --sweep are for training jobs: add --train");
  for (std::string SubmitArgs::*flag :
       {&SubmitArgs::steps, &SubmitArgs::checkpoint_every, &SubmitArgs::sweep}) {
    args = Inference();
    args.*flag = std::string("5");
    ExpectRefused(args, "for training jobs: add --train");
  }
}

TEST(SubmitArgsTest, BadNumbersNameTheirFlag) {
  const std::vector<std::pair<std::string SubmitArgs::*, std::string>> cases = {
      {&SubmitArgs::epochs, "--epochs"},
      {&SubmitArgs::checkpoint_every, "--checkpoint-every"},
      {&SubmitArgs::lr, "--lr"}};
  for (const auto& [flag, name] : cases) {
    for (const char* bad : {"-1", "abc", "1e3", " 5"}) {
      SubmitArgs args = Training();
      args.*flag = std::string(bad);
      if (name == "--lr" && std::string(bad) == "1e3") continue;  // a learning rate of 1000
      ExpectRefused(args, name + ": '" + bad + "'");
    }
  }
  SubmitArgs args = Training();
  args.epochs = "0";
  ExpectRefused(args, "--epochs: '0' is too small");
  args = Training();
  args.lr = "inf";
  ExpectRefused(args, "--lr: 'inf' is not a learning rate");
  args = Training();
  args.ipus = "-2";
  ExpectRefused(args, "--ipus: '-2' is negative");
}

TEST(SubmitArgsTest, SweepShapeIsCheckedAndLrCannotBeGivenTwice) {
  SubmitArgs args = Training();
  args.sweep = "lr=0.1;0.2";
  ExpectRefused(args, "--sweep: ");
  args.sweep = "lr=0.1,0.01";
  args.lr = "0.5";
  ExpectRefused(args, "--sweep sets lr for each job, and --lr sets it too: drop --lr");
  args.sweep = "momentum=0.9,0.99";
  EXPECT_TRUE(BuildSubmitRequest(args).ok()) << "another variable beside --lr is fine";
}

TEST(SubmitArgsTest, TimeLimitAfterNameAndOutputsAreChecked) {
  SubmitArgs args = Inference();
  args.time_limit = "0s";
  ExpectRefused(args, "--time-limit: '0s' is zero");
  args.time_limit = "31d";
  ExpectRefused(args, "--time-limit: '31d' is too long");
  args = Inference();
  args.after = "seventeen";
  ExpectRefused(args, "--after: 'seventeen' is not a job id");
  args = Inference();
  args.name = std::string(65, 'n');
  ExpectRefused(args, "--name: 65 characters is over the limit of 64");
  args.name = "two\nlines";
  ExpectRefused(args, "control characters");
  args = Inference();
  args.outputs = "a,,b";
  ExpectRefused(args, "--outputs: an empty name");
  args.outputs = "a,b,a";
  ExpectRefused(args, "--outputs: 'a' is given twice");
}

TEST(SubmitArgsTest, PartitionAndIpusTogetherAreFine) {
  SubmitArgs args = Inference();
  args.ipus = "2";
  args.partition = "p1";
  EXPECT_TRUE(BuildSubmitRequest(args).ok());
}

TEST(BlobFormatTest, FromTheExtensionPerRole) {
  EXPECT_EQ(*BlobFormatOf("a/x.npz", TensorFileRole::kInputs), "npz");
  EXPECT_EQ(*BlobFormatOf("x.safetensors", TensorFileRole::kInputs), "safetensors");
  EXPECT_EQ(BlobFormatOf("x.npy", TensorFileRole::kInputs).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*BlobFormatOf("w.npz", TensorFileRole::kWeights), "npz");
  EXPECT_EQ(*BlobFormatOf("w.safetensors", TensorFileRole::kWeights), "safetensors");
  EXPECT_EQ(*BlobFormatOf("model.onnx", TensorFileRole::kWeights), "onnx");
  EXPECT_THAT(BlobFormatOf("model.onnx", TensorFileRole::kInputs).status().message(),
              HasSubstr("--inputs: cannot tell the format of 'model.onnx'"));
  EXPECT_THAT(BlobFormatOf("w.npy", TensorFileRole::kWeights).status().message(),
              HasSubstr("--weights: cannot tell the format of 'w.npy' from its name; use .npz, "
                        ".safetensors or .onnx"));
  for (const char* bad : {"x.csv", "x", "npz", "x.npz.bak"}) {
    EXPECT_EQ(BlobFormatOf(bad, TensorFileRole::kInputs).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  SubmitArgs args = Inference();
  args.inputs = "data.csv";
  ExpectRefused(args, "--inputs: cannot tell the format of 'data.csv'");
}

}  // namespace
}  // namespace ipupod::cli
