#include "server/config.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/flags.h"
#include <sys/stat.h>
#include <unistd.h>

namespace ipupod::server {
namespace {

using ::testing::HasSubstr;

absl::Status ParseError(const std::string& json) { return ParseConfigJson(json).status(); }

// Expects INVALID_ARGUMENT whose message contains every `needle`.
void ExpectInvalid(const std::string& json, std::vector<std::string> needles) {
  absl::Status status = ParseError(json);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << json << " -> " << status;
  for (const std::string& needle : needles) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(needle)) << json;
  }
}

TEST(ConfigTest, EmptyObjectGivesDefaults) {
  auto config = ParseConfigJson("{}");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen, "127.0.0.1:50051");
  EXPECT_EQ(config->pod.name, "POD16");
  EXPECT_EQ(config->pod.num_ipus, 16);
  EXPECT_EQ(config->state_dir, "./ipupod-state");
  EXPECT_TRUE(config->tokens.empty());
  EXPECT_TRUE(config->open_mode());
  EXPECT_EQ(config->open_mode_admins, std::vector<std::string>{"admin"});
  EXPECT_EQ(config->session_lease_seconds, 10);
  EXPECT_EQ(config->ipu_reset_ms, 200);
  EXPECT_EQ(config->partition_reset_ms, 500);
  EXPECT_EQ(config->pod_reset_ms, 1000);
  EXPECT_EQ(config->max_waiters, 4096);
  EXPECT_EQ(config->random_faults.probability_per_operation, 0.0);
  EXPECT_EQ(config->log_level, "info");
  EXPECT_TRUE(ValidateConfig(*config).ok());
}

TEST(ConfigTest, EveryKeyIsRead) {
  auto config = ParseConfigJson(R"({
    // comments are allowed
    "listen": "0.0.0.0:6000",
    "pod": "pod64",
    "state_dir": "/var/lib/ipupod",
    "tokens": [{"token": "t-alice", "user": "alice", "role": "user"},
               {"token": "t-ops", "user": "ops@site", "role": "admin"},
               {"token": "t-bob", "user": "bob"}],
    "open_mode_admins": ["root", "ops"],
    "session_lease_seconds": 3,
    "reset_ms": {"ipu": 1, "partition": 2, "pod": 3},
    "max_waiters": 10,
    "random_faults": {"seed": 18446744073709551615, "probability_per_operation": 0.25,
                      "kinds": ["ipu-reset", "link-reset", "partition-reset", "full-reset",
                                "unrecoverable"]},
    "log_level": "debug",
    "tls": {"cert": "/etc/ipupod/server.pem", "key": "/etc/ipupod/server.key",
            "client_ca": "/etc/ipupod/clients.pem"}
  })");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen, "0.0.0.0:6000");
  EXPECT_EQ(config->pod.num_ipus, 64);
  EXPECT_EQ(config->state_dir, "/var/lib/ipupod");
  ASSERT_EQ(config->tokens.size(), 3u);
  EXPECT_EQ(config->tokens[0].token, "t-alice");
  EXPECT_EQ(config->tokens[0].user, "alice");
  EXPECT_FALSE(config->tokens[0].admin);
  EXPECT_TRUE(config->tokens[1].admin);
  EXPECT_FALSE(config->tokens[2].admin) << "role defaults to user";
  EXPECT_FALSE(config->open_mode());
  EXPECT_EQ(config->open_mode_admins, (std::vector<std::string>{"root", "ops"}));
  EXPECT_EQ(config->session_lease_seconds, 3);
  EXPECT_EQ(config->ipu_reset_ms, 1);
  EXPECT_EQ(config->partition_reset_ms, 2);
  EXPECT_EQ(config->pod_reset_ms, 3);
  EXPECT_EQ(config->max_waiters, 10);
  EXPECT_EQ(config->random_faults.seed, 18446744073709551615ULL);
  EXPECT_EQ(config->random_faults.probability_per_operation, 0.25);
  EXPECT_EQ(config->random_faults.kinds.size(), 5u);
  EXPECT_EQ(config->random_faults.kinds[4], scheduler::FaultKind::kUnrecoverable);
  EXPECT_EQ(config->log_level, "debug");
  EXPECT_EQ(config->tls.cert, "/etc/ipupod/server.pem");
  EXPECT_EQ(config->tls.key, "/etc/ipupod/server.key");
  EXPECT_EQ(config->tls.client_ca, "/etc/ipupod/clients.pem");
  EXPECT_TRUE(config->tls.enabled());
  EXPECT_TRUE(ValidateConfig(*config).ok()) << "token mode with TLS may listen anywhere";

  auto options = ToSchedulerOptions(*config);
  EXPECT_EQ(options.pod.num_ipus, 64);
  EXPECT_EQ(options.ipu_reset_time, absl::Milliseconds(1));
  EXPECT_EQ(options.partition_reset_time, absl::Milliseconds(2));
  EXPECT_EQ(options.pod_reset_time, absl::Milliseconds(3));
  EXPECT_EQ(options.max_waiters, 10);
  EXPECT_EQ(options.random_faults.kinds.size(), 5u);
}

TEST(ConfigTest, TheWalksBoundIsReadAndChecked) {
  auto defaults = ParseConfigJson("{}");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(ToSchedulerOptions(*defaults).max_backfill_waiters, 1000);
  auto config = ParseConfigJson(R"({"max_backfill_waiters": 0})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ToSchedulerOptions(*config).max_backfill_waiters, 0);  // no bound
  ExpectInvalid(R"({"max_backfill_waiters": -1})", {"'max_backfill_waiters'"});
  ExpectInvalid(R"({"max_backfill_waiters": "all"})", {"'max_backfill_waiters'"});
}

TEST(ConfigTest, TheCompileBoundsAreReadAndChecked) {
  auto defaults = ParseConfigJson("{}");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->compile_max_model_mb, 1024);
  EXPECT_EQ(defaults->compile_max_concurrent, 2);
  EXPECT_EQ(defaults->compile_time_limit_seconds, 600);
  auto config = ParseConfigJson(
      R"({"compile_max_model_mb": 8, "compile_max_concurrent": 1, "compile_time_limit_seconds": 5})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->compile_max_model_mb, 8);
  EXPECT_EQ(config->compile_max_concurrent, 1);
  EXPECT_EQ(config->compile_time_limit_seconds, 5);
  ExpectInvalid(R"({"compile_max_model_mb": 0})", {"'compile_max_model_mb'"});
  ExpectInvalid(R"({"compile_max_concurrent": 65})", {"'compile_max_concurrent'"});
  ExpectInvalid(R"({"compile_time_limit_seconds": 0})", {"'compile_time_limit_seconds'"});
}

TEST(ConfigTest, TheJobServiceBoundsAreReadAndChecked) {
  auto defaults = ParseConfigJson("{}");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->jobs_max_calls, 16);
  EXPECT_EQ(defaults->jobs_max_calls_per_user, 4);
  EXPECT_EQ(defaults->jobs_max_watchers, 256);
  EXPECT_EQ(defaults->jobs_max_watchers_per_user, 32);
  EXPECT_EQ(defaults->jobs_watch_max_seconds, 600);
  auto config = ParseConfigJson(
      R"({"jobs_max_calls": 8, "jobs_max_calls_per_user": 8, "jobs_max_watchers": 3,
          "jobs_max_watchers_per_user": 1, "jobs_watch_max_seconds": 5})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->jobs_max_calls, 8);
  EXPECT_EQ(config->jobs_max_calls_per_user, 8);
  EXPECT_EQ(config->jobs_max_watchers, 3);
  EXPECT_EQ(config->jobs_max_watchers_per_user, 1);
  EXPECT_EQ(config->jobs_watch_max_seconds, 5);
  EXPECT_TRUE(ValidateConfig(*config).ok()) << ValidateConfig(*config);
  ExpectInvalid(R"({"jobs_max_calls": 0})", {"'jobs_max_calls'"});
  ExpectInvalid(R"({"jobs_max_calls_per_user": 1025})", {"'jobs_max_calls_per_user'"});
  ExpectInvalid(R"({"jobs_max_watchers": 0})", {"'jobs_max_watchers'"});
  ExpectInvalid(R"({"jobs_max_watchers_per_user": 0})", {"'jobs_max_watchers_per_user'"});
  ExpectInvalid(R"({"jobs_watch_max_seconds": 0})", {"'jobs_watch_max_seconds'"});
  // A share larger than the whole would never be reached: refused, naming both.
  auto share = ParseConfigJson(R"({"jobs_max_watchers": 2, "jobs_max_watchers_per_user": 3})");
  ASSERT_TRUE(share.ok()) << share.status();
  const absl::Status refused = ValidateConfig(*share);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("jobs_max_watchers_per_user (3)"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("jobs_max_watchers (2)"));
  share = ParseConfigJson(R"({"jobs_max_calls": 2, "jobs_max_calls_per_user": 3})");
  ASSERT_TRUE(share.ok()) << share.status();
  EXPECT_THAT(std::string(ValidateConfig(*share).message()), HasSubstr("jobs_max_calls_per_user"));
}

// Issue 29: every service's call bound is a setting its refusal names.
TEST(ConfigTest, TheUsageAndAuditCallBoundsAreSettings) {
  auto defaults = ParseConfigJson("{}");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->accounting_max_calls, 4);
  EXPECT_EQ(defaults->accounting_max_calls_per_user, 2);
  EXPECT_EQ(defaults->audit_max_calls, 2);
  EXPECT_EQ(defaults->audit_max_calls_per_user, 2);
  auto config = ParseConfigJson(
      R"({"accounting_max_calls": 8, "accounting_max_calls_per_user": 3, "audit_max_calls": 5,
          "audit_max_calls_per_user": 1})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->accounting_max_calls, 8);
  EXPECT_EQ(config->accounting_max_calls_per_user, 3);
  EXPECT_EQ(config->audit_max_calls, 5);
  EXPECT_EQ(config->audit_max_calls_per_user, 1);
  EXPECT_TRUE(ValidateConfig(*config).ok()) << ValidateConfig(*config);
  ExpectInvalid(R"({"accounting_max_calls": 0})", {"'accounting_max_calls'"});
  ExpectInvalid(R"({"audit_max_calls_per_user": 65})", {"'audit_max_calls_per_user'"});
  auto share = ParseConfigJson(R"({"audit_max_calls": 1, "audit_max_calls_per_user": 2})");
  ASSERT_TRUE(share.ok()) << share.status();
  EXPECT_THAT(std::string(ValidateConfig(*share).message()),
              HasSubstr("audit_max_calls_per_user (2) is larger than audit_max_calls (1)"));
}

TEST(ConfigTest, TheSharingSectionIsReadWhole) {
  absl::StatusOr<ServerConfig> c = ParseConfigJson(R"({"sharing": {
    "order": "backfill",
    "accounts": [{"name": "vision", "shares": 3, "users": ["alice"],
                  "limits": {"max_ipus": 8, "max_ipu_hours": 100}}],
    "default_accounts": {"alice": "vision"},
    "qos": [{"name": "normal", "priority": 10, "max_wall_minutes": 60,
             "per_user": {"max_jobs_running": 2}},
            {"name": "low", "preemptible": true, "users": ["bob"]}],
    "default_qos": "normal",
    "user_limits": {"max_jobs_pending": 50},
    "weights": {"age": 1, "fair_share": 2, "size": 3, "qos": 4, "age_max_hours": 48},
    "usage_half_life_hours": 24, "usage_window_hours": 72,
    "preempt_grace_seconds": 5, "interactive_wall_minutes": 120}})");
  ASSERT_TRUE(c.ok()) << c.status();
  const sharing::SharingPolicy& p = c->sharing;
  EXPECT_EQ(p.order, sharing::QueueOrder::kBackfill);
  ASSERT_EQ(p.accounts.size(), 1u);
  EXPECT_EQ(p.accounts[0].shares, 3);
  EXPECT_EQ(p.accounts[0].limits.max_ipus, 8);
  EXPECT_EQ(p.accounts[0].limits.max_ipu_hours, 100);
  ASSERT_EQ(p.qos.size(), 2u);
  EXPECT_EQ(p.qos[0].max_wall, absl::Hours(1));
  EXPECT_EQ(p.qos[0].per_user.max_jobs_running, 2);
  EXPECT_TRUE(p.qos[1].preemptible);
  EXPECT_EQ(p.user_limits.max_jobs_pending, 50);
  EXPECT_EQ(p.weights.age_max, absl::Hours(48));
  EXPECT_EQ(p.usage_half_life, absl::Hours(24));
  EXPECT_EQ(p.preempt_grace, absl::Seconds(5));
  EXPECT_EQ(p.interactive_wall, absl::Hours(2));
  EXPECT_EQ(ToSchedulerOptions(*c).policy->accounts.size(), 1u);
}

TEST(ConfigTest, SharingMistakesAreNamed) {
  absl::Status st = ParseConfigJson(R"({"sharing": {"acounts": []}})").status();
  EXPECT_THAT(st.message(), HasSubstr("sharing.acounts"));
  EXPECT_THAT(st.message(), HasSubstr("accounts"));
  st = ParseConfigJson(R"({"sharing": {"accounts": [{"name": "a", "shares": 0}]}})").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("account a: shares must be greater than 0"));
  st = ParseConfigJson(R"({"sharing": {"order": "lottery"}})").status();
  EXPECT_THAT(st.message(), HasSubstr("use fifo, backfill or multifactor"));
  st = ParseConfigJson(R"({"sharing": {"default_qos": "gold"}})").status();
  EXPECT_THAT(st.message(), HasSubstr("default QoS gold is not defined"));
  st = ParseConfigJson(R"({"sharing": {"user_limits": {"max_ipus": -1}}})").status();
  EXPECT_THAT(st.message(), HasSubstr("sharing.user_limits.max_ipus"));
}

TEST(ConfigTest, PodAsIntegerCount) {
  auto config = ParseConfigJson(R"({"pod": 4})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pod.num_ipus, 4);
}

TEST(ConfigTest, SyntaxErrorsAndNonObjects) {
  ExpectInvalid("{", {"not valid JSON"});
  ExpectInvalid("", {"not valid JSON"});
  ExpectInvalid("[]", {"must be a JSON object", "array"});
  ExpectInvalid("42", {"must be a JSON object"});
}

TEST(ConfigTest, UnknownKeysAreNamed) {
  ExpectInvalid(R"({"listne": "127.0.0.1:1"})", {"unknown config key 'listne'", "listen"});
  ExpectInvalid(R"({"reset_ms": {"ipus": 5}})", {"'reset_ms.ipus'", "partition"});
  ExpectInvalid(R"({"random_faults": {"probability": 0.5}})",
                {"'random_faults.probability'", "probability_per_operation"});
  ExpectInvalid(R"({"tokens": [{"token": "x", "user": "a", "admin": true}]})",
                {"'tokens[0].admin'"});
}

TEST(ConfigTest, WrongTypesNameKeyAndExpectation) {
  ExpectInvalid(R"({"listen": 50051})", {"'listen'", "string", "an integer 50051"});
  ExpectInvalid(R"({"pod": true})", {"'pod'", "POD16", "a boolean"});
  ExpectInvalid(R"({"pod": 4.5})", {"'pod'"});
  ExpectInvalid(R"({"state_dir": null})", {"'state_dir'", "null"});
  ExpectInvalid(R"({"tokens": {"token": "x"}})", {"'tokens'", "array"});
  ExpectInvalid(R"({"tokens": ["x"]})", {"'tokens[0]'", "object"});
  ExpectInvalid(R"({"open_mode_admins": "admin"})", {"'open_mode_admins'", "array"});
  ExpectInvalid(R"({"session_lease_seconds": "10"})", {"'session_lease_seconds'", "integer"});
  ExpectInvalid(R"({"session_lease_seconds": 2.5})", {"'session_lease_seconds'", "a number"});
  ExpectInvalid(R"({"reset_ms": 200})", {"'reset_ms'", "object"});
  ExpectInvalid(R"({"reset_ms": {"pod": "1s"}})", {"'reset_ms.pod'"});
  ExpectInvalid(R"({"max_waiters": [1]})", {"'max_waiters'"});
  ExpectInvalid(R"({"random_faults": []})", {"'random_faults'", "object"});
  ExpectInvalid(R"({"random_faults": {"seed": "1"}})", {"'random_faults.seed'"});
  ExpectInvalid(R"({"random_faults": {"seed": 1.5}})", {"'random_faults.seed'"});
  ExpectInvalid(R"({"random_faults": {"probability_per_operation": "high"}})",
                {"'random_faults.probability_per_operation'"});
  ExpectInvalid(R"({"random_faults": {"kinds": "ipu-reset"}})", {"'random_faults.kinds'"});
  ExpectInvalid(R"({"log_level": 3})", {"'log_level'"});
}

TEST(ConfigTest, OutOfRangeNumbersAreRefused) {
  ExpectInvalid(R"({"session_lease_seconds": 0})", {"from 1 to 3600", "0"});
  ExpectInvalid(R"({"session_lease_seconds": -5})", {"from 1 to 3600", "-5"});
  ExpectInvalid(R"({"session_lease_seconds": 99999999999999999999})", {"lease"});
  ExpectInvalid(R"({"session_lease_seconds": 18446744073709551615})", {"from 1 to 3600"});
  ExpectInvalid(R"({"reset_ms": {"ipu": -1}})", {"'reset_ms.ipu'", "from 0 to 60000"});
  ExpectInvalid(R"({"reset_ms": {"partition": 60001}})", {"'reset_ms.partition'"});
  ExpectInvalid(R"({"max_waiters": 0})", {"'max_waiters'"});
  ExpectInvalid(R"({"max_waiters": -1})", {"'max_waiters'"});
  ExpectInvalid(R"({"max_waiters": 1000001})", {"'max_waiters'"});
  ExpectInvalid(R"({"random_faults": {"seed": -1}})", {"non-negative"});
  ExpectInvalid(R"({"random_faults": {"probability_per_operation": 1.5}})", {"from 0 to 1"});
  ExpectInvalid(R"({"random_faults": {"probability_per_operation": -0.1}})", {"from 0 to 1"});
  ExpectInvalid(R"({"pod": -16})", {"'pod'"});
  ExpectInvalid(R"({"pod": 18446744073709551615})", {"'pod'"});
}

TEST(ConfigTest, BadValuesAreRefused) {
  ExpectInvalid(R"({"pod": "POD24"})", {"'pod'"});
  ExpectInvalid(R"({"pod": 24})", {"'pod'", "32"});
  ExpectInvalid(R"({"pod": 512})", {"'pod'"});
  ExpectInvalid(R"({"listen": "localhost"})", {"'listen'", "host:port"});
  ExpectInvalid(R"({"listen": "127.0.0.1:99999"})", {"'listen'"});
  ExpectInvalid(R"({"listen": "::1:50051"})", {"'listen'", "[::1]"});
  ExpectInvalid(R"({"listen": ""})", {"'listen'"});
  ExpectInvalid(R"({"state_dir": ""})", {"'state_dir'", "non-empty"});
  ExpectInvalid(R"({"log_level": "verbose"})", {"'log_level'", "trace"});
  ExpectInvalid(R"({"random_faults": {"kinds": []}})", {"non-empty"});
  ExpectInvalid(R"({"random_faults": {"kinds": ["meteor"]}})",
                {"'random_faults.kinds[0]'", "ipu-reset"});
  ExpectInvalid(R"({"open_mode_admins": ["ok", "bad name"]})", {"'open_mode_admins[1]'"});
}

TEST(ConfigTest, TokenEntriesAreChecked) {
  ExpectInvalid(R"({"tokens": [{"token": "x"}]})", {"'tokens[0]'", "\"user\""});
  ExpectInvalid(R"({"tokens": [{"user": "a"}]})", {"'tokens[0]'", "\"token\""});
  ExpectInvalid(R"({"tokens": [{"token": "", "user": "a"}]})", {"'tokens[0].token'"});
  ExpectInvalid(R"({"tokens": [{"token": "has space", "user": "a"}]})", {"'tokens[0].token'"});
  ExpectInvalid(R"({"tokens": [{"token": "x", "user": "a", "role": "root"}]})",
                {"'tokens[0].role'", "\"admin\""});
  ExpectInvalid(R"({"tokens": [{"token": "x", "user": "a/b"}]})", {"'tokens[0].user'"});
  ExpectInvalid(R"({"tokens": [{"token": "same", "user": "a"}, {"token": "same", "user": "b"}]})",
                {"'tokens[1].token'", "unique"});
  // A bad token value is never echoed back.
  absl::Status status = ParseError(R"({"tokens": [{"token": "sec ret", "user": "a"}]})");
  EXPECT_THAT(std::string(status.message()), ::testing::Not(HasSubstr("sec ret")));
}

TEST(ConfigTest, VeryLongStringsAreRefused) {
  std::string long_dir(kStringLengthMax + 1, 'd');
  ExpectInvalid(R"({"state_dir": ")" + long_dir + R"("})", {"'state_dir'", "at most 4096"});
  std::string long_token(kTokenLengthMax + 1, 't');
  ExpectInvalid(R"({"tokens": [{"token": ")" + long_token + R"(", "user": "a"}]})",
                {"'tokens[0].token'"});
  std::string long_user(65, 'u');
  ExpectInvalid(R"({"tokens": [{"token": "x", "user": ")" + long_user + R"("}]})",
                {"'tokens[0].user'"});
  std::string long_pod(1000, 'P');
  absl::Status pod = ParseError(R"({"pod": ")" + long_pod + R"("})");
  EXPECT_EQ(pod.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(pod.message().size(), 300u) << "errors quote a bounded part of the value";
}

TEST(ConfigTest, ListenAddresses) {
  auto v4 = ParseListenAddress("127.0.0.1:0");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 0);
  auto v6 = ParseListenAddress("[::1]:50051");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_TRUE(v6->ipv6);
  EXPECT_EQ(v6->port, 50051);
  for (const char* bad : {"", ":80", "host:", "host:-1", "host:65536", "host:8a", "[::1]",
                          "[::1]50051", "a b:1", "::1:80"}) {
    EXPECT_EQ(ParseListenAddress(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ConfigTest, LoopbackHosts) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "::1",
                           "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "128.0.0.1", "10.0.0.1", "::", "example.com", "127.0.0",
                           "localhost.evil.com", "[::1]"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(ConfigTest, OpenModeMustListenOnLoopback) {
  ServerConfig config;
  config.listen = "0.0.0.0:50051";
  absl::Status status = ValidateConfig(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("loopback"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("0.0.0.0:50051"));
  config.listen = "[::1]:0";
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.listen = "localhost:0";
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.listen = "0.0.0.0:50051";
  config.tokens.push_back({"t", "alice", false});
  config.tls = {"server.pem", "server.key", ""};
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ConfigTest, TokensOffLoopbackNeedTls) {
  ServerConfig config;
  config.tokens.push_back({"t", "alice", false});
  for (const char* listen : {"0.0.0.0:50051", "10.1.2.3:50051", "[::]:0", "pod.example.org:1"}) {
    config.listen = listen;
    absl::Status status = ValidateConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << listen;
    EXPECT_THAT(std::string(status.message()), HasSubstr(listen));
    EXPECT_THAT(std::string(status.message()), HasSubstr("clear text"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("--tls-cert"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("listen on loopback"));
  }
  for (const char* loopback : {"127.0.0.1:0", "localhost:0", "[::1]:0"}) {
    config.listen = loopback;
    EXPECT_TRUE(ValidateConfig(config).ok()) << loopback << ": a local TLS proxy may front it";
  }
  config.listen = "0.0.0.0:50051";
  config.tls.cert = "server.pem";
  config.tls.key = "server.key";
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ConfigTest, TlsFilesMustComeTogether) {
  ServerConfig config;
  config.tls.cert = "server.pem";
  absl::Status status = ValidateConfig(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("only the certificate"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("--tls-key"));
  config.tls = {"", "server.key", ""};
  EXPECT_THAT(std::string(ValidateConfig(config).message()), HasSubstr("only the key"));
  config.tls = {"", "", "clients.pem"};
  status = ValidateConfig(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--tls-client-ca"));
  config.tls = {"server.pem", "server.key", "clients.pem"};
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ConfigTest, TheTlsSectionIsStrict) {
  ExpectInvalid(R"({"tls": {"cert": "a.pem"}})", {"'tls.key'", "is missing"});
  ExpectInvalid(R"({"tls": {"key": "a.key"}})", {"'tls.cert'", "is missing"});
  ExpectInvalid(R"({"tls": {"client_ca": "ca.pem"}})", {"'tls.cert'", "mutual TLS"});
  ExpectInvalid(R"({"tls": {"cert": "a", "key": "b", "ca": "c"}})", {"'tls.ca'", "client_ca"});
  ExpectInvalid(R"({"tls": {"cert": "", "key": "b"}})", {"'tls.cert'", "non-empty string"});
  ExpectInvalid(R"({"tls": {"cert": 3, "key": "b"}})", {"'tls.cert'", "an integer 3"});
  ExpectInvalid(R"({"tls": "server.pem"})", {"'tls'", "an object"});
  auto empty = ParseConfigJson(R"({"tls": {}})");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_FALSE(empty->tls.enabled());
}

TEST(ConfigTest, TheCustomOpsSectionIsReadAndChecked) {
  auto defaults = ParseConfigJson("{}");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_TRUE(defaults->custom_ops.library_dirs.empty());  // no custom op runs by default
  EXPECT_EQ(defaults->custom_ops.memory_mb, 4096);
  EXPECT_EQ(defaults->custom_ops.call_timeout_seconds, 60);
  EXPECT_EQ(defaults->custom_ops.max_hosts, 64);
  auto config = ParseConfigJson(R"({"custom_ops": {"library_dirs": ["/opt/ops", "/srv/ops"],
      "host": "/usr/libexec/ipupod/ipupod-custom-op-host", "memory_mb": 512,
      "call_timeout_seconds": 5, "max_hosts": 2}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->custom_ops.library_dirs, (std::vector<std::string>{"/opt/ops", "/srv/ops"}));
  EXPECT_EQ(config->custom_ops.host, "/usr/libexec/ipupod/ipupod-custom-op-host");
  EXPECT_EQ(config->custom_ops.memory_mb, 512);
  EXPECT_EQ(config->custom_ops.call_timeout_seconds, 5);
  EXPECT_EQ(config->custom_ops.max_hosts, 2);
  ExpectInvalid(R"({"custom_ops": {"library_dirs": ["ops"]}})",
                {"'custom_ops.library_dirs[0]'", "absolute path"});
  ExpectInvalid(R"({"custom_ops": {"library_dirs": "/opt/ops"}})", {"'custom_ops.library_dirs'"});
  ExpectInvalid(R"({"custom_ops": {"memory_mb": 1}})", {"'custom_ops.memory_mb'"});
  ExpectInvalid(R"({"custom_ops": {"call_timeout_seconds": 0}})",
                {"'custom_ops.call_timeout_seconds'"});
  ExpectInvalid(R"({"custom_ops": {"max_hosts": 5000}})", {"'custom_ops.max_hosts'"});
  ExpectInvalid(R"({"custom_ops": {"dirs": []}})", {"'custom_ops.dirs'"});
}

TEST(ConfigTest, UserNames) {
  for (const char* ok : {"a", "alice", "A.b_c-d@e", "0123456789"}) {
    EXPECT_TRUE(IsValidUserName(ok)) << ok;
  }
  EXPECT_TRUE(IsValidUserName(std::string(64, 'x')));
  EXPECT_FALSE(IsValidUserName(std::string(65, 'x')));
  for (const char* bad : {"", "a b", "a/b", "a:b", "é", "a\nb"}) {
    EXPECT_FALSE(IsValidUserName(bad)) << bad;
  }
}

// ---- files and flags

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    std::string pattern = ::testing::TempDir() + "ipupod_config_XXXXXX";
    int fd = mkstemp(pattern.data());
    close(fd);
    path_ = pattern;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

absl::StatusOr<CommandLine> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ipupodd");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

TEST(ConfigFileTest, MissingFileIsNotFoundNamingThePath) {
  auto config = LoadConfigFile("/nonexistent/ipupodd.json");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("/nonexistent/ipupodd.json"));
}

TEST(ConfigFileTest, ErrorsArePrefixedWithThePath) {
  TempFile file(R"({"pod": "POD3"})");
  auto config = LoadConfigFile(file.path());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(file.path()));
}

// Issue 29: a FIFO in the config's place blocked the SIGHUP loop (and with
// it SIGTERM) in open(); /dev/zero was read until memory ran out. Both, a
// directory and an oversized file are refused at once, naming the path.
TEST(ConfigFileTest, NonRegularAndOversizedFilesAreRefusedWithoutBlocking) {
  TempFile fifo("");
  std::remove(fifo.path().c_str());
  ASSERT_EQ(::mkfifo(fifo.path().c_str(), 0600), 0);
  for (const std::string& path : {fifo.path(), std::string("/dev/zero"), std::string("/tmp")}) {
    auto config = LoadConfigFile(path);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(std::string(config.status().message()),
                HasSubstr("'" + path + "' is not a regular file"));
  }
  std::string big = R"({"pod": "POD4", "listen": "127.0.0.1:1")";
  big.append(static_cast<size_t>(kConfigFileBytesMax), ' ');
  big.append("}");
  TempFile oversized(big);
  auto config = LoadConfigFile(oversized.path());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("over the 4194304 a config may have; is it the right file?"));
}

TEST(ConfigFileTest, ItsKeysAreKeptAndDiffedByWhatAReloadApplies) {
  TempFile before(R"({"pod": "POD4", "sharing": {"order": "fifo"}, "max_waiters": 10,
                      "tokens": [{"token": "t1", "user": "alice"}]})");
  TempFile after(R"({"pod": "POD4", "sharing": {"order": "backfill"}, "session_lease_seconds": 5,
                     "tokens": [{"token": "t2", "user": "alice"}]})");
  auto running = LoadConfigFile(before.path());
  auto fresh = LoadConfigFile(after.path());
  ASSERT_TRUE(running.ok() && fresh.ok()) << running.status() << fresh.status();
  EXPECT_EQ(running->file_keys.at("max_waiters"), "10");
  const ConfigChanges changes = DiffConfigKeys(running->file_keys, fresh->file_keys);
  EXPECT_EQ(changes.applied, std::vector<std::string>{"sharing"});
  EXPECT_EQ(changes.need_restart,
            (std::vector<std::string>{"max_waiters", "session_lease_seconds", "tokens"}));
  const ConfigChanges none = DiffConfigKeys(running->file_keys, running->file_keys);
  EXPECT_TRUE(none.applied.empty() && none.need_restart.empty());
}

TEST(FlagsTest, NoFlagsGiveDefaults) {
  auto cl = Parse({});
  ASSERT_TRUE(cl.ok()) << cl.status();
  ASSERT_TRUE(cl->config);
  EXPECT_EQ(cl->config->listen, "127.0.0.1:50051");
  EXPECT_EQ(cl->config->pod.num_ipus, 16);
}

TEST(FlagsTest, FlagsOverrideTheConfigFile) {
  TempFile file(R"({"listen": "127.0.0.1:7000", "pod": "POD4", "state_dir": "/a",
                    "log_level": "warn", "session_lease_seconds": 30})");
  auto cl = Parse({"--config", file.path(), "--listen", "[::1]:0", "--pod", "64", "--state-dir",
                   "/b", "--log-level", "debug", "--lease-seconds", "2"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  ASSERT_TRUE(cl->config);
  EXPECT_EQ(cl->config->listen, "[::1]:0");
  EXPECT_EQ(cl->config->pod.num_ipus, 64);
  EXPECT_EQ(cl->config->state_dir, "/b");
  EXPECT_EQ(cl->config->log_level, "debug");
  EXPECT_EQ(cl->config->session_lease_seconds, 2);

  auto file_only = Parse({"--config", file.path()});
  ASSERT_TRUE(file_only.ok()) << file_only.status();
  EXPECT_EQ(file_only->config->pod.num_ipus, 4);
  EXPECT_EQ(file_only->config->session_lease_seconds, 30);
}

TEST(FlagsTest, BadFlagsAreInvalidArgument) {
  EXPECT_EQ(Parse({"--pod", "24"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(Parse({"--pod", "24"}).status().message()), HasSubstr("32"));
  EXPECT_EQ(Parse({"--pod", "POD"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--listen", "nowhere"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--log-level", "loud"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--lease-seconds", "0"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--lease-seconds", "-3"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--lease-seconds", "ten"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--bogus"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--config", "/nonexistent.json"}).status().code(), absl::StatusCode::kNotFound);
  auto open = Parse({"--listen", "0.0.0.0:0"});
  EXPECT_EQ(open.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(open.status().message()), HasSubstr("loopback"));
}

TEST(FlagsTest, TlsFlagsOverrideTheConfigFile) {
  TempFile file(R"({"tokens": [{"token": "t", "user": "alice"}],
                    "tls": {"cert": "file.pem", "key": "file.key"}})");
  auto cl = Parse({"--config", file.path(), "--tls-cert", "flag.pem", "--tls-client-ca", "ca.pem",
                   "--listen", "0.0.0.0:0"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->config->tls.cert, "flag.pem");
  EXPECT_EQ(cl->config->tls.key, "file.key");
  EXPECT_EQ(cl->config->tls.client_ca, "ca.pem");

  auto plain = Parse({"--config", file.path(), "--listen", "0.0.0.0:0", "--tls-cert", "c.pem"});
  ASSERT_TRUE(plain.ok()) << plain.status() << ": the file's key stays";
  auto key_only = Parse({"--tls-key", "k.pem"});
  EXPECT_EQ(key_only.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(key_only.status().message()), HasSubstr("only the key"));
}

TEST(FlagsTest, HelpExplainsWithAnExample) {
  auto cl = Parse({"--help"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_FALSE(cl->config);
  for (const char* needle :
       {"--config", "--listen", "--pod", "--state-dir", "--log-level", "--lease-seconds", "Example",
        "tokens", "open mode", "--tls-cert", "--tls-key", "--tls-client-ca", "clear text"}) {
    EXPECT_THAT(cl->print, HasSubstr(needle));
  }
  auto version = Parse({"--version"});
  ASSERT_TRUE(version.ok());
  EXPECT_THAT(version->print, HasSubstr("ipupodd "));
}

TEST(ConfigTest, ExecutionKeysAndFlags) {
  auto config = ParseConfigJson(R"({"executable_cache_mb": 64, "max_execution_threads": 4})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->executable_cache_mb, 64);
  EXPECT_EQ(config->max_execution_threads, 4);
  EXPECT_EQ(ServerConfig().executable_cache_mb, 4096);
  EXPECT_EQ(ServerConfig().max_execution_threads, 8);
  ExpectInvalid(R"({"executable_cache_mb": 0})", {"'executable_cache_mb'", "from 1"});
  // One is a valid bound: gRPC's pollers no longer count against it.
  ExpectInvalid(R"({"max_execution_threads": 0})", {"'max_execution_threads'", "from 1"});
  EXPECT_TRUE(ParseConfigJson(R"({"max_execution_threads": 1})").ok());
  auto cl = Parse({"--executable-cache-mb", "128", "--max-execution-threads", "3"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->config->executable_cache_mb, 128);
  EXPECT_EQ(cl->config->max_execution_threads, 3);
  EXPECT_TRUE(Parse({"--max-execution-threads", "1"}).ok());
  EXPECT_EQ(Parse({"--max-execution-threads", "0"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Parse({"--executable-cache-mb", "0"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Issue 11: the per-user share of execution calls and the idle timeout of
// client streams.
TEST(ConfigTest, PerUserShareAndStreamIdleKeysAndFlags) {
  EXPECT_EQ(ExecutionThreadsPerUser(ServerConfig()), 4);  // half of 8
  EXPECT_EQ(ServerConfig().execution_stream_idle_seconds, 30);
  auto config = ParseConfigJson(
      R"({"max_execution_threads": 1, "max_execution_threads_per_user": 0,
          "execution_stream_idle_seconds": 5})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ExecutionThreadsPerUser(*config), 1);  // at least 1
  EXPECT_EQ(config->execution_stream_idle_seconds, 5);
  ExpectInvalid(R"({"execution_stream_idle_seconds": 0})",
                {"'execution_stream_idle_seconds'", "from 1"});
  ExpectInvalid(R"({"max_execution_threads_per_user": -1})",
                {"'max_execution_threads_per_user'", "from 0"});
  auto cl = Parse({"--max-execution-threads", "6", "--max-execution-threads-per-user", "9",
                   "--execution-stream-idle-seconds", "2"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(ExecutionThreadsPerUser(*cl->config), 6);  // never above the whole bound
  EXPECT_EQ(cl->config->execution_stream_idle_seconds, 2);
  EXPECT_EQ(Parse({"--execution-stream-idle-seconds", "0"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConfigTest, ComputeThreadsKeyAndFlag) {
  EXPECT_EQ(ServerConfig().compute_threads, 0);  // every CPU
  auto config = ParseConfigJson(R"({"compute_threads": 1})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->compute_threads, 1);
  ExpectInvalid(R"({"compute_threads": -1})", {"'compute_threads'"});
  auto cl = Parse({"--compute-threads", "2"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->config->compute_threads, 2);
  EXPECT_EQ(Parse({"--compute-threads", "-3"}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConfigTest, LoadMemoryKeyAndFlag) {
  EXPECT_EQ(ServerConfig().load_memory_mb, 0);  // half of the host's memory
  auto config = ParseConfigJson(R"({"load_memory_mb": 2048})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->load_memory_mb, 2048);
  ExpectInvalid(R"({"load_memory_mb": -1})", {"'load_memory_mb'"});
  ExpectInvalid(R"({"load_memory_mb": 1.5})", {"'load_memory_mb'"});
  auto cl = Parse({"--load-memory-mb", "512"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->config->load_memory_mb, 512);
  EXPECT_EQ(Parse({"--load-memory-mb", "-3"}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConfigTest, AccountingKeysAreReadAndChecked) {
  const ServerConfig defaults;
  EXPECT_EQ(defaults.accounting_retention_days, 365);
  EXPECT_EQ(defaults.accounting_heartbeat_seconds, 60);
  EXPECT_FALSE(defaults.accounting_public);
  auto config = ParseConfigJson(
      R"({"accounting_retention_days": 0, "accounting_heartbeat_seconds": 2,
          "accounting_public": true})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->accounting_retention_days, 0);  // keep forever
  EXPECT_EQ(config->accounting_heartbeat_seconds, 2);
  EXPECT_TRUE(config->accounting_public);
  EXPECT_TRUE(ValidateConfig(*config).ok());
  ExpectInvalid(R"({"accounting_retention_days": -1})", {"'accounting_retention_days'"});
  ExpectInvalid(R"({"accounting_retention_days": 36501})", {"'accounting_retention_days'"});
  ExpectInvalid(R"({"accounting_retention_days": "1y"})", {"'accounting_retention_days'"});
  ExpectInvalid(R"({"accounting_heartbeat_seconds": 0})", {"'accounting_heartbeat_seconds'"});
  ExpectInvalid(R"({"accounting_heartbeat_seconds": 3601})", {"'accounting_heartbeat_seconds'"});
  ExpectInvalid(R"({"accounting_public": "yes"})", {"'accounting_public'"});
  ServerConfig bad;
  bad.accounting_heartbeat_seconds = 0;
  const absl::Status status = ValidateConfig(bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("accounting_heartbeat_seconds"));
}

TEST(ConfigTest, AuditAndLogFormatKeysAreReadAndChecked) {
  const ServerConfig defaults;
  EXPECT_EQ(defaults.audit_retention_days, 365);
  EXPECT_EQ(defaults.audit_max_records, 1'000'000);
  EXPECT_EQ(defaults.log_format, LogFormat::kText);
  auto config = ParseConfigJson(
      R"({"audit_retention_days": 0, "audit_max_records": 5, "log_format": "json"})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->audit_retention_days, 0);  // keep forever
  EXPECT_EQ(config->audit_max_records, 5);
  EXPECT_EQ(config->log_format, LogFormat::kJson);
  EXPECT_TRUE(ValidateConfig(*config).ok());
  ExpectInvalid(R"({"audit_retention_days": -1})", {"'audit_retention_days'"});
  ExpectInvalid(R"({"audit_retention_days": 36501})", {"'audit_retention_days'"});
  ExpectInvalid(R"({"audit_max_records": 0})", {"'audit_max_records'"});
  ExpectInvalid(R"({"audit_max_records": 1000000001})", {"'audit_max_records'"});
  ExpectInvalid(R"({"log_format": "xml"})", {"'log_format'", "\"text\" or \"json\""});
  ExpectInvalid(R"({"log_format": 1})", {"'log_format'"});
  ServerConfig bad;
  bad.audit_max_records = 0;
  EXPECT_THAT(std::string(ValidateConfig(bad).message()), HasSubstr("audit_max_records"));
}

TEST(FlagsTest, LogFormatFlagOverridesTheConfigFile) {
  TempFile file(R"({"log_format": "json"})");
  auto cl = Parse({"--config", file.path(), "--log-format", "text"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->config->log_format, LogFormat::kText);
  EXPECT_EQ(Parse({"--config", file.path()})->config->log_format, LogFormat::kJson);
  const auto bad = Parse({"--log-format", "yaml"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("json"));
  EXPECT_THAT(Parse({"--help"})->print, HasSubstr("--log-format"));
}

TEST(ConfigTest, MetricsListenKeyFlagAndDefault) {
  ServerConfig config;
  EXPECT_EQ(MetricsListenAddress(config), "127.0.0.1:9464");  // listen 127.0.0.1:50051
  config.listen = "127.0.0.1:0";  // an ephemeral server: an ephemeral metrics port too
  EXPECT_EQ(MetricsListenAddress(config), "127.0.0.1:0");
  config.metrics_listen = "127.0.0.1:9999";
  EXPECT_EQ(MetricsListenAddress(config), "127.0.0.1:9999");
  config.metrics_listen = "off";
  EXPECT_EQ(MetricsListenAddress(config), "");

  auto parsed = ParseConfigJson(R"({"metrics_listen": "127.0.0.1:0"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->metrics_listen, "127.0.0.1:0");
  EXPECT_EQ(ParseConfigJson(R"({"metrics_listen": "off"})")->metrics_listen, "off");
  ExpectInvalid(R"({"metrics_listen": "nowhere"})", {"metrics_listen", "host:port", "off"});
  ExpectInvalid(R"({"metrics_listen": 9464})", {"metrics_listen"});
  ExpectInvalid(R"({"metrics_listen": ""})", {"metrics_listen"});

  auto flag = Parse({"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->config->metrics_listen, "127.0.0.1:0");
  EXPECT_EQ(Parse({"--metrics-listen", "off"})->config->metrics_listen, "off");
  EXPECT_EQ(Parse({"--metrics-listen", "9464"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto help = Parse({"--help"});
  EXPECT_THAT(help->print, HasSubstr("--metrics-listen"));
  EXPECT_THAT(help->print, HasSubstr("serves the status page, /metrics and /healthz"));
}

TEST(ConfigTest, TheMetricsListenerFollowsTheIdentityRules) {
  ServerConfig config;
  config.metrics_listen = "0.0.0.0:9464";
  absl::Status open = ValidateConfig(config);
  EXPECT_EQ(open.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(open.message()), HasSubstr("loopback"));
  EXPECT_THAT(std::string(open.message()), HasSubstr("--metrics-listen 127.0.0.1:PORT"));
  config.tokens.push_back({"t", "alice", false});
  absl::Status clear_text = ValidateConfig(config);
  EXPECT_EQ(clear_text.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(clear_text.message()), HasSubstr("clear text"));
  EXPECT_THAT(std::string(clear_text.message()), HasSubstr("TLS"));
  EXPECT_TRUE(ValidateMetricsListen(config, /*tls=*/true).ok());
  config.tls.cert = "server.pem";  // with TLS the listener serves HTTPS: allowed
  config.tls.key = "server.key";
  config.listen = "127.0.0.1:0";
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  config.tls = {};
  config.metrics_listen = "localhost:9464";
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.metrics_listen = "off";
  config.tokens.clear();
  EXPECT_TRUE(ValidateConfig(config).ok());
  EXPECT_EQ(Parse({"--metrics-listen", "0.0.0.0:0"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ipupod::server
