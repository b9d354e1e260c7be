#include "server/http/credentials.h"

#include <string>

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"

namespace ipupod::http {
namespace {

std::string Basic(const std::string& user_and_password) {
  return "Basic " + absl::Base64Escape(user_and_password);
}

TEST(PresentedTokenTest, BearerIsTheToken) {
  EXPECT_EQ(PresentedToken("Bearer s3cret"), "s3cret");
  EXPECT_EQ(PresentedToken("bearer   s3cret  "), "s3cret");
  EXPECT_EQ(PresentedToken("BEARER s3cret"), "s3cret");
}

TEST(PresentedTokenTest, BasicPasswordIsTheTokenWhateverTheUser) {
  EXPECT_EQ(PresentedToken(Basic("alice:s3cret")), "s3cret");
  EXPECT_EQ(PresentedToken(Basic(":s3cret")), "s3cret");
  EXPECT_EQ(PresentedToken(Basic("prometheus:a:b")), "a:b");  // a colon may be in the token
  EXPECT_EQ(PresentedToken("basic " + absl::Base64Escape("x:y")), "y");
}

TEST(PresentedTokenTest, AnythingElsePresentsNoToken) {
  EXPECT_EQ(PresentedToken(""), std::nullopt);
  EXPECT_EQ(PresentedToken("Bearer"), std::nullopt);
  EXPECT_EQ(PresentedToken("Bearer "), std::nullopt);
  EXPECT_EQ(PresentedToken("Bearers3cret"), std::nullopt);
  EXPECT_EQ(PresentedToken("Token s3cret"), std::nullopt);
  EXPECT_EQ(PresentedToken("Basic !!!not-base64!!!"), std::nullopt);
  EXPECT_EQ(PresentedToken(Basic("no-colon")), std::nullopt);
  EXPECT_EQ(PresentedToken(Basic("alice:")), std::nullopt);
  EXPECT_EQ(PresentedToken("Bearer " + std::string(kAuthorizationBytesMax, 'x')), std::nullopt);
}

}  // namespace
}  // namespace ipupod::http
