#include "client/grpc_status.h"

#include <list>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/errors.h"
#include "common/wire/tensor_stream.h"

namespace ipupod::client {
namespace {

using ::testing::HasSubstr;

// Owns the strings the string_refs of a GrpcMetadata point into.
class Trailers {
 public:
  Trailers& Add(std::string key, std::string value) {
    storage_.emplace_back(std::move(key), std::move(value));
    return *this;
  }
  GrpcMetadata Get() const {
    GrpcMetadata m;
    for (const auto& [k, v] : storage_) m.emplace(grpc::string_ref(k), grpc::string_ref(v));
    return m;
  }

 private:
  std::list<std::pair<std::string, std::string>> storage_;
};

TEST(GrpcStatusTest, OkStaysOk) { EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, {}).ok()); }

TEST(GrpcStatusTest, KeepsCodeAndMessage) {
  absl::Status s =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no 8 IPUs free"), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "no 8 IPUs free");
  EXPECT_FALSE(s.GetPayload(kErrorKindPayload));
}

TEST(GrpcStatusTest, DeviceErrorTrailersBecomePayloads) {
  Trailers t;
  t.Add("ipupod-error-kind", "recoverable")
      .Add("ipupod-recovery-action", "LINK_RESET")
      .Add("ipupod-ipus", "4,5");
  absl::Status s = FromGrpcStatus(grpc::Status(grpc::StatusCode::ABORTED, "links down"), t.Get());
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(GetErrorKind(s), ErrorKind::kRecoverable);
  EXPECT_EQ(GetRecoveryAction(s), RecoveryAction::kLinkReset);
  EXPECT_EQ(GetErrorIpus(s), (std::vector<int>{4, 5}));
}

TEST(GrpcStatusTest, UnrecoverableAndUnknownValues) {
  Trailers t;
  t.Add("ipupod-error-kind", "unrecoverable").Add("ipupod-recovery-action", "REBOOT");
  absl::Status s = FromGrpcStatus(grpc::Status(grpc::StatusCode::DATA_LOSS, "gone"), t.Get());
  EXPECT_EQ(GetErrorKind(s), ErrorKind::kUnrecoverable);
  EXPECT_EQ(GetRecoveryAction(s), RecoveryAction::kNone) << "unknown actions are dropped";
  EXPECT_TRUE(GetErrorIpus(s).empty());
}

TEST(GrpcStatusTest, TransportFailuresAreRecognised) {
  grpc::Status refused(grpc::StatusCode::UNAVAILABLE,
                       "failed to connect to all addresses; last error: UNKNOWN: "
                       "ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused");
  EXPECT_TRUE(IsTransportFailure(refused, {}));
  EXPECT_TRUE(IsTransportFailure(grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed"), {}));
  // ipupodd's own UNAVAILABLE ("retry in a moment") is not the transport.
  EXPECT_FALSE(IsTransportFailure(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "IPU 4 is resetting; retry in a moment"), {}));
  Trailers t;
  t.Add("ipupod-error-kind", "application");
  EXPECT_FALSE(
      IsTransportFailure(grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed"), t.Get()));
  EXPECT_FALSE(IsTransportFailure(grpc::Status(grpc::StatusCode::INTERNAL, "Socket closed"), {}));
}

TEST(GrpcStatusTest, ConvertCallStatusExplainsUnreachableServers) {
  absl::Status s = ConvertCallStatus(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect to all addresses"), {},
      {"127.0.0.1:1", "GetPodInfo", absl::Seconds(30)});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("cannot reach ipupodd at 127.0.0.1:1: failed to connect"));
  EXPECT_THAT(s.message(), HasSubstr("is it running?"));
  EXPECT_THAT(s.message(), HasSubstr("ipupodd --listen 127.0.0.1:1"));
}

// What gRPC 1.51 with OpenSSL 3 reports for each failed handshake (seen in
// tests/integration/tls_test.cc against a real ipupodd).
constexpr const char* kWrongCa =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:35523: Ssl "
    "handshake failed: SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify failed";
constexpr const char* kNameMismatch =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:34605: Peer name "
    "127.0.0.1 is not in peer certificate";
constexpr const char* kPlaintextServer =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:37377: Ssl "
    "handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number";
constexpr const char* kClosedWhileConnecting =
    "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:45031: Socket "
    "closed";

absl::Status Convert(const char* detail, absl::string_view tls_ca, bool client_certificate) {
  return ConvertCallStatus(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, detail), {},
      {"127.0.0.1:7", "GetPodInfo", absl::Seconds(30), tls_ca, client_certificate});
}

TEST(GrpcStatusTest, FailedHandshakesAreUnauthenticatedAndSayWhy) {
  absl::Status wrong_ca = Convert(kWrongCa, "/etc/ca.pem", false);
  EXPECT_EQ(wrong_ca.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(wrong_ca.message(),
              HasSubstr("TLS handshake with 127.0.0.1:7 failed: the server's certificate is not "
                        "signed by the CA in --tls-ca '/etc/ca.pem'"));
  EXPECT_THAT(wrong_ca.message(), HasSubstr("certificate verify failed")) << "gRPC's detail kept";

  absl::Status mismatch = Convert(kNameMismatch, "/etc/ca.pem", false);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(mismatch.message(), HasSubstr("does not name 127.0.0.1:7"));
  EXPECT_THAT(mismatch.message(), HasSubstr("subjectAltName"));

  absl::Status plaintext = Convert(kPlaintextServer, "/etc/ca.pem", false);
  EXPECT_EQ(plaintext.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(plaintext.message(), HasSubstr("the server does not speak TLS"));
  EXPECT_THAT(plaintext.message(), HasSubstr("leave out --tls-ca"));
}

TEST(GrpcStatusTest, AConnectionClosedWhileConnectingHintsAtTls) {
  absl::Status plaintext_client = Convert(kClosedWhileConnecting, "", false);
  EXPECT_EQ(plaintext_client.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(plaintext_client.message(), HasSubstr("cannot reach ipupodd at 127.0.0.1:7"));
  EXPECT_THAT(plaintext_client.message(), HasSubstr("if it serves TLS, pass --tls-ca FILE"));

  absl::Status no_client_cert = Convert(kClosedWhileConnecting, "/etc/ca.pem", false);
  EXPECT_EQ(no_client_cert.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(no_client_cert.message(), HasSubstr("requires a client certificate (mutual TLS)"));
  EXPECT_THAT(no_client_cert.message(), HasSubstr("--tls-cert FILE and --tls-key FILE"));

  absl::Status refused_cert = Convert(kClosedWhileConnecting, "/etc/ca.pem", true);
  EXPECT_THAT(refused_cert.message(), HasSubstr("may not accept the client certificate"));

  // Without TLS a handshake phrase means nothing special: gRPC's text, as before.
  absl::Status plain = Convert(kWrongCa, "", false);
  EXPECT_EQ(plain.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(plain.message(), HasSubstr("cannot reach ipupodd"));
}

TEST(GrpcStatusTest, ConvertCallStatusNamesTheMethodOnClientDeadline) {
  absl::Status s =
      ConvertCallStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"), {},
                        {"127.0.0.1:5", "ListQueue", absl::Seconds(2)});
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("did not answer ListQueue within 2s"));
  EXPECT_THAT(s.message(), HasSubstr("--timeout"));
  // A server-chosen DEADLINE_EXCEEDED (the wait timeout) keeps its text.
  absl::Status waited =
      ConvertCallStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "waited 1s for 4 IPUs"),
                        {}, {"127.0.0.1:5", "Attach", absl::Seconds(2)});
  EXPECT_EQ(waited.message(), "waited 1s for 4 IPUs");
}

TEST(GrpcStatusTest, ConnectionLostSaysTheSessionEnded) {
  absl::Status s = ConnectionLostError("s1-2");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("connection to ipupodd lost; session s1-2 has ended and its "
                                     "IPUs were released (sessions do not survive a server "
                                     "restart)"));
}

TEST(GrpcStatusTest, CodeNames) {
  EXPECT_EQ(StatusCodeName(absl::StatusCode::kResourceExhausted), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(StatusCodeName(absl::StatusCode::kDataLoss), "DATA_LOSS");
}

// A malformed stream from ipupodd is the server's fault: INTERNAL at the
// client edge (moved from run_steps_test's ContractViolationsAreInternal).
TEST(GrpcStatusTest, ContractViolationsFromTheServerAreInternal) {
  const tensor::Tensor four = *tensor::Tensor::Create(tensor::DType::kFloat32, {4});
  const tensor::Tensor one = *tensor::Tensor::Create(tensor::DType::kFloat32, {1});
  wire::TensorAssembler early("outputs");
  EXPECT_EQ(ServerStreamError(early.AddData("x")).code(), absl::StatusCode::kInternal);
  wire::TensorAssembler short_data("outputs");
  ASSERT_TRUE(short_data.AddHeader(wire::TensorHeaderOf("t", four)).ok());
  ASSERT_TRUE(short_data.AddData("abcd").ok());
  EXPECT_EQ(ServerStreamError(short_data.Finish().status()).code(), absl::StatusCode::kInternal);
  wire::TensorAssembler too_much("outputs");
  ASSERT_TRUE(too_much.AddHeader(wire::TensorHeaderOf("t", one)).ok());
  EXPECT_EQ(ServerStreamError(too_much.AddData("abcdefgh")).code(), absl::StatusCode::kInternal);
  v1::TensorHeader lying = wire::TensorHeaderOf("t", four);
  lying.set_total_bytes(3);
  wire::TensorAssembler bad_header("outputs");
  const absl::Status bad = ServerStreamError(bad_header.AddHeader(lying));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("ipupodd sent"));
  EXPECT_EQ(ServerStreamError(absl::ResourceExhaustedError("oom")).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(tensor::ParseDTypeName("bfloat16").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::client
