// The jobs' blob store: uploads stored under their hash, verified, bounded
// per user, in total and per blob (refusals store nothing), shared blobs
// counted once, job references, sweeping with a test clock, and reopening a
// directory a killed server left behind.
#include "server/jobs/blob_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/jobs/blob_store_util.h"
#include "tests/support/temp_dir.h"

namespace ipupod::jobs {
namespace {

using test_support::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

using testing::DirNames;
using testing::Put;
using testing::ReadFile;
using testing::Sha;

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

BlobStoreLimits SmallLimits() {
  BlobStoreLimits limits;
  limits.max_total_bytes = 100;
  limits.max_user_bytes = 100;
  limits.max_blob_bytes = 100;
  limits.upload_hold = absl::Hours(1);
  return limits;
}

class BlobStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<BlobStore> Open(BlobStoreLimits limits = {}) {
    auto store = BlobStore::Open(dir(), limits, [this] { return now_; });
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  std::string dir() const { return tmp_.sub("blobs"); }

  TempDir tmp_;
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
};

TEST_F(BlobStoreTest, AnUploadIsStoredUnderItsHash) {
  auto store = Open();
  const std::string content = "the bytes of an executable, in several chunks";
  const std::string sha = Sha(content);
  auto size = Put(*store, "alice", content);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, content.size());
  EXPECT_EQ(store->Stat("alice", sha), content.size());
  EXPECT_EQ(store->PathOf(sha), std::filesystem::path(dir()) / sha);
  EXPECT_EQ(ReadFile(store->PathOf(sha)), content);
  EXPECT_THAT(DirNames(dir()), ElementsAre(sha, "lock"));
  const BlobUsage usage = store->UsageOf("alice");
  EXPECT_EQ(usage.total_bytes, content.size());
  EXPECT_EQ(usage.stored_blobs, 1u);
  EXPECT_EQ(usage.uploads, 0u);
  EXPECT_EQ(usage.user_bytes, content.size());
  EXPECT_EQ(usage.user_blobs, 1u);
  EXPECT_EQ(store->UsageOf("bob").user_bytes, 0u);
  EXPECT_FALSE(store->Stat("alice", Sha("never uploaded")).has_value());
  EXPECT_EQ(store->PathOf("../../etc/passwd"), std::filesystem::path());
  // The empty file is a blob too.
  auto empty = Put(*store, "alice", "");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(store->Stat("alice", Sha("")), 0u);
}

TEST_F(BlobStoreTest, AnOwnersUploadOfAStoredBlobTakesNoDataAndChargesThem) {
  auto store = Open();
  const std::string content = "shared data set";
  ASSERT_TRUE(Put(*store, "alice", content).ok());
  ASSERT_TRUE(Put(*store, "bob", content).ok());  // bob sends the bytes: now an owner too
  now_ += absl::Hours(2);                         // bob's upload hold has passed
  ASSERT_TRUE(store->Reference("job", "alice", {Sha(content)}).ok());  // kept by alice's job
  EXPECT_EQ(store->UsageOf("bob").user_bytes, 0u);
  auto upload = store->BeginUpload("bob", Sha(content), content.size());
  ASSERT_TRUE(upload.ok()) << upload.status();
  EXPECT_TRUE((*upload)->already_stored());
  EXPECT_EQ((*upload)->Append("x").code(), absl::StatusCode::kInvalidArgument);
  auto committed = (*upload)->Commit();
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_EQ(*committed, content.size());
  EXPECT_EQ((*upload)->Commit().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->UsageOf("bob").user_bytes, content.size());
  EXPECT_EQ(store->UsageOf("bob").total_bytes, content.size());

  auto wrong_size = store->BeginUpload("bob", Sha(content), content.size() + 1);
  EXPECT_EQ(wrong_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_size.status().message(),
              HasSubstr(absl::StrCat("is stored with ", content.size(), " bytes")));
}

TEST_F(BlobStoreTest, BytesThatDoNotHashToTheNameAreDataLossAndLeaveNothing) {
  auto store = Open();
  const std::string claimed = Sha("what the client hashed");
  auto upload = store->BeginUpload("alice", claimed, 5);
  ASSERT_TRUE(upload.ok()) << upload.status();
  ASSERT_TRUE((*upload)->Append("other").ok());
  EXPECT_EQ(store->UsageOf("alice").uploads, 1u);
  auto committed = (*upload)->Commit();
  EXPECT_EQ(committed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(committed.status().message(),
              AllOf(HasSubstr("do not hash to " + claimed), HasSubstr("upload again")));
  EXPECT_FALSE(store->Stat("alice", claimed).has_value());
  EXPECT_THAT(DirNames(dir()), ElementsAre("lock"));
  const BlobUsage usage = store->UsageOf("alice");
  EXPECT_EQ(usage.total_bytes, 0u);
  EXPECT_EQ(usage.user_bytes, 0u);
  EXPECT_EQ(usage.uploads, 0u);
}

TEST_F(BlobStoreTest, MoreOrFewerBytesThanDeclaredAreInvalidArgument) {
  auto store = Open();
  auto upload = store->BeginUpload("alice", Sha("abcdef"), 6);
  ASSERT_TRUE(upload.ok()) << upload.status();
  ASSERT_TRUE((*upload)->Append("abcd").ok());
  absl::Status too_many = (*upload)->Append("efg");
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.message(), HasSubstr("declared 6 bytes, but 4 + 3 bytes arrived"));
  EXPECT_EQ((*upload)->bytes_received(), 4u);  // nothing of the refused chunk was written
  ASSERT_TRUE((*upload)->Append("ef").ok());
  ASSERT_TRUE((*upload)->Commit().ok());
  EXPECT_EQ(ReadFile(store->PathOf(Sha("abcdef"))), "abcdef");

  auto short_upload = store->BeginUpload("alice", Sha("xyz"), 3);
  ASSERT_TRUE(short_upload.ok()) << short_upload.status();
  ASSERT_TRUE((*short_upload)->Append("xy").ok());
  auto committed = (*short_upload)->Commit();
  EXPECT_EQ(committed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(committed.status().message(), HasSubstr("ended after 2 of its declared 3 bytes"));
  EXPECT_THAT(DirNames(dir()), ElementsAre(Sha("abcdef"), "lock"));
  EXPECT_EQ(store->UsageOf("alice").uploads, 0u);
}

TEST_F(BlobStoreTest, ANameThatIsNotASha256IsInvalidArgument) {
  auto store = Open();
  const std::string upper = absl::AsciiStrToUpper(Sha("x"));
  for (const std::string& bad :
       {upper, Sha("x").substr(1), std::string("../../etc/passwd"), std::string()}) {
    auto upload = store->BeginUpload("alice", bad, 1);
    EXPECT_EQ(upload.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(upload.status().message(), HasSubstr("64 lower-case hex digits"));
    EXPECT_EQ(store->Reference("1", "alice", {bad}).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(IsSha256Hex(Sha("x")));
  EXPECT_THAT(DirNames(dir()), ElementsAre("lock"));
}

TEST_F(BlobStoreTest, ThePerUserBoundNamesTheUsageAndStoresNothing) {
  auto store = Open(SmallLimits());
  const std::string a(60, 'a');
  const std::string b(50, 'b');
  ASSERT_TRUE(Put(*store, "alice", a).ok());
  auto refused = store->BeginUpload("alice", Sha(b), b.size());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("user alice holds 60 B of the 100 B per-user blob store limit"),
                    HasSubstr("this upload needs 50 B more"), HasSubstr("ipupod job delete")));
  EXPECT_FALSE(store->Stat("alice", Sha(b)).has_value());
  EXPECT_THAT(DirNames(dir()), ElementsAre(Sha(a), "lock"));
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 60u);
  EXPECT_EQ(store->UsageOf("alice").uploads, 0u);

  // Taking a hold on a stored blob is bounded too.
  BlobStoreLimits limits = SmallLimits();
  limits.max_total_bytes = 1000;
  store.reset();
  store = Open(limits);
  ASSERT_TRUE(Put(*store, "bob", b).ok());
  auto hold = store->BeginUpload("bob", Sha(a), a.size());  // stored since the reopen
  EXPECT_EQ(hold.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(hold.status().message(), HasSubstr("user bob holds 50 B"));
  EXPECT_EQ(store->UsageOf("bob").user_bytes, 50u);
}

TEST_F(BlobStoreTest, TheTotalBoundNamesTheUsageAndStoresNothing) {
  auto store = Open(SmallLimits());
  const std::string a(60, 'a');
  const std::string b(50, 'b');
  ASSERT_TRUE(Put(*store, "alice", a).ok());
  auto refused = store->BeginUpload("bob", Sha(b), b.size());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("the blob store holds 60 B of its 100 B total limit"),
                    HasSubstr("this upload needs 50 B more")));
  EXPECT_FALSE(store->Stat("alice", Sha(b)).has_value());
  EXPECT_THAT(DirNames(dir()), ElementsAre(Sha(a), "lock"));
  EXPECT_EQ(store->UsageOf("bob").user_bytes, 0u);
  EXPECT_EQ(store->UsageOf("bob").total_bytes, 60u);
}

TEST_F(BlobStoreTest, UploadsInProgressReserveTheirSpace) {
  auto store = Open(SmallLimits());
  const std::string a(60, 'a');
  const std::string b(50, 'b');
  auto first = store->BeginUpload("alice", Sha(a), a.size());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 60u);
  EXPECT_EQ(store->UsageOf("alice").total_bytes, 60u);
  auto second = store->BeginUpload("bob", Sha(b), b.size());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(), HasSubstr("holds 60 B of its 100 B total limit"));
  first->reset();  // abandoned: its temporary file and reservation go
  EXPECT_THAT(DirNames(dir()), ElementsAre("lock"));
  EXPECT_EQ(store->UsageOf("alice").total_bytes, 0u);
  EXPECT_TRUE(Put(*store, "bob", b).ok());
}

TEST_F(BlobStoreTest, ThePerBlobAndUploadCountBoundsAreResourceExhausted) {
  BlobStoreLimits limits = SmallLimits();
  limits.max_blob_bytes = 10;
  limits.max_uploads = 2;
  auto store = Open(limits);
  auto big = store->BeginUpload("alice", Sha(std::string(11, 'x')), 11);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(),
              HasSubstr("is 11 B, over the blob store's per-blob limit of 10 B"));
  EXPECT_EQ(store->UsageOf("alice").total_bytes, 0u);

  auto one = store->BeginUpload("alice", Sha("1"), 1);
  auto two = store->BeginUpload("bob", Sha("2"), 1);
  ASSERT_TRUE(one.ok() && two.ok());
  auto three = store->BeginUpload("carol", Sha("3"), 1);
  EXPECT_EQ(three.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(three.status().message(), HasSubstr("2 blob uploads are in progress"));
  EXPECT_EQ(DirNames(dir()).size(), 3u);  // two temporary files and the lock
  two->reset();
  EXPECT_TRUE(Put(*store, "carol", "3").ok());
}

TEST_F(BlobStoreTest, ABlobTwoUsersHoldCountsOnceInTheTotal) {
  auto store = Open();
  const std::string content(40, 'z');
  ASSERT_TRUE(Put(*store, "alice", content).ok());
  ASSERT_TRUE(Put(*store, "bob", content).ok());
  EXPECT_EQ(store->UsageOf("alice").total_bytes, 40u);
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 40u);
  EXPECT_EQ(store->UsageOf("bob").user_bytes, 40u);
  EXPECT_EQ(store->UsageOf("bob").stored_blobs, 1u);
}

TEST_F(BlobStoreTest, ConcurrentUploadsOfOneBlobKeepOneFile) {
  auto store = Open();
  const std::string content = "uploaded twice at once";
  auto first = store->BeginUpload("alice", Sha(content), content.size());
  auto second = store->BeginUpload("bob", Sha(content), content.size());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE((*second)->already_stored());
  EXPECT_EQ(store->UsageOf("bob").total_bytes, 2 * content.size());  // both reserved
  ASSERT_TRUE((*first)->Append(content).ok());
  ASSERT_TRUE((*second)->Append(content).ok());
  ASSERT_TRUE((*first)->Commit().ok());
  ASSERT_TRUE((*second)->Commit().ok());  // the blob is there: this copy is dropped
  EXPECT_THAT(DirNames(dir()), ElementsAre(Sha(content), "lock"));
  EXPECT_EQ(store->UsageOf("bob").total_bytes, content.size());
  EXPECT_EQ(store->UsageOf("alice").user_bytes, content.size());
  EXPECT_EQ(store->UsageOf("bob").user_bytes, content.size());
}

TEST_F(BlobStoreTest, ReferencingAMissingBlobIsNotFoundAndChangesNothing) {
  auto store = Open();
  ASSERT_TRUE(Put(*store, "alice", "exe").ok());
  const std::string missing = Sha("inputs never uploaded");
  absl::Status status = store->Reference("17", "alice", {Sha("exe"), missing});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), AllOf(HasSubstr(missing), HasSubstr("PutBlob")));
  now_ += absl::Hours(2);
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 0u);  // no reference was recorded
  EXPECT_EQ(store->Sweep(), 3u);
}

TEST_F(BlobStoreTest, AUserIsChargedOncePerDistinctBlobWhateverTheJobs) {
  auto store = Open(SmallLimits());
  const std::string a(40, 'a');
  const std::string b(30, 'b');
  ASSERT_TRUE(Put(*store, "alice", a).ok());
  // bob's own upload makes a his to use (his copy is verified and dropped;
  // it needed room like any upload, so before b fills the store).
  ASSERT_TRUE(Put(*store, "bob", a).ok());
  ASSERT_TRUE(Put(*store, "alice", b).ok());
  ASSERT_TRUE(store->Reference("1", "alice", {Sha(a), Sha(b), Sha(a)}).ok());
  ASSERT_TRUE(store->Reference("2", "alice", {Sha(a)}).ok());
  now_ += absl::Hours(2);  // the upload holds have passed; the jobs hold the blobs
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 70u);
  EXPECT_EQ(store->UsageOf("alice").user_blobs, 2u);
  ASSERT_TRUE(store->Reference("3", "bob", {Sha(a)}).ok());
  EXPECT_EQ(store->UsageOf("bob").user_bytes, 40u);
  EXPECT_EQ(store->UsageOf("bob").total_bytes, 70u);
  EXPECT_EQ(store->Reference("1", "bob", {Sha(a)}).code(), absl::StatusCode::kInvalidArgument);
  store->Release("1");
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 40u);  // job 2 still holds a
  store->Release("2");
  store->Release("2");  // twice: nothing happens
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 0u);
}

TEST_F(BlobStoreTest, AReferenceOverTheUserBoundIsResourceExhaustedAndChangesNothing) {
  BlobStoreLimits limits = SmallLimits();
  limits.max_total_bytes = 1000;
  auto store = Open(limits);
  const std::string a(60, 'a');
  const std::string b(50, 'b');
  ASSERT_TRUE(Put(*store, "alice", b).ok());
  now_ += absl::Hours(2);  // the hold on b has passed; b is still stored
  ASSERT_TRUE(Put(*store, "alice", a).ok());
  ASSERT_TRUE(store->Reference("1", "alice", {Sha(a)}).ok());
  absl::Status status = store->Reference("2", "alice", {Sha(a), Sha(b)});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("user alice holds 60 B of the 100 B"),
                                      HasSubstr("job 2 needs 50 B more")));
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 60u);
  now_ += absl::Hours(2);
  store->Release("1");
  EXPECT_EQ(store->Sweep(), 110u);  // job 2 references nothing
}

TEST_F(BlobStoreTest, SweepDeletesOnlyUnreferencedBlobsWhoseHoldHasPassed) {
  auto store = Open();
  const std::string a(10, 'a');
  const std::string b(20, 'b');
  const std::string c(30, 'c');
  ASSERT_TRUE(Put(*store, "alice", a).ok());
  ASSERT_TRUE(Put(*store, "alice", b).ok());
  ASSERT_TRUE(store->Reference("job", "alice", {Sha(a)}).ok());
  EXPECT_EQ(store->Sweep(), 0u);  // every hold is fresh
  now_ += absl::Minutes(30);
  ASSERT_TRUE(Put(*store, "alice", c).ok());
  now_ += absl::Minutes(31);  // a's and b's holds have passed, c's has not
  EXPECT_EQ(store->Sweep(), 20u);
  EXPECT_FALSE(store->Stat("alice", Sha(b)).has_value());
  EXPECT_THAT(DirNames(dir()), UnorderedElementsAre(Sha(a), Sha(c), "lock"));
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 40u);
  store->Release("job");
  EXPECT_EQ(store->Sweep(), 10u);
  EXPECT_TRUE(store->Stat("alice", Sha(c)).has_value());
  now_ += absl::Hours(1);
  EXPECT_EQ(store->Sweep(), 30u);
  EXPECT_THAT(DirNames(dir()), ElementsAre("lock"));
  EXPECT_EQ(store->UsageOf("alice").total_bytes, 0u);
}

TEST_F(BlobStoreTest, AnUploadSweepsExpiredBlobsBeforeRefusingOnTheTotal) {
  auto store = Open(SmallLimits());
  const std::string a(60, 'a');
  const std::string b(50, 'b');
  ASSERT_TRUE(Put(*store, "alice", a).ok());
  now_ += absl::Hours(2);
  auto size = Put(*store, "bob", b);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_FALSE(store->Stat("alice", Sha(a)).has_value());
  EXPECT_THAT(DirNames(dir()), ElementsAre(Sha(b), "lock"));
}

TEST_F(BlobStoreTest, ReopeningIndexesBlobsAndRemovesTemporaryFiles) {
  const std::string a = "a blob stored before the restart";
  {
    auto store = Open();
    ASSERT_TRUE(Put(*store, "alice", a).ok());
  }
  // What a server killed mid-upload and mid-sweep leaves, and foreign files.
  WriteFile(std::filesystem::path(dir()) / (Sha("partial") + ".3.upload.tmp"), "part");
  WriteFile(std::filesystem::path(dir()) / (Sha("old") + ".9.sweep.tmp"), "old");
  WriteFile(std::filesystem::path(dir()) / "notes.txt", "not a blob");
  WriteFile(std::filesystem::path(dir()) / absl::AsciiStrToUpper(Sha("y")), "y");
  std::filesystem::create_directory(std::filesystem::path(dir()) / "sub");
  auto store = Open();
  EXPECT_EQ(store->Stat("alice", Sha(a)), a.size());
  EXPECT_THAT(store->ignored_files(),
              ElementsAre(absl::AsciiStrToUpper(Sha("y")), "notes.txt", "sub"));
  EXPECT_THAT(DirNames(dir()), UnorderedElementsAre(absl::AsciiStrToUpper(Sha("y")), Sha(a), "lock",
                                                    "notes.txt", "sub"));
  EXPECT_EQ(store->UsageOf("alice").total_bytes, a.size());
  EXPECT_EQ(store->UsageOf("alice").user_bytes, 0u);  // nobody is charged for it
  // Kept for an upload hold from the Open, so a job manager can re-reference it.
  EXPECT_EQ(store->Sweep(), 0u);
  now_ += absl::Hours(1) + absl::Seconds(1);
  EXPECT_EQ(store->Sweep(), a.size());
}

// Ownership (server/jobs/blob_store.h): bob knows alice's hash but not her bytes.
// Every answer is the one for a hash nobody stored, until bob uploads them.
std::string Anonymized(absl::string_view message, absl::string_view sha) {
  return absl::StrReplaceAll(message, {{sha, "<sha>"}});
}

std::string Marker(absl::string_view sha, absl::string_view user) {
  return absl::StrCat(sha, ".", absl::BytesToHexString(user), ".owner");
}

TEST_F(BlobStoreTest, AnotherUsersBlobIsAnsweredAsAHashNobodyStored) {
  auto store = Open();
  const std::string content = "alice's weights, 32 bytes long..";
  const std::string nobodys = "a file nobody uploaded, 32 bytes";
  const std::string sha = Sha(content);
  ASSERT_TRUE(Put(*store, "alice", content).ok());
  EXPECT_FALSE(store->Stat("bob", sha).has_value());
  EXPECT_FALSE(store->Owns("bob", sha));
  const absl::Status referenced = store->Reference("b1", "bob", {sha});
  const absl::Status unknown = store->Reference("b1", "bob", {Sha(nobodys)});
  EXPECT_EQ(referenced.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Anonymized(referenced.message(), sha), Anonymized(unknown.message(), Sha(nobodys)));
  // An upload that claims the hash without the bytes: no already_stored,
  // and ending it is the error of any upload that sent nothing.
  for (const std::string& claimed : {content, nobodys}) {
    auto upload = store->BeginUpload("bob", Sha(claimed), claimed.size());
    ASSERT_TRUE(upload.ok()) << upload.status();
    EXPECT_FALSE((*upload)->already_stored());
  }
  auto claim = store->BeginUpload("bob", sha, content.size());
  auto other = store->BeginUpload("bob", Sha(nobodys), nobodys.size());
  ASSERT_TRUE(claim.ok() && other.ok());
  const absl::Status claimed = (*claim)->Commit().status();
  const absl::Status empty = (*other)->Commit().status();
  EXPECT_EQ(claimed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Anonymized(claimed.message(), sha), Anonymized(empty.message(), Sha(nobodys)));
  // A wrong size is not refused as "stored with N bytes": that would tell.
  EXPECT_TRUE(store->BeginUpload("bob", sha, content.size() + 1).ok());
  EXPECT_FALSE(store->Stat("bob", sha).has_value());
  EXPECT_EQ(store->UsageOf("bob").user_bytes, 0u);
  EXPECT_THAT(DirNames(dir(), true), ElementsAre(sha, Marker(sha, "alice"), "lock"));

  // bob sends the bytes: verified, his copy dropped, and he is an owner.
  ASSERT_TRUE(Put(*store, "bob", content).ok());
  EXPECT_EQ(store->Stat("bob", sha), content.size());
  EXPECT_TRUE(store->Reference("b1", "bob", {sha}).ok());
  EXPECT_THAT(DirNames(dir(), true),
              UnorderedElementsAre(sha, Marker(sha, "alice"), Marker(sha, "bob"), "lock"));
  EXPECT_FALSE(store->Stat("carol", sha).has_value());
}

TEST_F(BlobStoreTest, OwnersAreDurableAndLeaveWithTheirBlob) {
  const std::string a = "owned by alice and bob";
  const std::string legacy = "stored before blobs had owners";
  {
    auto store = Open();
    ASSERT_TRUE(Put(*store, "alice", a).ok());
    ASSERT_TRUE(Put(*store, "bob", a).ok());
  }
  const std::filesystem::path root(dir());
  WriteFile(root / Sha(legacy), legacy);
  WriteFile(root / Marker(Sha("swept"), "alice"), "");  // its blob is gone
  auto store = Open();
  EXPECT_EQ(store->Stat("alice", Sha(a)), a.size());
  EXPECT_EQ(store->Stat("bob", Sha(a)), a.size());
  EXPECT_FALSE(store->Stat("carol", Sha(a)).has_value());
  EXPECT_TRUE(store->ignored_files().empty());
  // Nobody owns a blob without a marker; a recovered job still holds it.
  EXPECT_FALSE(store->Stat("alice", Sha(legacy)).has_value());
  EXPECT_EQ(store->Reference("j1", "alice", {Sha(legacy)}).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->Rereference("j1", "alice", {Sha(legacy)}).ok());
  EXPECT_THAT(DirNames(dir(), true),
              UnorderedElementsAre(Sha(a), Sha(legacy), Marker(Sha(a), "alice"),
                                   Marker(Sha(a), "bob"), "lock"));
  store->Release("j1");
  now_ += absl::Hours(2);
  EXPECT_EQ(store->Sweep(), a.size() + legacy.size());
  EXPECT_THAT(DirNames(dir(), true), ElementsAre("lock"));
  // Uploaded again, the blob has only its new uploader as owner.
  ASSERT_TRUE(Put(*store, "carol", a).ok());
  EXPECT_FALSE(store->Stat("alice", Sha(a)).has_value());
  EXPECT_TRUE(store->Stat("carol", Sha(a)).has_value());
}

TEST_F(BlobStoreTest, ASecondOpenOfTheDirectoryOrBadLimitsAreRefused) {
  auto store = Open();
  auto second = BlobStore::Open(dir(), BlobStoreLimits{});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("in use by another ipupodd"));
  BlobStoreLimits limits;
  limits.max_user_bytes = 0;
  auto bad = BlobStore::Open(tmp_.sub("other"), limits);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("max_user_bytes"));
  WriteFile(tmp_.sub("file"), "x");
  EXPECT_EQ(BlobStore::Open(tmp_.sub("file"), BlobStoreLimits{}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ipupod::jobs
