#include "common/text_match.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(EditDistanceTest, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(EditDistance("", ""), 0);
  EXPECT_EQ(EditDistance("abc", ""), 3);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("listne", "listen"), 2);
  EXPECT_EQ(EditDistance("ids", "idz"), 1);
  EXPECT_EQ(EditDistance("same", "same"), 0);
}

TEST(CloseMatchesTest, NearestFirstWithinTheLimit) {
  const std::vector<std::string> keys = {"replication_factor", "inference_replication_factor",
                                         "device_iterations", "seed"};
  EXPECT_THAT(CloseMatches("replicaton_factor", keys), ElementsAre("replication_factor"));
  EXPECT_THAT(CloseMatches("replication", keys),
              ElementsAre("replication_factor", "inference_replication_factor"));
  EXPECT_THAT(CloseMatches("seeds", keys), ElementsAre("seed"));
  EXPECT_THAT(CloseMatches("zzzzzz", keys), IsEmpty());
}

TEST(CloseMatchesTest, SubstringsCanBeTurnedOff) {
  const std::vector<std::string> keys = {"matmul_proportion"};
  EXPECT_THAT(CloseMatches("matmul", keys), ElementsAre("matmul_proportion"));
  EXPECT_THAT(CloseMatches("matmul", keys, {.substrings = false}), IsEmpty());
}

TEST(CloseMatchesTest, NearestOnlyDropsFartherAndAmbiguousMatches) {
  const std::vector<std::string> names = {"h.0.attn.w", "h.0.attn.b", "h.1.attn.w"};
  const CloseMatchOptions nearest{.length_divisor = 4, .substrings = false, .nearest_only = true};
  EXPECT_THAT(CloseMatches("h.0.atn.w", names, nearest), ElementsAre("h.0.attn.w"));
  const std::vector<std::string> ties = {"a1", "a2", "a3", "a4"};
  EXPECT_THAT(CloseMatches("a", ties, nearest), IsEmpty()) << "four equally close names";
  EXPECT_THAT(CloseMatches("a", ties, {.max_count = 2}), ElementsAre("a1", "a2"));
}

TEST(CloseMatchesTest, DidYouMeanQuotesEachMatch) {
  EXPECT_EQ(DidYouMean({}), "");
  EXPECT_EQ(DidYouMean({"ipu"}), "did you mean 'ipu'?");
  EXPECT_EQ(DidYouMean({"a", "b"}), "did you mean 'a', 'b'?");
}

}  // namespace
}  // namespace ipupod
