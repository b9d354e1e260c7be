#include "common/format.h"

#include <limits>

#include <gtest/gtest.h>

namespace ipupod {
namespace {

TEST(FormatTest, ClockDurationGetsCoarserAsItGrows) {
  EXPECT_EQ(FormatClockDuration(0), "0s");
  EXPECT_EQ(FormatClockDuration(-5), "0s");
  EXPECT_EQ(FormatClockDuration(std::numeric_limits<double>::quiet_NaN()), "0s");
  EXPECT_EQ(FormatClockDuration(0.42), "0.4s");
  EXPECT_EQ(FormatClockDuration(12.7), "12s");
  EXPECT_EQ(FormatClockDuration(184), "3m04s");
  EXPECT_EQ(FormatClockDuration(7500), "2h05m");
}

TEST(FormatTest, SiDurationPicksThePrefix) {
  EXPECT_EQ(FormatSiDuration(12.3e-6), "12.3 us");
  EXPECT_EQ(FormatSiDuration(4.56e-3), "4.56 ms");
  EXPECT_EQ(FormatSiDuration(1.2), "1.20 s");
  EXPECT_EQ(FormatSiDuration(184), "184.00 s");
}

TEST(FormatTest, BytesTrimmedUseThreeDigits) {
  EXPECT_EQ(FormatBytesTrimmed(0), "0 B");
  EXPECT_EQ(FormatBytesTrimmed(999), "999 B");
  EXPECT_EQ(FormatBytesTrimmed(1500), "1.5 kB");
  EXPECT_EQ(FormatBytesTrimmed(900000000), "900 MB");
  EXPECT_EQ(FormatBytesTrimmed(12500000), "12.5 MB");
  EXPECT_EQ(FormatBytesTrimmed(999999), "1 MB");
  EXPECT_EQ(FormatBytesTrimmed(3520000000), "3.52 GB");
  EXPECT_EQ(FormatBytesTrimmed(~0ull), "18.4 EB");
}

TEST(FormatTest, BytesFixedKeepTheirDecimals) {
  EXPECT_EQ(FormatBytesFixed(17), "17 B");
  EXPECT_EQ(FormatBytesFixed(12'300), "12.3 kB");
  EXPECT_EQ(FormatBytesFixed(900'000'000), "900.0 MB");
  EXPECT_EQ(FormatBytesFixed(2'170'000'000), "2.17 GB");
}

TEST(FormatTest, ElideMiddleKeepsBothEndsWithinTheBound) {
  EXPECT_EQ(ElideMiddle("session-1", 40), "session-1");
  const std::string name = std::string(5000, 'a') + std::string(5000, 'z');
  const std::string elided = ElideMiddle(name, 80);
  EXPECT_EQ(elided.size(), 80u);
  EXPECT_EQ(elided.front(), 'a');
  EXPECT_EQ(elided.back(), 'z');
  EXPECT_NE(elided.find("...(10000 characters)..."), std::string::npos);
  EXPECT_EQ(EchoName(name), elided);
}

}  // namespace
}  // namespace ipupod
