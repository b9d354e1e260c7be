#include "scheduler/sharing/policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::sharing {
namespace {

using ::testing::HasSubstr;

SharingPolicy Teams() {
  SharingPolicy p = DefaultPolicy();
  Account a;
  a.name = "vision";
  a.shares = 2;
  a.users = {"alice", "bob"};
  Account b;
  b.name = "speech";
  b.users = {"bob"};
  p.accounts = {a, b};
  p.default_account["bob"] = "speech";
  return p;
}

TEST(PolicyTest, TheDefaultPolicyIsValidAndHasThreeQos) {
  const SharingPolicy p = DefaultPolicy();
  EXPECT_TRUE(ValidateSharingPolicy(p).ok());
  ASSERT_NE(FindQos(p, "scavenger"), nullptr);
  EXPECT_TRUE(FindQos(p, "scavenger")->preemptible);
  EXPECT_TRUE(FindQos(p, "high")->admins_only);
  EXPECT_EQ(p.default_qos, "normal");
}

TEST(PolicyTest, EveryProblemIsNamed) {
  SharingPolicy p = Teams();
  p.accounts[1].shares = 0;
  p.accounts.push_back(p.accounts[0]);
  p.default_account["carol"] = "vision";
  p.default_qos = "gold";
  p.user_limits.max_ipus = -1;
  p.usage_half_life = absl::ZeroDuration();
  const absl::Status st = ValidateSharingPolicy(p);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("account speech: shares must be greater than 0"));
  EXPECT_THAT(st.message(), HasSubstr("account vision is defined twice"));
  EXPECT_THAT(st.message(), HasSubstr("carol is not a member of vision"));
  EXPECT_THAT(st.message(), HasSubstr("default QoS gold is not defined"));
  EXPECT_THAT(st.message(), HasSubstr("user limits: limits must not be negative"));
  EXPECT_THAT(st.message(), HasSubstr("usage_half_life"));
}

TEST(PolicyTest, WithoutAccountsEveryUserIsTheirOwnAccount) {
  const SharingPolicy p = DefaultPolicy();
  absl::StatusOr<Association> a = Resolve(p, "alice", false, "", "");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->account, "alice");
  EXPECT_EQ(a->qos, "normal");
  EXPECT_EQ(Resolve(p, "alice", false, "vision", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(SharesOf(p, "alice"), 1.0);
}

TEST(PolicyTest, AccountsResolveToTheDefaultOrTheFirstAndAreChecked) {
  const SharingPolicy p = Teams();
  EXPECT_EQ(Resolve(p, "alice", false, "", "")->account, "vision");
  EXPECT_EQ(Resolve(p, "bob", false, "", "")->account, "speech");  // his default
  EXPECT_EQ(Resolve(p, "bob", false, "vision", "")->account, "vision");
  absl::Status st = Resolve(p, "alice", false, "speech", "").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("yours: vision"));
  EXPECT_EQ(Resolve(p, "root", true, "speech", "")->account, "speech");  // admins may
  st = Resolve(p, "carol", false, "", "").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("belongs to no account"));
}

TEST(PolicyTest, RestrictedQosIsForAdminsAndListedUsers) {
  SharingPolicy p = DefaultPolicy();
  EXPECT_EQ(Resolve(p, "alice", false, "", "high").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Resolve(p, "root", true, "", "high").ok());
  p.qos[1].users = {"alice"};
  EXPECT_TRUE(Resolve(p, "alice", false, "", "high").ok());
  const absl::Status st = Resolve(p, "alice", false, "", "gold").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("the QoS are: normal, high, scavenger"));
}

TEST(PolicyTest, QueueOrdersParseByName) {
  EXPECT_EQ(*ParseQueueOrder("fifo"), QueueOrder::kFifo);
  EXPECT_EQ(*ParseQueueOrder("multifactor"), QueueOrder::kMultifactor);
  EXPECT_EQ(ParseQueueOrder("lottery").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::sharing
