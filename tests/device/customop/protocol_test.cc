// The custom op protocol's codec (device/customop/protocol.h): what one end writes the other
// reads back, and every malformed message is INTERNAL naming what is wrong.
#include "device/customop/protocol.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device/customop/custom_op_abi.h"

namespace ipupod::customop {
namespace {

using ::testing::HasSubstr;

LibraryInfo Table() {
  LibraryInfo info;
  info.abi_version = IPUPOD_CUSTOM_OP_ABI_VERSION;
  info.name = "acme";
  OpInfo cube;
  cube.domain = "com.acme";
  cube.name = "Cube";
  cube.num_inputs = 2;
  cube.num_outputs = 2;
  cube.input_types = {1, 0};
  cube.any_attribute = false;
  cube.attributes = {"alpha"};
  cube.has_gradient = true;
  info.ops = {cube};
  return info;
}

WireAttribute Strings() {
  WireAttribute a;
  a.name = "strs";
  a.type = IPUPOD_ATTRIBUTE_STRINGS;
  a.strings = {"abc", std::string("\0x", 2), ""};
  return a;
}

TEST(ProtocolTest, HelloCarriesTheTableOrTheLoadError) {
  std::string error;
  absl::StatusOr<LibraryInfo> info = DecodeHello(EncodeHelloOk(Table()), &error);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(*info, Table());
  info = DecodeHello(EncodeHelloError("dlopen failed: nope"), &error);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(error, "dlopen failed: nope");
}

TEST(ProtocolTest, RequestsRoundTrip) {
  const float x[] = {1, 2, 3};
  ComputeRequest compute;
  compute.op = 7;
  compute.attributes = {Strings()};
  compute.inputs = {WireTensor{{IPUPOD_DTYPE_FLOAT32, {3}},
                               absl::string_view(reinterpret_cast<const char*>(x), sizeof(x))}};
  compute.outputs = {{IPUPOD_DTYPE_INT64, {1, 2}}};
  const std::string bytes = EncodeCompute(compute);
  EXPECT_EQ(*PeekRequestKind(bytes), RequestKind::kCompute);
  absl::StatusOr<ComputeRequest> back = DecodeCompute(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->op, 7u);
  EXPECT_EQ(back->attributes[0].strings, Strings().strings);
  EXPECT_EQ(back->inputs[0].type, compute.inputs[0].type);
  EXPECT_EQ(back->inputs[0].bytes, compute.inputs[0].bytes);
  EXPECT_EQ(back->outputs, compute.outputs);

  GradientRequest gradient;
  gradient.op = 1;
  gradient.inputs = compute.inputs;
  gradient.outputs = compute.inputs;
  gradient.output_grads = compute.inputs;
  gradient.wants = {true};
  const std::string gradient_bytes = EncodeGradient(gradient);  // the decoded views point in
  absl::StatusOr<GradientRequest> g = DecodeGradient(gradient_bytes);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->wants, std::vector<bool>{true});
  EXPECT_EQ(g->output_grads[0].bytes, compute.inputs[0].bytes);
}

TEST(ProtocolTest, RepliesCarryValuesOrAFailure) {
  std::optional<Failure> failure;
  absl::StatusOr<std::vector<WireType>> types =
      DecodeTypesReply(EncodeTypesReply({{IPUPOD_DTYPE_BOOL, {}}}), failure);
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_FALSE(failure.has_value());
  EXPECT_EQ((*types)[0].dtype, IPUPOD_DTYPE_BOOL);
  types = DecodeTypesReply(EncodeFailure(ReplyStatus::kMisbehaved, "wrote past"), failure);
  ASSERT_TRUE(types.ok());
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->status, ReplyStatus::kMisbehaved);
  EXPECT_EQ(failure->message, "wrote past");
}

TEST(ProtocolTest, TruncatedOrOverlongMessagesAreMalformed) {
  const std::string hello = EncodeHelloOk(Table());
  std::string error;
  for (size_t n : {size_t{0}, size_t{1}, hello.size() / 2, hello.size() - 1}) {
    absl::Status status = DecodeHello(hello.substr(0, n), &error).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << n;
    EXPECT_THAT(status.message(), HasSubstr("malformed")) << n;
  }
  absl::Status extra = DecodeHello(hello + "x", &error).status();
  EXPECT_THAT(extra.message(), HasSubstr("1 bytes left over"));
}

TEST(ProtocolTest, CountsAndRanksPastTheMessageAreMalformed) {
  std::optional<Failure> failure;
  // A status byte, then a count of 2^32 - 1 types in a 5-byte message.
  std::string huge_count("\0\xff\xff\xff\xff", 5);
  absl::Status status = DecodeTypesReply(huge_count, failure).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("past what the message holds"));
  std::string reply = EncodeTypesReply({{IPUPOD_DTYPE_FLOAT32, {1}}});
  reply[9] = 9;  // the rank of the first type: status 1, count 4, dtype 4
  status = DecodeTypesReply(reply, failure).status();
  EXPECT_THAT(status.message(), HasSubstr("rank 9"));
}

TEST(ProtocolTest, ATensorMustHoldExactlyItsTypesBytes) {
  const float x[] = {1, 2};
  std::optional<Failure> failure;
  const std::string reply = EncodeTensorsReply(
      {WireTensor{{IPUPOD_DTYPE_FLOAT32, {3}},
                  absl::string_view(reinterpret_cast<const char*>(x), sizeof(x))}});
  absl::Status status = DecodeTensorsReply(reply, failure).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("a tensor of 8 bytes for its type"));
}

TEST(ProtocolTest, AnUnknownReplyStatusOrRequestKindIsMalformed) {
  std::optional<Failure> failure;
  EXPECT_EQ(DecodeTypesReply(std::string("\x09", 1), failure).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(PeekRequestKind(std::string("\x04", 1)).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(PeekRequestKind("").status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(DecodeInfer(EncodeCompute(ComputeRequest{})).status().code(),
            absl::StatusCode::kInternal);
}

TEST(ProtocolTest, TypeBytesRefusesWhatCannotBeHeld) {
  EXPECT_EQ(TypeBytes({IPUPOD_DTYPE_INT64, {2, 3}}), 48);
  EXPECT_EQ(TypeBytes({IPUPOD_DTYPE_FLOAT32, {}}), 4);
  EXPECT_EQ(TypeBytes({IPUPOD_DTYPE_FLOAT32, {-1}}), -1);
  EXPECT_EQ(TypeBytes({10, {1}}), -1);  // float16 never crosses
  EXPECT_EQ(TypeBytes({IPUPOD_DTYPE_FLOAT32, {int64_t{1} << 40, int64_t{1} << 40}}), -1);
}

}  // namespace
}  // namespace ipupod::customop
