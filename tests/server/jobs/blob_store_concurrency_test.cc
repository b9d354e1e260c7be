// The blob store under concurrent callers: uploads of the same bytes by
// several threads end with one stored file, and Sweep running all the time
// never deletes a blob while a job references it.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/jobs/blob_store.h"
#include "tests/server/jobs/blob_store_util.h"
#include "tests/support/temp_dir.h"

namespace ipupod::jobs {
namespace {

using test_support::TempDir;
using ::testing::ElementsAre;

using testing::DirNames;
using testing::Put;
using testing::ReadFile;
using testing::Sha;

std::string Content(int seed, size_t size) {
  std::string content(size, '\0');
  for (size_t i = 0; i < size; ++i) content[i] = static_cast<char>((i * 131 + seed * 7) % 251);
  return content;
}

TEST(BlobStoreConcurrencyTest, FourThreadsUploadingOneBlobStoreOneFile) {
  TempDir tmp;
  auto opened = BlobStore::Open(tmp.sub("blobs"), BlobStoreLimits{});
  ASSERT_TRUE(opened.ok()) << opened.status();
  BlobStore& store = **opened;
  for (int round = 0; round < 5; ++round) {
    const std::string content = Content(round, (1 << 20) + 17);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&store, &content, t] {
        auto size = Put(store, absl::StrCat("user", t), content, 64 << 10);
        EXPECT_TRUE(size.ok()) << size.status();
        EXPECT_EQ(size.value_or(0), content.size());
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(store.Stat(absl::StrCat("user", t), Sha(content)), content.size());
    }
    EXPECT_EQ(ReadFile(store.PathOf(Sha(content))), content);
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(store.UsageOf(absl::StrCat("user", t)).user_blobs,
                static_cast<uint64_t>(round + 1));
    }
  }
  const std::vector<std::string> names = DirNames(tmp.sub("blobs"));
  EXPECT_EQ(names.size(), 6u) << "5 blobs and the lock, no temporary file";
  const BlobUsage usage = store.UsageOf("user0");
  EXPECT_EQ(usage.stored_blobs, 5u);
  EXPECT_EQ(usage.total_bytes, 5u * ((1 << 20) + 17));
  EXPECT_EQ(usage.uploads, 0u);
}

// Uploads `content`, references it as job `holder` and checks that the file
// is complete while referenced. A Sweep between the upload and the reference
// may delete it (the hold is zero): then Reference is NOT_FOUND.
void UploadReferenceRelease(BlobStore& store, const std::string& user, const std::string& holder,
                            const std::string& content) {
  auto size = Put(store, user, content, 4096);
  ASSERT_TRUE(size.ok()) << size.status();
  const std::string sha = Sha(content);
  absl::Status status = store.Reference(holder, user, {sha});
  if (status.code() == absl::StatusCode::kNotFound) return;
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadFile(store.PathOf(sha)), content) << "a referenced blob was swept";
  store.Release(holder);
}

TEST(BlobStoreConcurrencyTest, SweepNeverDeletesAReferencedBlob) {
  TempDir tmp;
  BlobStoreLimits limits;
  limits.upload_hold = absl::ZeroDuration();  // every unreferenced blob may go at once
  auto opened = BlobStore::Open(tmp.sub("blobs"), limits);
  ASSERT_TRUE(opened.ok()) << opened.status();
  BlobStore& store = **opened;
  const std::vector<std::string> contents = {Content(1, 50000), Content(2, 30000)};
  std::atomic<bool> done{false};
  std::thread sweeper([&] {
    while (!done.load()) store.Sweep();
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        UploadReferenceRelease(store, absl::StrCat("user", t % 2), absl::StrCat("job", t, ".", i),
                               contents[(t + i) % 2]);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done.store(true);
  sweeper.join();
  store.Sweep();
  EXPECT_THAT(DirNames(tmp.sub("blobs")), ElementsAre("lock"));
  const BlobUsage usage = store.UsageOf("user0");
  EXPECT_EQ(usage.total_bytes, 0u);
  EXPECT_EQ(usage.user_bytes, 0u);
  EXPECT_EQ(usage.uploads, 0u);
}

}  // namespace
}  // namespace ipupod::jobs
