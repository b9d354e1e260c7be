// The test-only write faults: the spec's parsing and errors, and a failed
// write at each point reachable in-process changing nothing.
#include "server/store/write_points.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/sqlite_state_store.h"
#include "tests/support/temp_dir.h"

namespace ipupod::store {
namespace {

using ::testing::HasSubstr;

TEST(WritePointsTest, ParsesPointCountAndAction) {
  auto fault = ParseWriteFault("put_partition:3:crash-after");
  ASSERT_TRUE(fault.ok()) << fault.status();
  EXPECT_EQ(fault->point, WritePoint::kPutPartition);
  EXPECT_EQ(fault->nth, 3);
  EXPECT_EQ(fault->action, FaultAction::kCrashAfterCommit);
  for (WritePoint p : kAllWritePoints) {
    auto parsed = ParseWriteFault(std::string(WritePointName(p)) + ":1:fail");
    ASSERT_TRUE(parsed.ok()) << WritePointName(p);
    EXPECT_EQ(parsed->point, p);
  }
}

TEST(WritePointsTest, MalformedSpecIsInvalidArgumentNamingTheChoices) {
  for (const char* bad : {"", "put_partition", "nowhere:1:fail", "put_partition:0:fail",
                          "put_partition:x:fail", "put_partition:1:explode", "a:b:c:d"}) {
    auto fault = ParseWriteFault(bad);
    ASSERT_FALSE(fault.ok()) << bad;
    EXPECT_EQ(fault.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(fault.status().message(), HasSubstr("IPUPOD_TEST_STORE_FAULT")) << bad;
    EXPECT_THAT(fault.status().message(), HasSubstr("delete_failure")) << bad;
    EXPECT_THAT(fault.status().message(), HasSubstr("crash-before")) << bad;
  }
}

absl::Status WriteAt(SqliteStateStore& store, WritePoint point) {
  switch (point) {
    case WritePoint::kBootCount:
      return store.NextBootId().status();
    case WritePoint::kPutPartition:
      return store.PutPartition({"new", 8, 1, "bob", 1});
    case WritePoint::kDeletePartition:
      return store.DeletePartition("old");
    case WritePoint::kPutFailure:
      return store.PutFailure({9, "new"});
    case WritePoint::kDeleteFailure:
      return store.DeleteFailure(3);
    default:
      return absl::OkStatus();
  }
}

TEST(WritePointsTest, TheNthWriteFailsUnavailableAndChangesNothing) {
  for (WritePoint point :
       {WritePoint::kBootCount, WritePoint::kPutPartition, WritePoint::kDeletePartition,
        WritePoint::kPutFailure, WritePoint::kDeleteFailure}) {
    test_support::TempDir dir;
    {
      auto store = SqliteStateStore::Open(dir.path());
      ASSERT_TRUE(store.ok());
      ASSERT_TRUE((*store)->PutPartition({"old", 0, 4, "alice", 1}).ok());
      ASSERT_TRUE((*store)->PutFailure({3, "old"}).ok());
    }
    StoreOptions options;
    options.fault = WriteFault{point, 2, FaultAction::kFail};
    auto store = SqliteStateStore::Open(dir.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE(WriteAt(**store, point).ok()) << "the first write is not the second";
    if (point == WritePoint::kDeletePartition) {
      ASSERT_TRUE((*store)->PutPartition({"old", 0, 4, "alice", 1}).ok());
    }
    if (point == WritePoint::kDeleteFailure) {
      ASSERT_TRUE((*store)->PutFailure({3, "old"}).ok());
    }
    auto before = (*store)->Load();
    absl::Status status = WriteAt(**store, point);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << WritePointName(point);
    EXPECT_THAT(status.message(), HasSubstr("injected failure")) << WritePointName(point);
    auto after = (*store)->Load();
    ASSERT_TRUE(before.ok() && after.ok());
    EXPECT_EQ(after->partitions.size(), before->partitions.size()) << WritePointName(point);
    EXPECT_EQ(after->failures.size(), before->failures.size()) << WritePointName(point);
    EXPECT_TRUE(WriteAt(**store, point).ok()) << "the fault fires once; the store still works";
  }
}

}  // namespace
}  // namespace ipupod::store
