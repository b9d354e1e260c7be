#include "common/sha256.h"

#include <string>

#include <gtest/gtest.h>

namespace ipupod {
namespace {

// FIPS 180-4 / NIST CSRC example vectors.
TEST(Sha256Test, NistVectors) {
  EXPECT_EQ(DigestHex(Sha256Of("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(DigestHex(Sha256Of("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DigestHex(Sha256Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(DigestHex(Sha256Of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                               "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(DigestHex(Sha256Of(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalEqualsOneShotAtEveryPaddingBoundary) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  for (size_t len : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 300}) {
    const std::string msg = data.substr(0, len);
    for (size_t split = 0; split <= len; split += 13) {
      Sha256 h;
      h.Update(msg.substr(0, split));
      h.Update(msg.substr(split));
      EXPECT_EQ(h.Finish(), Sha256Of(msg)) << len << " " << split;
    }
  }
}

TEST(Sha256Test, OneBitChangesTheDigest) {
  std::string a(100, 'x');
  std::string b = a;
  b[50] ^= 1;
  EXPECT_NE(Sha256Of(a), Sha256Of(b));
  EXPECT_EQ(DigestHex(Sha256Of(a)).size(), 64u);
}

}  // namespace
}  // namespace ipupod
