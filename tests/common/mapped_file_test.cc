#include "common/mapped_file.h"

#include <fstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace ipupod {
namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(MappedFileTest, HoldsTheFilesBytesWhileItLivesAndMoves) {
  test_support::TempDir dir;
  const std::string path = dir.path() + "/f.bin";
  std::string bytes(3 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + (i >> 13));
  Write(path, bytes);
  absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), bytes.size());
  EXPECT_EQ(file->bytes(), bytes);
  MappedFile moved = *std::move(file);
  EXPECT_EQ(moved.bytes(), bytes);
  EXPECT_TRUE(file->bytes().empty());  // NOLINT(bugprone-use-after-move): the moved-from state
  // A file replaced by rename (how every writer in ipupod replaces one)
  // leaves the mapping's bytes as they were.
  Write(path + ".new", "other");
  std::rename((path + ".new").c_str(), path.c_str());
  EXPECT_EQ(moved.bytes(), bytes);
}

TEST(MappedFileTest, AnEmptyFileIsAnEmptyView) {
  test_support::TempDir dir;
  Write(dir.path() + "/empty", "");
  absl::StatusOr<MappedFile> file = MappedFile::Open(dir.path() + "/empty");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 0u);
  EXPECT_TRUE(file->bytes().empty());
}

TEST(MappedFileTest, WhatCannotBeMappedIsAClearError) {
  test_support::TempDir dir;
  absl::StatusOr<MappedFile> missing = MappedFile::Open(dir.path() + "/none");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no such file"), absl::string_view::npos);
  absl::StatusOr<MappedFile> directory = MappedFile::Open(dir.path());
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(directory.status().message().find("a directory"), absl::string_view::npos);
}

}  // namespace
}  // namespace ipupod
