// server/log_format.h: with the json format every line the server logs is
// one JSON object - plain messages under "msg", the request log's fields
// as keys - whatever a user put in their strings (quotes, newlines, control
// characters, invalid UTF-8); the text format keeps today's lines.
#include "server/log_format.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/request_log.h"

namespace ipupod::server {
namespace {

using ::testing::HasSubstr;

const std::string kHostile = "al\"ice\n\\ \t\x1b[31m \xFF\xC3 {\"injected\":1}";

class LogFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("ipupodd", sink));
  }
  void TearDown() override {
    InstallLogFormat(LogFormat::kText);
    spdlog::set_default_logger(previous_);
  }
  // Every line, each parsed as JSON (a line that does not parse fails).
  std::vector<nlohmann::json> JsonLines() {
    std::vector<nlohmann::json> lines;
    for (absl::string_view line : absl::StrSplit(out_.str(), '\n', absl::SkipEmpty())) {
      nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      EXPECT_TRUE(parsed.is_object()) << "not one JSON object: " << line;
      lines.push_back(parsed);
    }
    return lines;
  }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(LogFormatTest, EveryLineIsOneJsonObjectWhateverTheUserSent) {
  InstallLogFormat(LogFormat::kJson);
  spdlog::info("state store {}: pod {}", "/tmp/x", kHostile);
  spdlog::warn("plain");
  {
    RequestLog log("GetPodInfo");
    log.set_user(kHostile);
    log.Done(absl::OkStatus());
  }
  {
    RequestLog log("/ipupod.v1.PodService/InjectFault");
    log.set_user("bob");
    log.Done(absl::PermissionDeniedError("only an admin; you sent " + kHostile));
  }
  {
    RequestLog log("Attach");
    log.set_user("carol");
    log.DoneNormally("session s1-1 was detached by " + kHostile);
  }
  { RequestLog abandoned("Detach"); }
  const std::vector<nlohmann::json> lines = JsonLines();
  ASSERT_EQ(lines.size(), 6u) << out_.str();
  EXPECT_EQ(lines[0]["level"], "info");
  EXPECT_THAT(lines[0]["msg"].get<std::string>(), HasSubstr("al\"ice\n\\"));
  EXPECT_FALSE(lines[0].contains("injected")) << "a user's text is never taken for keys";
  EXPECT_EQ(lines[1]["level"], "warn");
  EXPECT_EQ(lines[1]["msg"], "plain");
  const nlohmann::json& ok = lines[2];
  EXPECT_EQ(ok["event"], "rpc");
  EXPECT_THAT(ok["user"].get<std::string>(), HasSubstr("al\"ice\n"));
  EXPECT_EQ(ok["method"], "GetPodInfo");
  EXPECT_EQ(ok["code"], "OK");
  EXPECT_TRUE(ok["ms"].is_number());
  EXPECT_FALSE(ok.contains("error"));
  EXPECT_FALSE(ok.contains("msg"));
  EXPECT_EQ(lines[3]["code"], "PERMISSION_DENIED");
  EXPECT_THAT(lines[3]["error"].get<std::string>(), HasSubstr("only an admin; you sent al\"ice"));
  EXPECT_EQ(lines[4]["code"], "OK");
  EXPECT_THAT(lines[4]["ended"].get<std::string>(), HasSubstr("detached by al\"ice"));
  EXPECT_EQ(lines[5]["code"], "abandoned");
  EXPECT_EQ(lines[5]["level"], "warn");
  for (const nlohmann::json& line : lines) {
    const std::string time = line["time"].get<std::string>();
    EXPECT_EQ(time.size(), 24u) << time;  // 2026-11-27T21:03:04.123Z
    EXPECT_EQ(time.back(), 'Z') << time;
  }
}

TEST_F(LogFormatTest, TheTextFormatKeepsTodaysLines) {
  InstallLogFormat(LogFormat::kText);
  RequestLog log("GetPodInfo");
  log.set_user("alice");
  log.Done(absl::NotFoundError("no such thing"));
  EXPECT_THAT(out_.str(), HasSubstr("[info] rpc user=alice method=GetPodInfo code=NOT_FOUND ms="));
  EXPECT_THAT(out_.str(), HasSubstr(" error=\"no such thing\""));
  EXPECT_EQ(out_.str().find("{\""), std::string::npos);
}

TEST(LogFormatNamesTest, ParsesTextAndJsonOnly) {
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(LogFormatName(LogFormat::kJson), "json");
  const absl::StatusOr<LogFormat> bad = ParseLogFormat("xml");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("text"));
  EXPECT_THAT(bad.status().message(), HasSubstr("json"));
}

TEST(JsonLogLineTest, IsOneLineEndingInANewline) {
  const std::string line =
      JsonLogLine(absl::FromUnixMillis(1'800'000'000'123), spdlog::level::critical, "a\nb");
  EXPECT_EQ(line,
            "{\"time\":\"2027-01-15T08:00:00.123Z\",\"level\":\"critical\",\"msg\":\"a\\nb\"}\n");
}

}  // namespace
}  // namespace ipupod::server
