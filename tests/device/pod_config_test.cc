#include "device/pod_config.h"

#include <gtest/gtest.h>

#include "gmock/gmock.h"

namespace ipupod::device {
namespace {

using ::testing::HasSubstr;

TEST(PodConfigTest, Presets) {
  for (const auto& [name, n] : {std::pair{"POD4", 4}, {"POD16", 16}, {"POD64", 64}}) {
    absl::StatusOr<PodConfig> pod = PodFromName(name);
    ASSERT_TRUE(pod.ok()) << pod.status();
    EXPECT_EQ(pod->name, name);
    EXPECT_EQ(pod->num_ipus, n);
    EXPECT_EQ(pod->ipu, &kGc200);
  }
}

TEST(PodConfigTest, NamesAreCaseInsensitiveAndNormalised) {
  absl::StatusOr<PodConfig> pod = PodFromName("pod16");
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ(pod->name, "POD16");
  pod = PodFromName("Pod256");
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ(pod->num_ipus, 256);
  pod = PodFromName("POD1");
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ(pod->num_ipus, 1);
}

TEST(PodConfigTest, DefaultIsPod16) {
  PodConfig pod;
  EXPECT_EQ(pod.name, "POD16");
  EXPECT_EQ(pod.num_ipus, 16);
}

TEST(PodConfigTest, BadNamesNameTheChoices) {
  for (const char* name : {"", "POD", "IPU16", "POD-4", "POD+4", "POD16x", "16"}) {
    absl::StatusOr<PodConfig> pod = PodFromName(name);
    ASSERT_EQ(pod.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(pod.status().message(), HasSubstr("POD4, POD16, POD64")) << name;
  }
  absl::StatusOr<PodConfig> pod = PodFromName("POD24");
  ASSERT_EQ(pod.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pod.status().message(), HasSubstr("use 16 or 32"));
  EXPECT_EQ(PodFromName("POD512").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PodFromName("POD0").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PodConfigTest, EveryPowerOfTwoSize) {
  for (int n = 1; n <= kMaxPodIpus; n *= 2) {
    absl::StatusOr<PodConfig> pod = PodFromSize(n);
    ASSERT_TRUE(pod.ok()) << pod.status();
    EXPECT_EQ(pod->num_ipus, n);
    EXPECT_EQ(pod->name, "POD" + std::to_string(n));
  }
}

TEST(PodConfigTest, BadSizesNameTheNearestValidSizes) {
  absl::StatusOr<PodConfig> pod = PodFromSize(24);
  ASSERT_EQ(pod.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pod.status().message(), "pod size 24 is not a power of two; use 16 or 32");
  EXPECT_THAT(PodFromSize(3).status().message(), HasSubstr("use 2 or 4"));
  pod = PodFromSize(0);
  ASSERT_EQ(pod.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pod.status().message(), HasSubstr("1 to 256"));
  pod = PodFromSize(-8);
  EXPECT_EQ(pod.status().code(), absl::StatusCode::kInvalidArgument);
  pod = PodFromSize(512);
  ASSERT_EQ(pod.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pod.status().message(), HasSubstr("use 256 or fewer"));
  EXPECT_EQ(PodFromSize(int64_t{1} << 40).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::device
