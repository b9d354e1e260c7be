// client/files.h: reading files in bounded pieces and hashing them as the
// jobs' blob store names them.
#include "client/files.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/sha256.h"
#include "tests/support/temp_dir.h"

namespace ipupod::client {
namespace {

using ::testing::HasSubstr;

std::string Bytes(size_t size) {
  std::string bytes(size, '\0');
  uint32_t x = 12345;
  for (char& c : bytes) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  return bytes;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(Sha256OfFileTest, EqualsTheHashOfTheBytesAcrossPieceBoundaries) {
  test_support::TempDir dir;
  for (size_t size : {size_t{1}, kFileChunkBytes - 1, kFileChunkBytes, 3 * kFileChunkBytes,
                      3 * kFileChunkBytes + 7}) {
    const std::string bytes = Bytes(size);
    WriteFile(dir.sub("blob"), bytes);
    absl::StatusOr<FileDigest> digest = Sha256OfFile(dir.sub("blob"), "inputs");
    ASSERT_TRUE(digest.ok()) << digest.status();
    EXPECT_EQ(digest->sha256, DigestHex(Sha256Of(bytes))) << size;
    EXPECT_EQ(digest->size_bytes, size);
  }
}

TEST(Sha256OfFileTest, MissingEmptyAndDirectoryAreRefusedByName) {
  test_support::TempDir dir;
  EXPECT_EQ(Sha256OfFile(dir.sub("none.npz"), "--inputs file").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(Sha256OfFile(dir.sub("none.npz"), "--inputs file").status().message(),
              HasSubstr("--inputs file '"));
  WriteFile(dir.sub("empty"), "");
  EXPECT_EQ(Sha256OfFile(dir.sub("empty"), "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Sha256OfFile(dir.path(), "x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ForEachFileChunkTest, PiecesAreBoundedStartAtTheOffsetAndCanStopEarly) {
  test_support::TempDir dir;
  const std::string bytes = Bytes(2500);
  WriteFile(dir.sub("f"), bytes);
  std::vector<size_t> sizes;
  std::string read;
  ASSERT_TRUE(ForEachFileChunk(dir.sub("f"), "f", 100, 1000, [&](absl::string_view chunk) {
                sizes.push_back(chunk.size());
                read.append(chunk.data(), chunk.size());
                return true;
              }).ok());
  EXPECT_EQ(sizes, (std::vector<size_t>{1000, 1000, 400}));
  EXPECT_EQ(read, bytes.substr(100));
  int calls = 0;
  ASSERT_TRUE(ForEachFileChunk(dir.sub("f"), "f", 0, 1000, [&](absl::string_view) {
                return ++calls < 2;
              }).ok());
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace ipupod::client
