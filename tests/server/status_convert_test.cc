#include "server/status_convert.h"

#include <map>

#include "absl/strings/match.h"
#include "common/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ipupod::server {
namespace {

std::map<std::string, std::string> Trailers(const ConvertedStatus& c) {
  return {c.trailers.begin(), c.trailers.end()};
}

TEST(StatusConvertTest, OkHasNoTrailers) {
  ConvertedStatus c = ConvertStatus(absl::OkStatus());
  EXPECT_TRUE(c.status.ok());
  EXPECT_TRUE(c.trailers.empty());
}

TEST(StatusConvertTest, CodesAndMessagesCarryOver) {
  const absl::StatusCode codes[] = {
      absl::StatusCode::kCancelled,          absl::StatusCode::kUnknown,
      absl::StatusCode::kInvalidArgument,    absl::StatusCode::kDeadlineExceeded,
      absl::StatusCode::kNotFound,           absl::StatusCode::kAlreadyExists,
      absl::StatusCode::kPermissionDenied,   absl::StatusCode::kResourceExhausted,
      absl::StatusCode::kFailedPrecondition, absl::StatusCode::kAborted,
      absl::StatusCode::kOutOfRange,         absl::StatusCode::kUnimplemented,
      absl::StatusCode::kInternal,           absl::StatusCode::kUnavailable,
      absl::StatusCode::kDataLoss,           absl::StatusCode::kUnauthenticated};
  for (absl::StatusCode code : codes) {
    ConvertedStatus c = ConvertStatus(absl::Status(code, "why and what to do"));
    EXPECT_EQ(static_cast<int>(c.status.error_code()), static_cast<int>(code));
    EXPECT_EQ(c.status.error_message(), "why and what to do");
  }
  EXPECT_EQ(grpc::StatusCode::PERMISSION_DENIED,
            static_cast<grpc::StatusCode>(absl::StatusCode::kPermissionDenied));
}

TEST(StatusConvertTest, UnclassifiedErrorReadsAsApplication) {
  ConvertedStatus c = ConvertStatus(absl::NotFoundError("no partition 'p'"));
  auto t = Trailers(c);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t["ipupod-error-kind"], "application");
}

TEST(StatusConvertTest, RecoverableErrorCarriesKindActionAndIpus) {
  ConvertedStatus c =
      ConvertStatus(RecoverableError(RecoveryAction::kIpuReset, {3, 5}, "IPU 3 faulted"));
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::ABORTED);
  auto t = Trailers(c);
  EXPECT_EQ(t["ipupod-error-kind"], "recoverable");
  EXPECT_EQ(t["ipupod-recovery-action"], "IPU_RESET");
  EXPECT_EQ(t["ipupod-ipus"], "3,5");
}

TEST(StatusConvertTest, UnrecoverableErrorHasNoAction) {
  ConvertedStatus c = ConvertStatus(UnrecoverableError({9}, "IPU 9 failed"));
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::DATA_LOSS);
  auto t = Trailers(c);
  EXPECT_EQ(t["ipupod-error-kind"], "unrecoverable");
  EXPECT_EQ(t.count("ipupod-recovery-action"), 0u);
  EXPECT_EQ(t["ipupod-ipus"], "9");
}

TEST(StatusConvertTest, TrailersRoundTripThroughTheClientsParser) {
  absl::Status original = RecoverableError(RecoveryAction::kPartitionReset, {4, 5, 6, 7}, "x");
  auto t = Trailers(ConvertStatus(original));
  absl::Status rebuilt(absl::StatusCode::kAborted, "x");
  SetErrorPayloads(rebuilt, t["ipupod-error-kind"], t["ipupod-recovery-action"], t["ipupod-ipus"]);
  EXPECT_EQ(GetErrorKind(rebuilt), ErrorKind::kRecoverable);
  EXPECT_EQ(GetRecoveryAction(rebuilt), RecoveryAction::kPartitionReset);
  EXPECT_EQ(GetErrorIpus(rebuilt), (std::vector<int>{4, 5, 6, 7}));
}

// Issue 11: a message that echoed a client's 10,000-character name made
// gRPC refuse to send it; the conversion caps every message.
TEST(StatusConvertTest, OverlongMessagesAreShortenedInTheMiddle) {
  const std::string message = "session " + std::string(10'000, 'n') + " does not exist";
  const ConvertedStatus converted = ConvertStatus(absl::NotFoundError(message));
  EXPECT_EQ(converted.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(converted.status.error_message().size(), kStatusMessageCharsMax);
  EXPECT_EQ(converted.status.error_message().substr(0, 8), "session ");
  EXPECT_TRUE(absl::EndsWith(converted.status.error_message(), " does not exist"));
}

}  // namespace
}  // namespace ipupod::server
