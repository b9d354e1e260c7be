#include "common/loopback.h"

#include <gtest/gtest.h>

namespace ipupod {
namespace {

TEST(LoopbackTest, Hosts) {
  for (const char* host :
       {"127.0.0.1", "127.255.0.9", "localhost", "LocalHost", "::1", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"", "0.0.0.0", "10.0.0.1", "::", "[::1]", "localhost.example.org",
                           "128.0.0.1", "::ffff:10.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(LoopbackTest, GrpcTargetsThatStayOnThisMachine) {
  for (const char* target : {"127.0.0.1:50051", "localhost:1", "localhost", "[::1]:50051", "[::1]",
                             "::1", "unix:/run/ipupod.sock", "unix-abstract:ipupod",
                             "dns:localhost:1", "dns:///127.0.0.1:1", "dns://8.8.8.8/localhost:1",
                             "ipv4:127.0.0.1:1", "ipv4:127.0.0.1:1,127.0.0.2:2", "ipv6:[::1]:1"}) {
    EXPECT_TRUE(IsLoopbackTarget(target)) << target;
  }
}

TEST(LoopbackTest, GrpcTargetsThatLeaveIt) {
  for (const char* target :
       {"", "10.255.255.1:1", "pod.example.org:50051", "0.0.0.0:1", "[2001:db8::1]:1",
        "dns:///pod.example.org:1", "dns://127.0.0.1/pod.example.org:1", "dns://127.0.0.1",
        "ipv4:127.0.0.1:1,10.0.0.1:1", "ipv4:", "ipv6:[2001:db8::1]:1", "127.0.0.1.evil.org:1",
        "xds:///ipupod"}) {
    EXPECT_FALSE(IsLoopbackTarget(target)) << target;
  }
}

}  // namespace
}  // namespace ipupod
