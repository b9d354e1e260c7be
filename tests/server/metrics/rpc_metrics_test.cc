#include "server/metrics/rpc_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/exposition.h"
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace ipupod::metrics {
namespace {

using test_support::SampleValue;

std::string Text(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

TEST(RpcMetricsTest, KnownMethodsAreNamedOthersAreOther) {
  prometheus::Registry registry;
  RpcMetrics rpcs(registry, {"/ipupod.v1.PodService/GetPodInfo", "/grpc.health.v1.Health/Check"});
  RpcMetrics::Method* info = rpcs.Find("/ipupod.v1.PodService/GetPodInfo");
  rpcs.Record(info, 0, absl::Milliseconds(3));
  rpcs.Record(info, 0, absl::Milliseconds(4));
  rpcs.Record(info, 16, absl::Milliseconds(1));
  for (int i = 0; i < 100; ++i) {  // paths a client made up: one series, however many
    rpcs.Record(rpcs.Find("/evil.Service/M" + std::to_string(i)), 12, absl::ZeroDuration());
  }
  rpcs.Record(info, 99, absl::Seconds(1));  // out of range: UNKNOWN
  const std::string text = Text(registry);
  EXPECT_EQ(
      SampleValue(
          text,
          R"(ipupod_rpcs_total{code="OK",method="GetPodInfo",service="ipupod.v1.PodService"})"),
      2);
  EXPECT_EQ(
      SampleValue(
          text,
          R"(ipupod_rpcs_total{code="UNAUTHENTICATED",method="GetPodInfo",service="ipupod.v1.PodService"})"),
      1);
  EXPECT_EQ(
      SampleValue(
          text,
          R"(ipupod_rpcs_total{code="UNKNOWN",method="GetPodInfo",service="ipupod.v1.PodService"})"),
      1);
  EXPECT_EQ(SampleValue(
                text, R"(ipupod_rpcs_total{code="UNIMPLEMENTED",method="other",service="other"})"),
            100);
  EXPECT_EQ(
      SampleValue(
          text,
          R"(ipupod_rpc_duration_seconds_count{method="GetPodInfo",service="ipupod.v1.PodService"})"),
      4);
  EXPECT_EQ(
      SampleValue(
          text,
          R"(ipupod_rpc_duration_seconds_bucket{method="GetPodInfo",service="ipupod.v1.PodService",le="0.005"})"),
      3);
  // A method never called has no series yet.
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("grpc.health.v1.Health")));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("evil")));
  EXPECT_EQ(RpcCodeName(3), "INVALID_ARGUMENT");
}

}  // namespace
}  // namespace ipupod::metrics
