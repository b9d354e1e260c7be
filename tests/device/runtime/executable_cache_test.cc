#include "device/runtime/executable_cache.h"

#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"
#include "device/compiler/compile.h"
#include "tests/device/compiler/test_models.h"

namespace ipupod::runtime {
namespace {

using ::testing::HasSubstr;

struct Ipx {
  std::string bytes;
  std::string hash;
  int64_t held = 0;  // what the cache charges for it once parsed
  int64_t size() const { return static_cast<int64_t>(bytes.size()); }
};

// A distinct executable per batch size.
Ipx Make(int64_t batch) {
  auto e = compiler::Compile(compiler::testing::MlpBytes(batch), compiler::IpuConfig(), {});
  EXPECT_TRUE(e.ok()) << e.status();
  auto bytes = compiler::WriteExecutable(*e);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return {*bytes, e->content_hash, ExecutableHeldBytes(*compiler::ReadExecutable(*bytes))};
}

TEST(ExecutableCacheTest, PutThenGetHitsAndUnknownHashMisses) {
  const Ipx a = Make(1);
  ExecutableCache cache(1 << 20);
  auto stored = cache.Put(a.bytes, "alice");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_FALSE(stored->cache_hit);
  EXPECT_EQ(stored->size_bytes, a.size());
  EXPECT_EQ(stored->executable->content_hash, a.hash);
  auto again = cache.Put(a.bytes, "alice");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->cache_hit);
  EXPECT_EQ(again->executable, stored->executable);  // the same object, not a copy
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(cache.used_bytes(), a.held);
  auto got = cache.Get(a.hash, "alice");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->executable, stored->executable);
  const absl::Status miss = cache.Get(std::string(64, '0'), "alice").status();
  EXPECT_EQ(miss.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(miss.message()), HasSubstr("upload it first"));
}

TEST(ExecutableCacheTest, EvictsLeastRecentlyUsedFirst) {
  const Ipx a = Make(1), b = Make(2), c = Make(3);
  ExecutableCache cache(a.held + b.held + c.held - 1);  // room for two of them
  ASSERT_TRUE(cache.Put(a.bytes, "alice").ok());
  ASSERT_TRUE(cache.Put(b.bytes, "alice").ok());
  ASSERT_TRUE(cache.Get(a.hash, "alice").ok());  // b is now the least recently used
  ASSERT_TRUE(cache.Put(c.bytes, "alice").ok());
  EXPECT_EQ(cache.Get(b.hash, "alice").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(cache.Get(a.hash, "alice").ok());
  EXPECT_TRUE(cache.Get(c.hash, "alice").ok());
  EXPECT_EQ(cache.used_bytes(), a.held + c.held);
  ASSERT_TRUE(cache.Put(b.bytes, "alice").ok());  // c was used after a: a goes
  EXPECT_EQ(cache.Get(a.hash, "alice").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache.size(), 2);
}

TEST(ExecutableCacheTest, RejectsFilesLargerThanTheBoundAndMalformedFiles) {
  const Ipx a = Make(1);
  ExecutableCache cache(a.size() - 1);
  const absl::Status big = cache.Put(a.bytes, "alice").status();
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.message()), HasSubstr("--executable-cache-mb"));
  const absl::Status garbage = cache.Put("not an executable", "alice").status();
  EXPECT_EQ(garbage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(garbage.message()), HasSubstr("not an ipupod executable"));
  std::string corrupt = a.bytes.substr(0, a.bytes.size() - 1);
  EXPECT_EQ(cache.Put(corrupt, "alice").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(cache.used_bytes(), 0);
}

TEST(ExecutableCacheTest, EvictionKeepsHandedOutExecutablesAlive) {
  const Ipx a = Make(1), b = Make(2);
  ExecutableCache cache(std::max(a.held, b.held));  // one at a time
  auto held = cache.Put(a.bytes, "alice");
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(cache.Put(b.bytes, "alice").ok());
  EXPECT_EQ(cache.Get(a.hash, "alice").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(held->executable->content_hash, a.hash);  // still valid
  EXPECT_EQ(*compiler::WriteExecutable(*held->executable), a.bytes);
}

TEST(ExecutableCacheTest, ConcurrentPutAndGet) {
  const std::vector<Ipx> ipx = {Make(1), Make(2), Make(3)};
  ExecutableCache cache(ipx[0].held + ipx[1].held);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        const Ipx& x = ipx[(t + i) % 3];
        auto put = cache.Put(x.bytes, "alice");
        EXPECT_TRUE(put.ok()) << put.status();
        if (put.ok()) {
          EXPECT_EQ(put->executable->content_hash, x.hash);
        }
        auto got = cache.Get(ipx[(t + 2 * i) % 3].hash, "alice");  // may have been evicted
        if (got.ok()) {
          EXPECT_EQ(got->executable->content_hash, ipx[(t + 2 * i) % 3].hash);
        }
        EXPECT_LE(cache.used_bytes(), cache.max_bytes());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(cache.size(), 2);
  EXPECT_GE(cache.size(), 1);
}

// Issue 11: the hash is no capability. Another user's Get is NOT_FOUND,
// worded as for a hash never uploaded; uploading the same bytes proves
// possession and adds the user to the one stored copy.
TEST(ExecutableCacheTest, ExecutablesAreScopedToTheUsersWhoUploadedThem) {
  const Ipx a = Make(1);
  ExecutableCache cache(1 << 20);
  ASSERT_TRUE(cache.Put(a.bytes, "alice").ok());
  const absl::Status bobs = cache.Get(a.hash, "bob").status();
  const absl::Status never = cache.Get(std::string(64, '0'), "bob").status();
  EXPECT_EQ(bobs.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(bobs.message()),
            absl::StrReplaceAll(std::string(never.message()), {{std::string(64, '0'), a.hash}}));
  auto uploaded = cache.Put(a.bytes, "bob");
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_TRUE(uploaded->cache_hit);
  EXPECT_TRUE(cache.Get(a.hash, "bob").ok());
  EXPECT_TRUE(cache.Get(a.hash, "alice").ok());
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(cache.used_bytes(), a.held);
}

// Issue 11: an upload's bytes count against the bound as they arrive; a
// declaration is checked first and never allocated.
TEST(ExecutableCacheTest, UploadsInProgressCountAgainstTheBound) {
  ExecutableCache cache(3 << 20);
  auto huge = cache.StartUpload(int64_t{60} << 30);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(huge.status().message(), HasSubstr("more than any executable can be"));
  auto first = cache.StartUpload(2 << 20);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Append(std::string(1 << 20, 'x')).ok());
  EXPECT_EQ(cache.in_flight_bytes(), 1 << 20);
  auto second = cache.StartUpload(2 << 20);  // 2 MiB more do not fit beside the first
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE((*second)->Append(std::string(1 << 20, 'y')).ok());
  ASSERT_TRUE((*first)->Append(std::string(1 << 20, 'x')).ok());
  const absl::Status over = (*second)->Append(std::string(1 << 20, 'y'));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("uploads in progress hold"));
  EXPECT_THAT(over.message(), HasSubstr("--executable-cache-mb"));
  EXPECT_EQ(cache.in_flight_bytes(), 3 << 20);
  first->reset();
  second->reset();
  EXPECT_EQ(cache.in_flight_bytes(), 0);
  EXPECT_EQ(cache.StartUpload(4 << 20).status().code(), absl::StatusCode::kResourceExhausted);
}

// Issue 11: the bound ignored the parsed copy the cache keeps. An entry is
// charged what its parsed executable holds: at least the model bytes, the
// report and every node name of its placement.
TEST(ExecutableCacheTest, TheBoundCountsWhatTheParsedExecutableHolds) {
  const Ipx a = Make(1);
  ExecutableCache cache(1 << 20);
  auto stored = cache.Put(a.bytes, "alice");
  ASSERT_TRUE(stored.ok()) << stored.status();
  const compiler::Executable& e = *stored->executable;
  int64_t names = 0;
  for (const std::string& n : e.placement.node_names) names += sizeof(n) + n.size();
  const int64_t floor = static_cast<int64_t>(e.model_bytes.size() + e.report_json.size()) + names;
  EXPECT_GE(cache.used_bytes(), floor);
  EXPECT_EQ(cache.used_bytes(), ExecutableHeldBytes(e));
}

}  // namespace
}  // namespace ipupod::runtime
