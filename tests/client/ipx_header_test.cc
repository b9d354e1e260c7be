// client/ipx_header.h reads what device/compiler/executable.h writes: the client
// library keeps its own copy of the header layout so it links no compiler;
// this test (which may link both) keeps the two in step.
#include "client/ipx_header.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/sha256.h"
#include "device/compiler/executable.h"

namespace ipupod::client {
namespace {

using ::testing::HasSubstr;

TEST(IpxHeaderTest, ConstantsMatchTheCompiler) {
  EXPECT_EQ(kIpxMagic, compiler::kExecutableMagic);
  EXPECT_EQ(kIpxFormatVersion, compiler::kExecutableFormatVersion);
  EXPECT_EQ(kIpxHeaderBytes, compiler::kExecutableHeaderBytes);
}

std::string SampleIpx() {
  compiler::Executable e;
  e.producer = "ipupod test";
  e.model_bytes = "model bytes";
  absl::StatusOr<std::string> bytes = compiler::WriteExecutable(e);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

TEST(IpxHeaderTest, ReadsTheHashTheCompilerWrote) {
  // The hash covers the payload, everything after the header.
  const std::string ipx = SampleIpx();
  absl::StatusOr<std::string> hash = IpxContentHash(ipx);
  ASSERT_TRUE(hash.ok()) << hash.status();
  EXPECT_EQ(*hash, DigestHex(Sha256Of(ipx.substr(kIpxHeaderBytes))));
}

TEST(IpxHeaderTest, RejectsOtherFilesAndVersions) {
  absl::Status short_file = IpxContentHash("\x89IPX").status();
  EXPECT_EQ(short_file.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(short_file.message()), HasSubstr("not an ipupod executable"));
  std::string ipx = SampleIpx();
  ipx[0] = 'P';
  EXPECT_THAT(std::string(IpxContentHash(ipx).status().message()),
              HasSubstr("not an ipupod executable"));
  ipx = SampleIpx();
  ipx[kIpxVersionOffset] = 3;
  absl::Status version = IpxContentHash(ipx).status();
  EXPECT_EQ(version.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(version.message()),
              HasSubstr("executable format 3 but this ipupod reads 1"));
}

}  // namespace
}  // namespace ipupod::client
