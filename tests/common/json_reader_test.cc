#include "common/json_reader.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::json {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

Json Doc(const char* text) { return *Parse(text, "test"); }

TEST(JsonReaderTest, DescribeNamesTypeAndValue) {
  EXPECT_EQ(Describe(Json(nullptr)), "null");
  EXPECT_EQ(Describe(Json(true)), "a boolean true");
  EXPECT_EQ(Describe(Json(3)), "an integer 3");
  EXPECT_EQ(Describe(Json(2.5)), "a number 2.5");
  EXPECT_EQ(Describe(Json("x")), "a string \"x\"");
  EXPECT_EQ(Describe(Doc("[1,2]")), "an array [1,2]");
  const std::string long_text(200, 'a');
  EXPECT_LT(Describe(Json(long_text)).size(), 80u) << "long values are cut";
}

TEST(JsonReaderTest, ParseErrorsNameTheDocument) {
  auto bad = Parse("{", "server config");
  EXPECT_EQ(bad.status().code(), kInvalid);
  EXPECT_THAT(bad.status().message(), HasSubstr("server config is not valid JSON"));
  EXPECT_FALSE(Parse("{// c\n}", "x").ok()) << "comments only when asked for";
  EXPECT_TRUE(Parse("{// c\n}", "x", /*comments=*/true).ok());
}

TEST(JsonReaderTest, TypedReadsNameThePathExpectedAndGot) {
  const JsonPath at = JsonPath("server").Key("max_waiters");
  EXPECT_EQ(ReadInt(Json("x"), at).status().message(),
            "server key 'max_waiters': expected an integer, got a string \"x\"");
  EXPECT_THAT(ReadInt(Json(2.5), at).status().message(), HasSubstr("got a number 2.5"));
  EXPECT_THAT(ReadInt(Json(9), at, 1, 5).status().message(),
              HasSubstr("expected an integer from 1 to 5, got an integer 9"));
  EXPECT_THAT(ReadInt(Doc("18446744073709551615"), at).status().message(),
              HasSubstr("expected an integer"));
  EXPECT_EQ(*ReadInt(Json(4), at, 1, 5), 4);
  EXPECT_EQ(*ReadUint(Doc("18446744073709551615"), at), 18446744073709551615ull);
  EXPECT_EQ(ReadUint(Json(-1), at).status().code(), kInvalid);
  EXPECT_EQ(*ReadNumber(Json(3), at), 3.0);
  EXPECT_EQ(ReadNumber(Json("3"), at).status().code(), kInvalid);
  EXPECT_EQ(ReadBool(Json(1), at).status().code(), kInvalid);
  EXPECT_EQ(ReadString(Json(1), at).status().code(), kInvalid);
  EXPECT_THAT(*ReadIntList(Doc("[1, 2]"), at), ElementsAre(1, 2));
  EXPECT_THAT(ReadIntList(Doc("[1, \"2\"]"), at).status().message(),
              HasSubstr("expected a list of integers"));
  EXPECT_THAT(*ReadStringList(Doc("[\"a\"]"), at), ElementsAre("a"));
  EXPECT_EQ(ReadStringList(Doc("[1]"), at).status().code(), kInvalid);
  EXPECT_EQ(ReadStringMap(Doc("{\"a\": \"b\"}"), at)->at("a"), "b");
  EXPECT_EQ(ReadStringMap(Doc("{\"a\": 1}"), at).status().code(), kInvalid);
  EXPECT_THAT(ExpectArray(Doc("[1, 2]"), at, 1).message(), HasSubstr("at most 1 entries"));
  EXPECT_TRUE(ExpectArray(Doc("[]"), at).ok());
}

TEST(JsonReaderTest, PathsNestKeysAndIndices) {
  const JsonPath root("config");
  EXPECT_EQ(root.Name(), "config");
  EXPECT_EQ(root.Key("tokens").Index(0).Key("user").Name(), "config key 'tokens[0].user'");
  EXPECT_EQ(root.Key("a").Error("bad").message(), "config key 'a': bad");
}

TEST(ObjectReaderTest, OpenRefusesNonObjects) {
  auto reader = ObjectReader::Open(Doc("[1]"), JsonPath("config"));
  EXPECT_EQ(reader.status().code(), kInvalid);
  EXPECT_THAT(reader.status().message(), HasSubstr("config: expected an object, got an array"));
}

TEST(ObjectReaderTest, RequiredKeysAndTypes) {
  const Json doc = Doc(R"({"name": "m", "n": 3, "ids": [1], "tags": ["t"], "sub": {"k": 1}})");
  auto reader = ObjectReader::Open(doc, JsonPath("metadata"));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(*reader->String("name"), "m");
  EXPECT_EQ(*reader->Int("n"), 3);
  EXPECT_THAT(*reader->IntList("ids"), ElementsAre(1));
  EXPECT_THAT(*reader->StringList("tags"), ElementsAre("t"));
  auto sub = reader->Object("sub");
  ASSERT_TRUE(sub.ok());
  EXPECT_THAT(sub->Int("x").status().message(), HasSubstr("metadata key 'sub.x' not found"));
  EXPECT_THAT(reader->Int("name").status().message(), HasSubstr("'name': expected an integer"));
  EXPECT_EQ(reader->Get("missing").status().code(), kInvalid);
  EXPECT_EQ(reader->Find("absent"), nullptr);
}

TEST(ObjectReaderTest, UnknownKeysCarrySuggestions) {
  const Json doc = Doc(R"({"listne": 1, "pod": 4, "zzzzzzzz": 2})");
  auto reader = ObjectReader::Open(doc, JsonPath("config"));
  ASSERT_TRUE(reader.ok());
  int calls = 0;
  auto count = [&](const Json&, const JsonPath&) {
    ++calls;
    return absl::OkStatus();
  };
  EXPECT_TRUE(reader->IfPresent("listen", count).ok());
  EXPECT_TRUE(reader->IfPresent("pod", count).ok());
  EXPECT_EQ(calls, 1) << "only present keys are read";
  const std::vector<UnknownKey> unknown = reader->UnknownKeys();
  ASSERT_EQ(unknown.size(), 2u);
  EXPECT_EQ(unknown[0].path, "listne");
  EXPECT_THAT(unknown[0].close, ElementsAre("listen"));
  EXPECT_EQ(unknown[0].Hint(), " (did you mean 'listen'?)");
  EXPECT_THAT(unknown[1].close, IsEmpty());
  EXPECT_EQ(unknown[1].Hint(), "");
  const absl::Status rejected = reader->RejectUnknownKeys();
  EXPECT_EQ(rejected.code(), kInvalid);
  EXPECT_EQ(rejected.message(),
            "unknown config key 'listne' (did you mean 'listen'?); valid keys here: listen, pod");
}

TEST(ObjectReaderTest, NoUnknownKeysIsOk) {
  const Json doc = Doc(R"({"a": 1})");
  auto reader = ObjectReader::Open(doc, JsonPath("config"));
  ASSERT_TRUE(reader.ok());
  EXPECT_NE(reader->Find("a"), nullptr);
  EXPECT_TRUE(reader->RejectUnknownKeys().ok());
}

}  // namespace
}  // namespace ipupod::json
