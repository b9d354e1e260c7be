#include "server/proto_convert.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace ipupod::server {
namespace {

TEST(ProtoConvertTest, PartitionListsItsIpus) {
  scheduler::PartitionView view;
  view.name = "p";
  view.block = {8, 4};
  view.device_id = 26;
  view.owner = "alice";
  view.sessions = {"s1-2"};
  v1::Partition out;
  ToProto(view, &out);
  EXPECT_EQ(out.size(), 4u);
  ASSERT_EQ(out.ipus_size(), 4);
  EXPECT_EQ(out.ipus(0), 8u);
  EXPECT_EQ(out.ipus(3), 11u);
  EXPECT_EQ(out.device_id(), 26u);
  EXPECT_EQ(out.sessions(0), "s1-2");
}

TEST(ProtoConvertTest, IpuSpecInTeraflopsAndGigabytes) {
  v1::IpuSpec out;
  ToProto(device::kGc200, &out);
  EXPECT_EQ(out.name(), "GC200");
  EXPECT_EQ(out.tiles(), 1472u);
  EXPECT_DOUBLE_EQ(out.fp16_tflops(), 250.0);
  EXPECT_DOUBLE_EQ(out.fp32_tflops(), 62.5);
  EXPECT_DOUBLE_EQ(out.ipu_link_bandwidth_gbps(), 32.0);
  EXPECT_DOUBLE_EQ(out.host_link_bandwidth_gbps(), 64.0);
}

TEST(ProtoConvertTest, StatesAndActions) {
  EXPECT_EQ(ToProto(device::IpuState::kIdle), v1::IPU_STATE_IDLE);
  EXPECT_EQ(ToProto(device::IpuState::kFailed), v1::IPU_STATE_FAILED);
  EXPECT_EQ(ToProto(RecoveryAction::kLinkReset), v1::RECOVERY_ACTION_LINK_RESET);
  EXPECT_EQ(*FromProto(v1::FAULT_KIND_FULL_RESET), scheduler::FaultKind::kFullReset);
  EXPECT_EQ(FromProto(v1::FAULT_KIND_UNSPECIFIED).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FromProto(static_cast<v1::FaultKind>(99)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProtoConvertTest, AttachRequestIsCheckedAndCopied) {
  v1::AttachRequest request;
  request.set_num_ipus(3);
  request.set_partition("p");
  request.set_wait(true);
  request.set_wait_timeout_seconds(1.5);
  request.set_auto_round(true);
  request.set_client("host:1234 ipupod attach");
  auto out = FromProto(request);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->num_ipus, 3);
  EXPECT_EQ(out->partition, "p");
  EXPECT_TRUE(out->wait);
  EXPECT_EQ(out->wait_timeout, absl::Milliseconds(1500));
  EXPECT_TRUE(out->auto_round);
  EXPECT_EQ(out->client, "host:1234 ipupod attach");

  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e12}) {
    request.set_wait_timeout_seconds(bad);
    EXPECT_EQ(FromProto(request).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  request.set_wait_timeout_seconds(0);
  request.set_client(std::string(kClientLabelMax + 1, 'c'));
  EXPECT_EQ(FromProto(request).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::server
