#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/eventually.h"
#include "tests/support/temp_dir.h"

namespace ipupod::test_support {
namespace {

TEST(TempDirTest, IsFreshAndRemovedWithItsFiles) {
  std::string path;
  {
    TempDir a;
    TempDir b;
    path = a.path();
    EXPECT_NE(a.path(), b.path());
    ASSERT_TRUE(std::filesystem::is_directory(path));
    EXPECT_TRUE(std::filesystem::is_empty(path));
    std::ofstream(a.sub("file.txt")) << "x";
    EXPECT_TRUE(std::filesystem::exists(path + "/file.txt"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(EventuallyTest, ReturnsOnceTheConditionHolds) {
  std::atomic<bool> flag{false};
  std::thread setter([&] { flag = true; });
  EXPECT_TRUE(Eventually([&] { return flag.load(); }));
  setter.join();
}

TEST(EventuallyTest, GivesUpAtTheDeadline) {
  int calls = 0;
  const absl::Time start = absl::Now();
  EXPECT_FALSE(Eventually(
      [&] {
        ++calls;
        return false;
      },
      absl::Milliseconds(50), absl::Milliseconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_GE(calls, 2) << "polled, then checked once more at the deadline";
}

}  // namespace
}  // namespace ipupod::test_support
