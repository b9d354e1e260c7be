#include "client/cli/args.h"

#include <cmath>
#include <filesystem>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/cli/attach.h"
#include "client/cli/child_process.h"
#include "client/transport_security.h"

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

TEST(ParseParamGroupTest, WeightsThenAttributesAfterTheLastColon) {
  std::vector<std::string> weights;
  std::map<std::string, double> attrs;
  ASSERT_TRUE(ParseParamGroup("fc.bias, ln.weight:weight_decay=0,lr=0.5", weights, attrs).ok());
  EXPECT_EQ(weights, (std::vector<std::string>{"fc.bias", "ln.weight"}));
  EXPECT_EQ(attrs, (std::map<std::string, double>{{"weight_decay", 0}, {"lr", 0.5}}));
  ASSERT_TRUE(ParseParamGroup("dense/kernel:0:lr=1", weights, attrs).ok());  // ':' in a name
  EXPECT_EQ(weights, (std::vector<std::string>{"dense/kernel:0"}));
}

TEST(ParseParamGroupTest, MalformedGroupsChangeNothing) {
  std::vector<std::string> weights = {"kept"};
  std::map<std::string, double> attrs = {{"lr", 1}};
  EXPECT_THAT(ParseParamGroup("fc.bias", weights, attrs).message(), HasSubstr("no ':'"));
  EXPECT_THAT(ParseParamGroup(":lr=1", weights, attrs).message(), HasSubstr("empty weight"));
  EXPECT_THAT(ParseParamGroup("a,,b:lr=1", weights, attrs).message(), HasSubstr("empty weight"));
  EXPECT_THAT(ParseParamGroup("a,a:lr=1", weights, attrs).message(), HasSubstr("repeats 'a'"));
  EXPECT_THAT(ParseParamGroup("a:", weights, attrs).message(), HasSubstr("sets no attribute"));
  EXPECT_THAT(ParseParamGroup("a:lr", weights, attrs).message(),
              HasSubstr("--opt-group: 'lr' is not NAME=VALUE"));
  EXPECT_EQ(ParseParamGroup("a:lr=x", weights, attrs).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(weights, std::vector<std::string>{"kept"});
  EXPECT_EQ(attrs.size(), 1u);
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

  auto env = ResolveClientOptions({}, FakeEnv({{"IPUPOD_SERVER", "h:1"},
                                               {"IPUPOD_TOKEN", "t"},
                                               {"USER", "u"},
                                               {"IPUPOD_TLS_CA", "ca.pem"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->server, "h:1");
  EXPECT_EQ(env->token, "t");
  EXPECT_EQ(env->user, "u");
  EXPECT_EQ(env->tls_ca, "ca.pem");
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

TEST(ResolveClientOptionsTest, TlsFilesComeFromFlagsThenTheEnvironment) {
  const auto env = FakeEnv({{"IPUPOD_TLS_CA", "env-ca.pem"},
                            {"IPUPOD_TLS_CERT", "env-cert.pem"},
                            {"IPUPOD_TLS_KEY", "env-key.pem"}});
  auto from_env = ResolveClientOptions({}, env);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->tls_ca, "env-ca.pem");
  EXPECT_EQ(from_env->tls_cert, "env-cert.pem");
  EXPECT_EQ(from_env->tls_key, "env-key.pem");
  GlobalFlags flags;
  flags.tls_ca = "ca.pem";
  flags.tls_cert = "cert.pem";
  flags.tls_key = "key.pem";
  auto flagged = ResolveClientOptions(flags, env);
  ASSERT_TRUE(flagged.ok()) << flagged.status();
  EXPECT_EQ(flagged->tls_ca, "ca.pem");
  EXPECT_EQ(flagged->tls_cert, "cert.pem");
  EXPECT_EQ(flagged->tls_key, "key.pem");
  EXPECT_EQ(ResolveClientOptions({}, FakeEnv({}))->tls_ca, "") << "no TLS by default";
}

// What the CLI checks before connecting: the options, then the transport's
// security (client/transport_security.h).
absl::Status ResolveAndCheck(const GlobalFlags& flags, const EnvLookup& env) {
  absl::StatusOr<client::ClientOptions> options = ResolveClientOptions(flags, env);
  if (!options.ok()) return options.status();
  return client::CheckTransportSecurity(*options);
}

TEST(ResolveClientOptionsTest, ATokenIsNeverSentInClearTextToAnotherMachine) {
  for (const char* server :
       {"10.255.255.1:1", "pod.example.org:50051", "0.0.0.0:50051", "[2001:db8::1]:1",
        "dns:///pod.example.org:1", "ipv4:127.0.0.1:1,10.0.0.1:1"}) {
    GlobalFlags flags;
    flags.server = server;
    flags.token = "secret";
    absl::Status refused = ResolveAndCheck(flags, FakeEnv({}));
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << server;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("in clear text")) << server;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("--tls-ca")) << server;
    EXPECT_THAT(std::string(refused.message()), ::testing::Not(HasSubstr("secret")));
    flags.tls_ca = "ca.pem";
    EXPECT_TRUE(ResolveAndCheck(flags, FakeEnv({})).ok()) << server << " over TLS";
  }
  for (const char* server : {"127.0.0.1:50051", "localhost:1", "[::1]:1", "unix:/run/ipupod.sock",
                             "dns:///localhost:1", "ipv4:127.0.0.1:1,127.0.0.2:1"}) {
    GlobalFlags flags;
    flags.server = server;
    flags.token = "secret";
    EXPECT_TRUE(ResolveAndCheck(flags, FakeEnv({})).ok()) << server << " is loopback";
  }
  GlobalFlags open_mode;  // no token: nothing secret crosses the network
  open_mode.server = "10.255.255.1:1";
  EXPECT_TRUE(ResolveAndCheck(open_mode, FakeEnv({})).ok());
  // The token from the environment counts too.
  EXPECT_EQ(ResolveAndCheck(open_mode, FakeEnv({{"IPUPOD_TOKEN", "t"}})).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ResolveClientOptionsTest, AClientCertificateNeedsItsKeyAndACa) {
  GlobalFlags flags;
  flags.tls_ca = "ca.pem";
  flags.tls_cert = "cert.pem";
  absl::Status no_key = ResolveAndCheck(flags, FakeEnv({}));
  EXPECT_EQ(no_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_key.message()), HasSubstr("only --tls-cert is set"));
  flags.tls_cert = "";
  flags.tls_key = "key.pem";
  EXPECT_THAT(std::string(ResolveAndCheck(flags, FakeEnv({})).message()),
              HasSubstr("only --tls-key is set"));
  flags.tls_cert = "cert.pem";
  flags.tls_ca = "";
  absl::Status no_ca = ResolveAndCheck(flags, FakeEnv({}));
  EXPECT_EQ(no_ca.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_ca.message()), HasSubstr("needs --tls-ca"));
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
  EXPECT_EQ(env.count("IPUPOD_TLS_CA"), 0u);
  // TLS files go to COMMAND as absolute paths: it may change directory.
  options.tls_ca = "/etc/ipupod/ca.pem";
  options.tls_cert = "certs/me.pem";
  options.tls_key = "certs/me.key";
  env.clear();
  for (const auto& [k, v] : SessionEnvironment(options, session)) env[k] = v;
  EXPECT_EQ(env["IPUPOD_TLS_CA"], "/etc/ipupod/ca.pem");
  EXPECT_EQ(env["IPUPOD_TLS_CERT"], (std::filesystem::current_path() / "certs/me.pem").string());
  EXPECT_EQ(env["IPUPOD_TLS_KEY"], (std::filesystem::current_path() / "certs/me.key").string());
}

TEST(MergeEnvironmentTest, ExtraVariablesReplaceInheritedOnes) {
  std::vector<std::string> merged = MergeEnvironment(
      {"PATH=/bin", "IPUPOD_SESSION=old", "IPUPOD_SESSIONX=keep"}, {{"IPUPOD_SESSION", "s1-2"}});
  EXPECT_EQ(merged,
            (std::vector<std::string>{"PATH=/bin", "IPUPOD_SESSIONX=keep", "IPUPOD_SESSION=s1-2"}));
}

TEST(ParseDurationTest, AcceptsUnitsLargestFirst) {
  constexpr absl::Duration kMax = kTimeLimitMax;
  EXPECT_EQ(*ParseDuration("90s", "--time-limit", kMax), absl::Seconds(90));
  EXPECT_EQ(*ParseDuration("30m", "--time-limit", kMax), absl::Minutes(30));
  EXPECT_EQ(*ParseDuration("2h", "--time-limit", kMax), absl::Hours(2));
  EXPECT_EQ(*ParseDuration("1d", "--time-limit", kMax), absl::Hours(24));
  EXPECT_EQ(*ParseDuration("1h30m", "--time-limit", kMax), absl::Minutes(90));
  EXPECT_EQ(*ParseDuration("2d12h5m3s", "--time-limit", kMax),
            absl::Hours(60) + absl::Minutes(5) + absl::Seconds(3));
  EXPECT_EQ(*ParseDuration("30d", "--time-limit", kMax), absl::Hours(720)) << "the limit itself";
  EXPECT_EQ(*ParseDuration("0h1s", "--time-limit", kMax), absl::Seconds(1));
}

TEST(ParseDurationTest, RefusesZeroTooLongAndMalformedSayingWhy) {
  constexpr absl::Duration kMax = kTimeLimitMax;
  auto zero = ParseDuration("0s", "--time-limit", kMax);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("--time-limit: '0s' is zero"));
  EXPECT_THAT(ParseDuration("0h0m", "--time-limit", kMax).status().message(), HasSubstr("zero"));
  auto years = ParseDuration("365d", "--time-limit", kMax);
  EXPECT_THAT(years.status().message(), HasSubstr("is too long"));
  EXPECT_THAT(years.status().message(), HasSubstr("at most 30d"));
  EXPECT_FALSE(ParseDuration("30d1s", "--time-limit", kMax).ok());
  EXPECT_THAT(ParseDuration("90", "--time-limit", kMax).status().message(),
              HasSubstr("a number without a unit"));
  EXPECT_THAT(ParseDuration("2w", "--time-limit", kMax).status().message(),
              HasSubstr("the unit 'w'"));
  EXPECT_THAT(ParseDuration("30m1h", "--time-limit", kMax).status().message(),
              HasSubstr("smaller one first"));
  EXPECT_THAT(ParseDuration("1h1h", "--time-limit", kMax).status().message(),
              HasSubstr("repeats a unit"));
  EXPECT_THAT(ParseDuration("9999999999s", "--time-limit", kMax).status().message(),
              HasSubstr("too large"));
  for (const char* bad : {"", "h", "-1h", "1.5h", " 1h", "1h ", "1H", "1h-", "abc"}) {
    auto r = ParseDuration(bad, "--timeout", kJobWaitMax);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("--timeout: ")) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("e.g. 90s, 30m, 2h, 1d or 1h30m")) << bad;
  }
}

TEST(ParseDurationTest, FormatIsItsInverse) {
  EXPECT_EQ(FormatDurationArg(0), "0s");
  EXPECT_EQ(FormatDurationArg(90), "1m30s");
  EXPECT_EQ(FormatDurationArg(5400), "1h30m");
  EXPECT_EQ(FormatDurationArg(86400), "1d");
  EXPECT_EQ(FormatDurationArg(30 * 86400), "30d");
  for (uint64_t seconds : {1u, 59u, 3600u, 3661u, 90061u, 2591999u}) {
    EXPECT_EQ(*ParseDuration(FormatDurationArg(seconds), "x", kTimeLimitMax),
              absl::Seconds(seconds));
  }
}

TEST(ParseSweepTest, OneVariableAndItsValues) {
  absl::StatusOr<SweepArg> sweep = ParseSweep("lr=0.1,0.01,0.001");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  EXPECT_EQ(sweep->variable, "lr");
  EXPECT_EQ(sweep->values, (std::vector<double>{0.1, 0.01, 0.001}));
  sweep = ParseSweep(" momentum_2 = 0.9 , 1e-3 ");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  EXPECT_EQ(sweep->variable, "momentum_2");
  EXPECT_EQ(sweep->values, (std::vector<double>{0.9, 1e-3}));
  std::string many = "lr=1";
  for (size_t i = 2; i <= kSweepValuesMax; ++i) absl::StrAppend(&many, ",", i);
  EXPECT_EQ(ParseSweep(many)->values.size(), kSweepValuesMax);
  EXPECT_THAT(ParseSweep(many + ",65").status().message(), HasSubstr("more than 64 values"));
}

TEST(ParseSweepTest, MalformedStringsSayWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"lr", "has no '='"},
      {"=0.1", "is not a variable name"},
      {"1lr=0.1", "is not a variable name"},
      {"l-r=0.1", "is not a variable name"},
      {"lr=", "an empty value"},
      {"lr=0.1,,0.2", "an empty value"},
      {"lr=0.1,", "an empty value"},
      {"lr=abc", "'abc' is not a finite number"},
      {"lr=inf", "is not a finite number"},
      {"lr=nan", "is not a finite number"},
      {"lr=0.1,0.10", "is given twice"},
  };
  for (const auto& [text, why] : cases) {
    absl::StatusOr<SweepArg> sweep = ParseSweep(text);
    EXPECT_EQ(sweep.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(sweep.status().message(), HasSubstr(why)) << text;
    EXPECT_THAT(sweep.status().message(), HasSubstr("--sweep: ")) << text;
    EXPECT_THAT(sweep.status().message(), HasSubstr("lr=0.1,0.01,0.001")) << text;
  }
}

TEST(CheckJobIdTest, NumbersWithAnOptionalSweepIndex) {
  for (const char* good : {"17", "0", "17.3", "123456789012345678"}) {
    EXPECT_TRUE(CheckJobId(good, "--after").ok()) << good;
  }
  for (const char* bad :
       {"", "abc", "17.", ".3", "17.3.1", "-17", "17 ", "1234567890123456789", "../17", "17/x"}) {
    absl::Status status = CheckJobId(bad, "--after");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("is not a job id")) << bad;
  }
}

TEST(ParseJobStatesTest, CaseInsensitiveCommaList) {
  EXPECT_EQ(*ParseJobStates("running"), (std::vector<v1::JobState>{v1::RUNNING}));
  EXPECT_EQ(*ParseJobStates("PENDING, Failed,failed,timeout"),
            (std::vector<v1::JobState>{v1::PENDING, v1::FAILED, v1::TIMEOUT}));
  EXPECT_EQ(*ParseJobStates("completed,cancelled"),
            (std::vector<v1::JobState>{v1::COMPLETED, v1::CANCELLED}));
  for (const char* bad : {"", "done", "RUNNING,", "JOB_STATE_UNSPECIFIED"}) {
    auto r = ParseJobStates(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("is not a job state")) << bad;
  }
}

TEST(ParseTimeArgTest, Rfc3339DatesNowAndTimesAgo) {
  const absl::Time now = absl::FromUnixSeconds(1'795'700'000);
  EXPECT_EQ(*ParseTimeArg("now", "--until", now), now);
  EXPECT_EQ(*ParseTimeArg("-2h", "--since", now), now - absl::Hours(2));
  EXPECT_EQ(*ParseTimeArg("-1d12h", "--since", now), now - absl::Hours(36));
  EXPECT_EQ(*ParseTimeArg("2026-11-26", "--since", now), absl::FromUnixSeconds(1'795'651'200));
  EXPECT_EQ(*ParseTimeArg("2026-11-26T10:00:00Z", "--since", now),
            absl::FromUnixSeconds(1'795'651'200 + 10 * 3600));
  EXPECT_EQ(*ParseTimeArg("2026-11-26T11:00:00+01:00", "--since", now),
            absl::FromUnixSeconds(1'795'651'200 + 10 * 3600));
  EXPECT_EQ(*ParseTimeArg("2026-11-26T10:00:00.5Z", "--since", now),
            absl::FromUnixMillis(int64_t{1'795'651'200} * 1000 + 10 * 3600 * 1000 + 500));
}

TEST(ParseTimeArgTest, AnythingElseSaysWhichFormsAreAccepted) {
  const absl::Time now = absl::Now();
  for (const char* bad : {"", "yesterday", "-2x", "-0h", "2026-13-01", "2026-11-26T25:00:00Z",
                          "2026-11-26 10:00", "+2h", "1700000000"}) {
    absl::StatusOr<absl::Time> t = ParseTimeArg(bad, "--since", now);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("--since")) << bad;
  }
  EXPECT_THAT(std::string(ParseTimeArg("yesterday", "--since", now).status().message()),
              HasSubstr("RFC 3339 (2026-11-26T10:00:00Z), a date"));
}

TEST(ParseTimeWindowTest, BothEndsOptionalAndTheWindowMustNotBeEmpty) {
  absl::StatusOr<TimeWindow> w = ParseTimeWindow("2026-11-26", "2026-11-27");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->since_ms, 1'795'651'200'000);
  EXPECT_EQ(w->until_ms, 1'795'651'200'000 + 24 * 3600 * 1000);
  w = ParseTimeWindow("", "");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->since_ms, 0);
  EXPECT_EQ(w->until_ms, 0);
  EXPECT_GT(ParseTimeWindow("-1h", "")->since_ms, 0);
  const absl::StatusOr<TimeWindow> empty = ParseTimeWindow("-1h", "-2h");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("the window is empty"));
  EXPECT_THAT(std::string(ParseTimeWindow("", "soon").status().message()), HasSubstr("--until"));
}

}  // namespace
}  // namespace ipupod::cli
