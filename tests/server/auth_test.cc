#include "server/auth.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ipupod::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Metadata whose string_refs point into `storage`.
class FakeMetadata {
 public:
  FakeMetadata& Add(std::string key, std::string value) {
    storage_.emplace_back(std::move(key), std::move(value));
    return *this;
  }
  Metadata Get() const {
    Metadata m;
    for (const auto& [k, v] : storage_) m.emplace(grpc::string_ref(k), grpc::string_ref(v));
    return m;
  }

 private:
  std::vector<std::pair<std::string, std::string>> storage_;
};

AuthPolicy OpenPolicy() { return AuthPolicy{{}, {"admin", "root"}}; }
AuthPolicy TokenPolicy() {
  return AuthPolicy{{{"alice-secret", "alice", false}, {"ops-secret", "ops", true}}, {"admin"}};
}

TEST(AuthTest, OpenModeTakesTheUserName) {
  auto caller = Authenticate(OpenPolicy(), FakeMetadata().Add("x-ipupod-user", "alice").Get());
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->user, "alice");
  EXPECT_FALSE(caller->admin);
}

TEST(AuthTest, OpenModeAdminsByName) {
  auto admin = Authenticate(OpenPolicy(), FakeMetadata().Add("x-ipupod-user", "root").Get());
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->admin);
  auto not_admin = Authenticate(OpenPolicy(), FakeMetadata().Add("x-ipupod-user", "Root").Get());
  ASSERT_TRUE(not_admin.ok());
  EXPECT_FALSE(not_admin->admin) << "names are case-sensitive";
}

TEST(AuthTest, OpenModeMissingNameIsUnauthenticatedWithAHint) {
  for (const FakeMetadata& md : {FakeMetadata(), FakeMetadata().Add("x-ipupod-user", ""),
                                 FakeMetadata().Add("authorization", "Bearer x")}) {
    auto caller = Authenticate(OpenPolicy(), md.Get());
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(caller.status().message(), "no user name: pass --user or set $USER");
  }
}

TEST(AuthTest, OpenModeInvalidNamesAreRefused) {
  for (const std::string& bad :
       std::vector<std::string>{"a b", "a/b", "eve\n", std::string(65, 'x'), "caf\xc3\xa9"}) {
    auto caller = Authenticate(OpenPolicy(), FakeMetadata().Add("x-ipupod-user", bad).Get());
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_THAT(std::string(caller.status().message()), HasSubstr("not valid")) << bad;
  }
  auto huge = Authenticate(OpenPolicy(),
                           FakeMetadata().Add("x-ipupod-user", std::string(100000, 'y')).Get());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_LT(huge.status().message().size(), 300u);
  auto twice = Authenticate(
      OpenPolicy(), FakeMetadata().Add("x-ipupod-user", "a").Add("x-ipupod-user", "admin").Get());
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kUnauthenticated);
}

TEST(AuthTest, TokenModeMapsTokensToUsersAndRoles) {
  auto alice =
      Authenticate(TokenPolicy(), FakeMetadata().Add("authorization", "Bearer alice-secret").Get());
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->user, "alice");
  EXPECT_FALSE(alice->admin);
  auto ops =
      Authenticate(TokenPolicy(), FakeMetadata().Add("authorization", "bearer ops-secret").Get());
  ASSERT_TRUE(ops.ok()) << "the scheme is case-insensitive";
  EXPECT_EQ(ops->user, "ops");
  EXPECT_TRUE(ops->admin);
}

TEST(AuthTest, TokenModeIgnoresClaimedNames) {
  auto caller = Authenticate(TokenPolicy(), FakeMetadata()
                                                .Add("authorization", "Bearer alice-secret")
                                                .Add("x-ipupod-user", "admin")
                                                .Get());
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->user, "alice");
  EXPECT_FALSE(caller->admin);
  auto name_only = Authenticate(TokenPolicy(), FakeMetadata().Add("x-ipupod-user", "admin").Get());
  EXPECT_EQ(name_only.status().code(), absl::StatusCode::kUnauthenticated);
}

TEST(AuthTest, TokenModeRejectsMissingMalformedAndUnknownTokensAlike) {
  const std::vector<FakeMetadata> bad = {
      FakeMetadata(),
      FakeMetadata().Add("authorization", ""),
      FakeMetadata().Add("authorization", "Bearer"),
      FakeMetadata().Add("authorization", "Bearer "),
      FakeMetadata().Add("authorization", "Basic alice-secret"),
      FakeMetadata().Add("authorization", "alice-secret"),
      FakeMetadata().Add("authorization", "Bearer alice-secre"),
      FakeMetadata().Add("authorization", "Bearer alice-secretx"),
      FakeMetadata().Add("authorization", "Bearer " + std::string(10000, 'x')),
      FakeMetadata()
          .Add("authorization", "Bearer alice-secret")
          .Add("authorization", "Bearer ops-secret"),
  };
  std::string first_message;
  for (const FakeMetadata& md : bad) {
    auto caller = Authenticate(TokenPolicy(), md.Get());
    ASSERT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated);
    std::string message(caller.status().message());
    if (first_message.empty()) first_message = message;
    EXPECT_EQ(message, first_message) << "every rejection reads the same";
    EXPECT_THAT(message, Not(HasSubstr("alice")));
    EXPECT_THAT(message, Not(HasSubstr("secret")));
  }
}

}  // namespace
}  // namespace ipupod::server
