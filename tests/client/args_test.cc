#include "client/cli/args.h"

#include <cmath>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/cli/attach.h"
#include "client/cli/child_process.h"

namespace ipupod::cli {
namespace {

using ::testing::HasSubstr;

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars](absl::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ParseIntegerTest, AcceptsPlainDecimalsInRange) {
  EXPECT_EQ(*ParseIpuCount("4", "--ipus"), 4u);
  EXPECT_EQ(*ParseIpuCount("0", "--ipus"), 0u) << "well-formed; the server refuses it";
  EXPECT_EQ(*ParseIpuCount("65536", "--ipus"), 65536u);
  EXPECT_EQ(*ParseIpuId("0", "--ipu"), 0u);
  EXPECT_EQ(*ParseIpuId("15", "--ipu"), 15u);
}

TEST(ParseIntegerTest, RejectsNegativeHugeAndNonNumericWithClearMessages) {
  auto negative = ParseIpuCount("-4", "--size");
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("--size: '-4' is negative"));
  auto huge = ParseIpuCount("99999999999999", "--size");
  EXPECT_THAT(huge.status().message(), HasSubstr("is too large; use a whole number from 0 to"));
  auto overflow = ParseIpuCount("123456789012345678901234567890", "--size");
  EXPECT_THAT(overflow.status().message(), HasSubstr("too large"));
  for (const char* bad : {"four", "", " 4", "4 ", "+4", "0x10", "1e3", "4.0", "4abc"}) {
    auto r = ParseIpuCount(bad, "--ipus");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("is not a number")) << bad;
  }
  EXPECT_FALSE(ParseIpuId("65536", "--ipu").ok());
  EXPECT_THAT(ParseInteger("3", "x", 5, 9).status().message(), HasSubstr("too small"));
}

TEST(ParseSecondsTest, AcceptsDecimalsAndChecksRange) {
  EXPECT_DOUBLE_EQ(*ParseSeconds("30", "--timeout", false), 30);
  EXPECT_DOUBLE_EQ(*ParseSeconds("0.5", "--timeout", false), 0.5);
  EXPECT_DOUBLE_EQ(*ParseSeconds(".5", "--timeout", false), 0.5);
  EXPECT_DOUBLE_EQ(*ParseSeconds("0", "--wait-timeout", true), 0);
  EXPECT_THAT(ParseSeconds("0", "--timeout", false).status().message(),
              HasSubstr("must be more than 0"));
  EXPECT_THAT(ParseSeconds("-1", "--timeout", false).status().message(), HasSubstr("negative"));
  for (const char* bad : {"", ".", "abc", "1e9", "inf", "nan", "1,5", "1.2.3"}) {
    EXPECT_FALSE(ParseSeconds(bad, "--timeout", true).ok()) << bad;
  }
  EXPECT_THAT(ParseSeconds("99999999", "--timeout", true).status().message(),
              HasSubstr("too large"));
}

TEST(ParseOptimizerAttributesTest, NumbersAndFlags) {
  std::map<std::string, double> attrs;
  ASSERT_TRUE(ParseOptimizerAttributes("lr=0.001, momentum=0.9,nesterov=true", attrs).ok());
  ASSERT_TRUE(ParseOptimizerAttributes("amsgrad=false,max_weight_norm=inf,eps=1e-6", attrs).ok());
  EXPECT_EQ(attrs, (std::map<std::string, double>{{"lr", 0.001},
                                                  {"momentum", 0.9},
                                                  {"nesterov", 1},
                                                  {"amsgrad", 0},
                                                  {"max_weight_norm", HUGE_VAL},
                                                  {"eps", 1e-6}}));
  ASSERT_TRUE(ParseOptimizerAttributes("", attrs).ok());
  EXPECT_EQ(attrs.size(), 6u);
}

TEST(ParseOptimizerAttributesTest, BadItemsChangeNothing) {
  std::map<std::string, double> attrs{{"lr", 0.1}};
  EXPECT_THAT(ParseOptimizerAttributes("momentum=0.9,lr", attrs).message(),
              HasSubstr("'lr' is not NAME=VALUE; use NAME=VALUE,... e.g. lr=0.001"));
  EXPECT_THAT(ParseOptimizerAttributes("=1", attrs).message(), HasSubstr("not NAME=VALUE"));
  EXPECT_THAT(ParseOptimizerAttributes("lr=fast", attrs).message(),
              HasSubstr("--opt lr: 'fast' is not a number or true/false"));
  EXPECT_FALSE(ParseOptimizerAttributes("lr=nan", attrs).ok());
  EXPECT_FALSE(ParseOptimizerAttributes("lr=", attrs).ok());
  EXPECT_THAT(ParseOptimizerAttributes("lr=0.2", attrs).message(), HasSubstr("given twice"));
  EXPECT_EQ(attrs, (std::map<std::string, double>{{"lr", 0.1}}));
}

TEST(ParseFaultKindTest, KnowsEveryKind) {
  EXPECT_EQ(*ParseFaultKind("ipu-reset"), v1::FAULT_KIND_IPU_RESET);
  EXPECT_EQ(*ParseFaultKind("link-reset"), v1::FAULT_KIND_LINK_RESET);
  EXPECT_EQ(*ParseFaultKind("partition-reset"), v1::FAULT_KIND_PARTITION_RESET);
  EXPECT_EQ(*ParseFaultKind("full-reset"), v1::FAULT_KIND_FULL_RESET);
  EXPECT_EQ(*ParseFaultKind("unrecoverable"), v1::FAULT_KIND_UNRECOVERABLE);
  EXPECT_THAT(ParseFaultKind("IPU_RESET").status().message(), HasSubstr("use ipu-reset"));
}

TEST(ResolveClientOptionsTest, FlagsBeatEnvironmentBeatDefaults) {
  auto defaults = ResolveClientOptions({}, FakeEnv({}));
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->server, "127.0.0.1:50051");
  EXPECT_EQ(defaults->token, "");
  EXPECT_EQ(defaults->user, "nobody");
  EXPECT_EQ(defaults->rpc_timeout, absl::Seconds(30));

  auto env = ResolveClientOptions(
      {}, FakeEnv({{"IPUPOD_SERVER", "h:1"}, {"IPUPOD_TOKEN", "t"}, {"USER", "u"}}));
  EXPECT_EQ(env->server, "h:1");
  EXPECT_EQ(env->token, "t");
  EXPECT_EQ(env->user, "u");
  EXPECT_EQ(ResolveClientOptions({}, FakeEnv({{"IPUPOD_USER", "x"}, {"USER", "u"}}))->user, "x");
  EXPECT_EQ(ResolveClientOptions({}, FakeEnv({{"USER", ""}}))->user, "nobody");

  GlobalFlags flags;
  flags.server = "f:2";
  flags.user = "fu";
  flags.timeout = "2.5";
  auto flagged = ResolveClientOptions(flags, FakeEnv({{"IPUPOD_SERVER", "h:1"}, {"USER", "u"}}));
  EXPECT_EQ(flagged->server, "f:2");
  EXPECT_EQ(flagged->user, "fu");
  EXPECT_EQ(flagged->rpc_timeout, absl::Milliseconds(2500));

  flags.timeout = "-1";
  EXPECT_EQ(ResolveClientOptions(flags, FakeEnv({})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AttachRequestTest, BuildsTheRequestFromValidatedArguments) {
  AttachArgs args;
  args.ipus = "3";
  args.partition = "p1";
  args.auto_round = true;
  auto request = BuildAttachRequest(args, "host pid 1: hold");
  ASSERT_TRUE(request.ok());
  EXPECT_EQ(request->num_ipus(), 3u);
  EXPECT_EQ(request->partition(), "p1");
  EXPECT_FALSE(request->wait());
  EXPECT_TRUE(request->auto_round());
  EXPECT_EQ(request->client(), "host pid 1: hold");

  args.wait_timeout = "600";
  request = BuildAttachRequest(args, "");
  EXPECT_TRUE(request->wait()) << "--wait-timeout implies --wait";
  EXPECT_DOUBLE_EQ(request->wait_timeout_seconds(), 600);

  args.ipus = "-1";
  EXPECT_THAT(BuildAttachRequest(args, "").status().message(), HasSubstr("--ipus"));
  args.ipus = "2";
  args.wait_timeout = "soon";
  EXPECT_THAT(BuildAttachRequest(args, "").status().message(), HasSubstr("--wait-timeout"));
}

TEST(AttachRequestTest, ClientLabelIsBounded) {
  EXPECT_EQ(ClientLabel("h", 7, {}), "h pid 7: hold");
  EXPECT_EQ(ClientLabel("h", 7, {"python", "train.py"}), "h pid 7: python");
  // Arguments never leave the machine: they may hold secrets.
  EXPECT_EQ(ClientLabel("h", 7, {"/bin/sh", "-c", "x --db-password=hunter2"}), "h pid 7: sh");
  EXPECT_EQ(ClientLabel("h", 7, {std::string(1000, 'x')}).size(), 200u);
}

TEST(AttachRequestTest, CommandEnvironmentNamesTheSession) {
  client::ClientOptions options;
  options.server = "127.0.0.1:5";
  options.user = "alice";
  v1::SessionInfo session;
  session.set_session("s1-2");
  session.set_device_id(25);
  for (int i = 4; i < 8; ++i) session.add_ipus(i);
  std::map<std::string, std::string> env;
  for (const auto& [k, v] : SessionEnvironment(options, session)) env[k] = v;
  EXPECT_EQ(env["IPUPOD_SESSION"], "s1-2");
  EXPECT_EQ(env["IPUPOD_SERVER"], "127.0.0.1:5");
  EXPECT_EQ(env["IPUPOD_IPUS"], "4,5,6,7");
  EXPECT_EQ(env["IPUPOD_DEVICE_ID"], "25");
  EXPECT_EQ(env["IPUPOD_USER"], "alice");
  EXPECT_EQ(env.count("IPUPOD_TOKEN"), 0u);
  options.token = "secret";
  bool has_token = false;
  for (const auto& [k, v] : SessionEnvironment(options, session)) {
    has_token |= k == "IPUPOD_TOKEN" && v == "secret";
  }
  EXPECT_TRUE(has_token);
}

TEST(MergeEnvironmentTest, ExtraVariablesReplaceInheritedOnes) {
  std::vector<std::string> merged = MergeEnvironment(
      {"PATH=/bin", "IPUPOD_SESSION=old", "IPUPOD_SESSIONX=keep"}, {{"IPUPOD_SESSION", "s1-2"}});
  EXPECT_EQ(merged,
            (std::vector<std::string>{"PATH=/bin", "IPUPOD_SESSIONX=keep", "IPUPOD_SESSION=s1-2"}));
}

}  // namespace
}  // namespace ipupod::cli
