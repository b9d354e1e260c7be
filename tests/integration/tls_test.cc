// End to end: TLS between the ipupod CLI and a real ipupodd, with a PKI made
// by openssl in the test (tests/support/test_certificates.h). A good CA
// connects (info, attach -- COMMAND whose own ipupod calls inherit the TLS
// settings, a model run through its streams); a wrong CA, a certificate that
// does not name the address, a plaintext client or server, and mutual TLS
// without an accepted client certificate each fail with a message that says
// why and the documented exit code; the server refuses to start with tokens
// on a plaintext listener off loopback and with bad TLS files (exit 2); the
// CLI refuses to send a token in clear text to another machine (exit 2).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/tensor/tensor_files.h"
#include "tests/device/graph/onnx_builder.h"
#include "tests/integration/harness.h"
#include "tests/support/http_client.h"
#include "tests/support/test_certificates.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using test_support::TestCertificates;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kTokens = R"({"pod": "POD4", "tokens": [
    {"token": "alice-secret", "user": "alice", "role": "user"}]})";

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_dir_ = new TempDir();
    certs_ = new TestCertificates(pki_dir_->path());
  }
  static void TearDownTestSuite() {
    delete certs_;
    delete pki_dir_;
  }
  // ipupodd flags serving TLS with `cert` and `key` (and a client CA).
  static std::vector<std::string> TlsFlags(const std::string& cert, const std::string& key,
                                           const std::string& client_ca = "") {
    std::vector<std::string> flags = {"--tls-cert", cert, "--tls-key", key};
    if (!client_ca.empty()) flags.insert(flags.end(), {"--tls-client-ca", client_ca});
    return flags;
  }
  static std::vector<std::string> ServerTls() {
    return TlsFlags(certs_->server_cert, certs_->server_key);
  }
  // `ipupod --token alice-secret --tls-ca CA ARGS...` against `server`.
  static CliResult Cli(const std::string& server, const std::string& ca,
                       std::vector<std::string> args,
                       const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> global = {"--token", "alice-secret"};
    if (!ca.empty()) global.insert(global.end(), {"--tls-ca", ca});
    args.insert(args.begin(), global.begin(), global.end());
    return RunCli(server, "alice", args, env);
  }

  static TempDir* pki_dir_;
  static TestCertificates* certs_;
};
TempDir* TlsTest::pki_dir_ = nullptr;
TestCertificates* TlsTest::certs_ = nullptr;

// x[2,4] -> MatMul W[4,3] -> y[2,3], W[i][j] = 1 + 3i + j.
std::string MatMulModel() {
  graph::testing::OnnxBuilder b(14);
  b.Input("x", graph::testing::kFloat, {2, 4});
  b.Output("y", graph::testing::kFloat, {2, 3});
  std::vector<float> w(12);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0f + static_cast<float>(i);
  b.Floats("W", {4, 3}, w);
  b.Node("MatMul", {"x", "W"}, {"y"});
  return b.Bytes();
}

TEST_F(TlsTest, AGoodCaConnectsAndEveryCallWorksOverTls) {
  ServerUnderTest server(ServerTls(), kTokens);
  CliResult info = Cli(server.address(), certs_->ca, {"--json", "info"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_EQ(info.json()["pod"]["num_ipus"], 4) << info.out;

  // COMMAND's own ipupod call connects as attach did: IPUPOD_TLS_CA is passed on.
  CliResult attach = Cli(server.address(), certs_->ca,
                         {"attach", "--ipus", "1", "--", CliBinary(), "--json", "info"});
  EXPECT_EQ(attach.exit_code, 0) << attach.err;
  EXPECT_THAT(attach.out, HasSubstr("\"alice\"")) << "the child saw the session as alice";

  // A run: upload, load and Run streams over TLS.
  TempDir work;
  std::ofstream(work.sub("m.onnx"), std::ios::binary) << MatMulModel();
  ASSERT_EQ(
      Cli(server.address(), certs_->ca, {"compile", work.sub("m.onnx"), "-o", work.sub("m.ipx")})
          .exit_code,
      0);
  auto x = tensor::Tensor::FromValues<float>({4, 4}, std::vector<float>(16, 1.0f));
  ASSERT_TRUE(x.ok());
  std::ofstream(work.sub("in.npz"), std::ios::binary) << tensor::SerializeNpz({{"x", *x}});
  CliResult run = Cli(
      server.address(), certs_->ca,
      {"run", work.sub("m.ipx"), "--inputs", work.sub("in.npz"), "--outputs", work.sub("out.npz")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto out = tensor::ReadTensorFile(work.sub("out.npz"));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  const std::vector<float> y((*out)[0].second.values<float>().begin(),
                             (*out)[0].second.values<float>().end());
  // Every row of x is ones: each output row holds the columns of W summed.
  EXPECT_EQ(y, (std::vector<float>{22, 26, 30, 22, 26, 30, 22, 26, 30, 22, 26, 30}));
}

// The HTTP listener (metrics, health) serves HTTPS with the gRPC listener's
// certificate: trusted through the same CA, never in clear text.
TEST_F(TlsTest, TheHttpListenerServesHttpsWithTheSameCertificate) {
  ServerUnderTest server(ServerTls(), kTokens);
  const std::string url = server.metrics_url();
  ASSERT_THAT(url, ::testing::StartsWith("https://127.0.0.1:"));
  test_support::HttpOptions scrape = test_support::WithCa(certs_->ca);
  scrape.bearer = "alice-secret";
  test_support::HttpResult metrics = test_support::HttpGet(url + "/metrics", scrape);
  EXPECT_EQ(metrics.status, 200) << metrics.error;
  EXPECT_THAT(metrics.body, HasSubstr("ipupod_ipus{"));
  EXPECT_EQ(test_support::HttpGet(url + "/metrics", test_support::WithCa(certs_->ca)).status, 401);
  // A client that trusts another CA does not get through the handshake.
  test_support::HttpResult wrong =
      test_support::HttpGet(url + "/healthz", test_support::WithCa(certs_->other_ca));
  EXPECT_EQ(wrong.status, 0);
  EXPECT_FALSE(wrong.error.empty());
  std::string plain = "http" + url.substr(5);
  EXPECT_NE(test_support::HttpGet(plain + "/healthz").status, 200) << "no clear text";
}

// Issue 29: a TLS key or a config holding tokens that other users can read
// is named at start, with its mode and what to do; the same files at 0600
// start without a word.
std::string SecretFilesLog(const std::vector<std::string>& flags) {
  TempDir state;
  std::vector<std::string> argv = {ServerBinary(), "--listen",         "127.0.0.1:0", "--state-dir",
                                   state.sub("s"), "--metrics-listen", "off"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  Process p = Process::Start(argv);
  EXPECT_TRUE(p.ReadStdoutLine(seconds(20))) << p.stderr_text();
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(seconds(10)), 0);
  return p.stderr_text();
}

TEST_F(TlsTest, SecretFilesOthersCanReadAreNamedAtStart) {
  TempDir dir;
  const std::string key = dir.sub("key.pem"), config = dir.sub("config.json");
  std::filesystem::copy_file(certs_->server_key, key);
  std::ofstream(config) << kTokens;
  namespace fs = std::filesystem;
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read |
                           fs::perms::group_read);
  fs::permissions(config, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  const std::vector<std::string> flags = {"--config",          config,      "--tls-cert",
                                          certs_->server_cert, "--tls-key", key};
  const std::string log = SecretFilesLog(flags);
  EXPECT_THAT(log, HasSubstr("the TLS private key (tls.key, --tls-key) '" + key +
                             "' is readable by every user of this machine (mode 0644)"));
  EXPECT_THAT(log, HasSubstr("the config file (--config), which holds tokens, '" + config +
                             "' is readable by its group (mode 0640)"));
  EXPECT_THAT(log, HasSubstr("chmod 600"));
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(config, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_THAT(SecretFilesLog(flags), Not(HasSubstr("is readable by")));
}

TEST_F(TlsTest, TheReadyLineAndLogSayTls) {
  ServerUnderTest server(ServerTls(), kTokens);
  server.Kill(SIGTERM);
  EXPECT_THAT(server.process().stderr_text(), HasSubstr("TLS: certificate CN = server"));
  // The ready line went to stdout and was read by the harness; start one by hand.
  TempDir state;
  std::vector<std::string> argv = {ServerBinary(), "--listen", "127.0.0.1:0", "--state-dir",
                                   state.sub("s")};
  for (const std::string& flag : ServerTls()) argv.push_back(flag);
  argv.insert(argv.end(), {"--tls-client-ca", certs_->ca});
  Process p = Process::Start(argv);
  auto line = p.ReadStdoutLine(seconds(20));
  ASSERT_TRUE(line) << p.stderr_text();
  EXPECT_THAT(*line, HasSubstr("ipupodd listening on 127.0.0.1:"));
  EXPECT_THAT(*line, HasSubstr("(POD16, 16 IPUs, open mode, mutual TLS)"));
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(seconds(10)), 0);
}

TEST_F(TlsTest, AWrongCaFailsWithAClearError) {
  ServerUnderTest server(ServerTls(), kTokens);
  CliResult r = Cli(server.address(), certs_->other_ca, {"info"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_THAT(r.err, HasSubstr("TLS handshake with " + server.address() +
                               " failed: the server's certificate is not signed by the CA in "
                               "--tls-ca '" +
                               certs_->other_ca + "'"));
  EXPECT_THAT(r.err, Not(HasSubstr("ssl_transport_security.cc"))) << "gRPC's raw log is dropped";
  CliResult json = Cli(server.address(), certs_->other_ca, {"--json", "info"});
  EXPECT_EQ(json.exit_code, 4);
  EXPECT_EQ(json.json()["error"]["code"], "UNAUTHENTICATED") << json.out;
  // attach fails the same way before any grant.
  CliResult attach = Cli(server.address(), certs_->other_ca, {"attach", "--ipus", "1"});
  EXPECT_EQ(attach.exit_code, 4) << attach.err;
  EXPECT_THAT(attach.err, HasSubstr("is not signed by the CA in --tls-ca"));
}

TEST_F(TlsTest, PlaintextAgainstTlsAndTlsAgainstPlaintextSayWhatToChange) {
  ServerUnderTest tls_server(ServerTls(), kTokens);
  CliResult no_ca = Cli(tls_server.address(), "", {"info"});
  EXPECT_EQ(no_ca.exit_code, 8) << no_ca.err;
  EXPECT_THAT(no_ca.err, HasSubstr("cannot reach ipupodd at " + tls_server.address()));
  EXPECT_THAT(no_ca.err, HasSubstr("if it serves TLS, pass --tls-ca FILE"));

  ServerUnderTest plain_server;
  CliResult tls_client = RunCli(plain_server.address(), "alice", {"--tls-ca", certs_->ca, "info"});
  EXPECT_EQ(tls_client.exit_code, 4) << tls_client.err;
  EXPECT_THAT(tls_client.err, HasSubstr("the server does not speak TLS"));
}

TEST_F(TlsTest, TheCertificateMustNameTheAddress) {
  ServerUnderTest server(TlsFlags(certs_->server_dns_cert, certs_->server_dns_key), kTokens);
  CliResult by_ip = Cli(server.address(), certs_->ca, {"info"});
  EXPECT_EQ(by_ip.exit_code, 4) << by_ip.err;
  EXPECT_THAT(by_ip.err, HasSubstr("does not name " + server.address()));
  // By name: DNS:localhost is in it. (gRPC's default resolver, c-ares, leaks
  // 10 bytes per process in Debian's build, plaintext or not, which the
  // ASan stage's leak check reports; the system resolver finds localhost the
  // same way.)
  const std::string by_name = "localhost:" + std::to_string(server.port());
  CliResult named = Cli(by_name, certs_->ca, {"info"}, {{"GRPC_DNS_RESOLVER", "native"}});
  EXPECT_EQ(named.exit_code, 0) << named.err;
}

TEST_F(TlsTest, MutualTlsNeedsAClientCertificateItsCaSigned) {
  ServerUnderTest server(TlsFlags(certs_->server_cert, certs_->server_key, certs_->ca), kTokens);
  CliResult none = Cli(server.address(), certs_->ca, {"info"});
  EXPECT_EQ(none.exit_code, 8) << none.err;
  EXPECT_THAT(none.err, HasSubstr("requires a client certificate (mutual TLS)"));
  CliResult other =
      Cli(server.address(), certs_->ca,
          {"--tls-cert", certs_->other_client_cert, "--tls-key", certs_->other_client_key, "info"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_THAT(other.err, HasSubstr("may not accept the client certificate"));
  CliResult good =
      Cli(server.address(), certs_->ca,
          {"--tls-cert", certs_->client_cert, "--tls-key", certs_->client_key, "info"});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  // The client certificate reaches attach's COMMAND too.
  CliResult attach = Cli(server.address(), certs_->ca,
                         {"--tls-cert", certs_->client_cert, "--tls-key", certs_->client_key,
                          "attach", "--ipus", "1", "--", CliBinary(), "info"});
  EXPECT_EQ(attach.exit_code, 0) << attach.err;
}

TEST_F(TlsTest, BadClientFilesAreNamedBeforeConnecting) {
  ServerUnderTest server(ServerTls(), kTokens);
  CliResult missing = Cli(server.address(), pki_dir_->sub("nope.pem"), {"info"});
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  EXPECT_THAT(missing.err, HasSubstr("nope.pem' does not exist"));
  CliResult key_as_ca = Cli(server.address(), certs_->ca_key, {"info"});
  EXPECT_EQ(key_as_ca.exit_code, 9) << key_as_ca.err;
  EXPECT_THAT(key_as_ca.err, HasSubstr("is not a PEM CA certificate: holds no PEM certificate"));
  CliResult mismatch =
      Cli(server.address(), certs_->ca,
          {"--tls-cert", certs_->client_cert, "--tls-key", certs_->server_key, "info"});
  EXPECT_EQ(mismatch.exit_code, 9) << mismatch.err;
  EXPECT_THAT(mismatch.err, HasSubstr("pass the key that matches --tls-cert"));
  CliResult half = Cli(server.address(), certs_->ca, {"--tls-cert", certs_->client_cert, "info"});
  EXPECT_EQ(half.exit_code, 2) << half.err;
}

TEST_F(TlsTest, TheCliNeverSendsATokenInClearTextToAnotherMachine) {
  const auto started = std::chrono::steady_clock::now();
  CliResult r = RunCli("10.255.255.1:1", "alice", {"--token", "alice-secret", "info"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("refusing to send the token to 10.255.255.1:1 in clear text"));
  EXPECT_THAT(r.err, HasSubstr("pass --tls-ca FILE"));
  EXPECT_THAT(r.err, Not(HasSubstr("alice-secret")));
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(10)) << "refused before connecting";
  CliResult env =
      RunCli("10.255.255.1:1", "alice", {"--json", "info"}, {{"IPUPOD_TOKEN", "alice-secret"}});
  EXPECT_EQ(env.exit_code, 2) << env.err;
  EXPECT_THAT(env.out, HasSubstr("in clear text"));
}

// ipupodd with `config` (a JSON text) and `flags`: its exit code and stderr,
// for servers that must refuse to start.
std::pair<int, std::string> StartFails(const std::string& config,
                                       const std::vector<std::string>& flags) {
  TempDir dir;
  std::vector<std::string> argv = {ServerBinary(), "--state-dir", dir.sub("state")};
  if (!config.empty()) {
    std::ofstream(dir.sub("config.json")) << config;
    argv.insert(argv.end(), {"--config", dir.sub("config.json")});
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  Process p = Process::Start(argv);
  const int code = p.Wait(seconds(20)).value_or(-1);
  return {code, p.stderr_text()};
}

TEST_F(TlsTest, TheServerRefusesTokensOnAPlaintextListenerOffLoopback) {
  auto [code, err] = StartFails(kTokens, {"--listen", "0.0.0.0:0"});
  EXPECT_EQ(code, 2) << err;
  EXPECT_THAT(err, HasSubstr("token mode without TLS on '0.0.0.0:0'"));
  EXPECT_THAT(err, HasSubstr("would cross the network in clear text"));
  EXPECT_THAT(err, HasSubstr("--tls-cert"));

  // With TLS it serves there.
  TempDir dir;
  std::ofstream(dir.sub("config.json")) << kTokens;
  std::vector<std::string> argv = {ServerBinary(),        "--listen",       "0.0.0.0:0",
                                   "--state-dir",         dir.sub("state"), "--config",
                                   dir.sub("config.json")};
  for (const std::string& flag : ServerTls()) argv.push_back(flag);
  Process p = Process::Start(argv);
  auto line = p.ReadStdoutLine(seconds(20));
  ASSERT_TRUE(line) << p.stderr_text();
  EXPECT_THAT(*line, HasSubstr("ipupodd listening on 0.0.0.0:"));
  EXPECT_THAT(*line, HasSubstr("token mode, TLS)"));
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(seconds(10)), 0);
}

TEST_F(TlsTest, TheServerRefusesBadTlsFilesAtStart) {
  TempDir dir;
  const std::string garbage = dir.sub("garbage.pem");
  std::ofstream(garbage) << "-----BEGIN CERTIFICATE-----\nnonsense\n-----END CERTIFICATE-----\n";
  const struct {
    std::vector<std::string> flags;
    std::string expected;
  } cases[] = {
      {TlsFlags(garbage, certs_->server_key),
       "'" + garbage + "' (tls.cert, --tls-cert) is not a PEM certificate"},
      {TlsFlags(certs_->server_cert, certs_->client_key),
       "is not the key of '" + certs_->server_cert + "'"},
      {TlsFlags(certs_->server_cert, certs_->server_key, dir.sub("no-ca.pem")),
       "no-ca.pem' does not exist"},
      {TlsFlags(certs_->server_cert, certs_->server_key, dir.path()), "is not a regular file"},
      {TlsFlags(certs_->expired_cert, certs_->expired_key), "expired: its notAfter is"},
      {TlsFlags(certs_->server_cert, certs_->encrypted_key), "the key is encrypted"},
  };
  for (const auto& c : cases) {
    auto [code, err] = StartFails(kTokens, c.flags);
    EXPECT_EQ(code, 2) << err;
    EXPECT_THAT(err, HasSubstr(c.expected));
    EXPECT_THAT(err, Not(HasSubstr("Aborted"))) << "an error, not a crash";
  }
}

}  // namespace
}  // namespace ipupod::testing
