// Which outgoing statuses of a call whose request gRPC could not read are
// parse failures (server/request_parse_errors.h). The CI's Release run once
// saw a burst's "Server Threadpool Exhausted" refusals reach clients as
// INVALID_ARGUMENT "the request did not parse": a refused call never reads
// its request either.
#include "server/request_parse_errors.h"

#include <gtest/gtest.h>

namespace ipupod::server {
namespace {

TEST(RequestParseErrorsTest, WhatGrpcSendsForAnUnparsableRequestIsAParseFailure) {
  EXPECT_TRUE(IsParseFailureStatus(grpc::Status(grpc::StatusCode::INTERNAL, "")));
  EXPECT_TRUE(IsParseFailureStatus(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "")));
}

TEST(RequestParseErrorsTest, TheSyncPoolsRefusalOfABurstStaysARefusal) {
  EXPECT_FALSE(IsParseFailureStatus(
      grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "Server Threadpool Exhausted")));
}

}  // namespace
}  // namespace ipupod::server
