// common/utf8.h: invalid UTF-8 repaired, bounded cuts at character
// boundaries, and JSON string literals that always parse, whatever bytes
// went in.
#include "common/utf8.h"

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace ipupod {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Test, ValidTextIsKept) {
  const std::string text = "alice \xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
  EXPECT_EQ(ValidUtf8(text), text);
}

TEST(Utf8Test, EveryInvalidByteBecomesAReplacementCharacter) {
  EXPECT_EQ(ValidUtf8("a\xFF"
                      "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), kFffd + kFffd);                          // overlong '/'
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);              // a surrogate
  EXPECT_EQ(ValidUtf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // past U+10FFFF
  EXPECT_EQ(ValidUtf8("ok\xE2\x82"), "ok" + kFffd + kFffd);                 // truncated at the end
}

TEST(Utf8Test, CutsAtACharacterBoundaryAndMarksTheCut) {
  EXPECT_EQ(CutUtf8("short", 10), "short");
  EXPECT_EQ(CutUtf8("0123456789", 10), "0123456789");
  EXPECT_EQ(CutUtf8("0123456789ab", 10), "0123456...");
  // "\xE2\x82\xAC" (3 bytes) would straddle the cut: it goes whole.
  const std::string cut = CutUtf8(
      "0123\xE2\x82\xAC"
      "56789",
      9);
  EXPECT_EQ(cut, "0123...");
  EXPECT_LE(CutUtf8(std::string(100000, 'x'), 512).size(), 512u);
}

TEST(Utf8Test, JsonStringsParseWhateverWentIn) {
  std::string bytes;
  for (int c = 0; c < 256; ++c) bytes.push_back(static_cast<char>(c));
  const std::string hostile = "say \"hi\"\n\\ \t\x1b[31m " + bytes + " \xC3";
  std::string out;
  AppendJsonString(out, hostile);
  nlohmann::json parsed;
  ASSERT_NO_THROW(parsed = nlohmann::json::parse(out)) << out;
  ASSERT_TRUE(parsed.is_string());
  EXPECT_EQ(parsed.get<std::string>().substr(0, 17), "say \"hi\"\n\\ \t\x1b[31m");
  EXPECT_EQ(out.find('\n'), std::string::npos) << "one line";
  std::string plain;
  AppendJsonString(plain, "caf\xC3\xA9");
  EXPECT_EQ(plain, "\"caf\xC3\xA9\"");
}

TEST(Utf8Test, EscapeControlsLeavesNothingATerminalActsOn) {
  EXPECT_EQ(EscapeControls("plain caf\xC3\xA9 \xE2\x9C\x93"), "plain caf\xC3\xA9 \xE2\x9C\x93");
  EXPECT_EQ(EscapeControls("a\x1b[31mb\nc\td\re\x7f\x01"), "a\\x1b[31mb\\nc\\td\\re\\x7f\\x01");
  EXPECT_EQ(EscapeControls("csi\xC2\x9B"
                           "2J nel\xC2\x85"),
            "csi\\u009b2J nel\\u0085");
  EXPECT_EQ(EscapeControls("bad\xC3"), "bad\xEF\xBF\xBD");
  EXPECT_EQ(EscapeControls("line\n\tkept\x1b", "\n\t"), "line\n\tkept\\x1b");
  std::string bytes;
  for (int c = 0; c < 256; ++c) bytes.push_back(static_cast<char>(c));
  const std::string out = EscapeControls(bytes + "\xC2\x80\xC2\x9F");
  for (char c : out) {
    const auto b = static_cast<uint8_t>(c);
    EXPECT_FALSE(b < 0x20 || b == 0x7F) << "control byte " << int{b} << " in " << out;
  }
  EXPECT_EQ(out.find("\xC2\x80"), std::string::npos);
  EXPECT_EQ(out.find("\xC2\x9F"), std::string::npos);
}

}  // namespace
}  // namespace ipupod
