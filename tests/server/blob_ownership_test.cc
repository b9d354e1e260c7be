// A blob's hash is no capability (server/jobs/blob_store.h, Ownership), through
// the real JobService and CompileService: bob, who knows alice's model's
// hash but not its bytes, gets for StatBlob, for a PutBlob claiming the hash
// without the bytes and for a Compile the answers of a hash nobody stored -
// the same code and message - until he uploads the bytes himself.
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"
#include "common/sha256.h"
#include "ipupod/v1/compile.grpc.pb.h"
#include "ipupod/v1/jobs.grpc.pb.h"
#include "tests/support/models.h"
#include "tests/support/test_server.h"

namespace ipupod::server {
namespace {

std::string Hex(const std::string& bytes) { return DigestHex(Sha256Of(bytes)); }

// A status as the client sees it, with `sha` written as <sha>: the answers
// for two hashes compare equal when they say the same of each.
std::string Seen(const grpc::Status& status, const std::string& sha) {
  return std::to_string(status.error_code()) + " " +
         absl::StrReplaceAll(status.error_message(), {{sha, "<sha>"}});
}

class BlobOwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = test_support::TestServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    jobs_ = v1::JobService::NewStub(channel);
    compile_ = v1::CompileService::NewStub(channel);
  }

  std::unique_ptr<grpc::ClientContext> As(const std::string& user) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->AddMetadata("x-ipupod-user", user);
    return context;
  }

  grpc::Status Stat(const std::string& user, const std::string& sha) {
    v1::StatBlobRequest request;
    request.set_sha256(sha);
    v1::BlobRef ref;
    return jobs_->StatBlob(As(user).get(), request, &ref);
  }

  // PutBlob of `size` bytes hashing to `sha`, sending `bytes` (maybe none).
  grpc::Status Put(const std::string& user, const std::string& sha, uint64_t size,
                   const std::string& bytes, v1::BlobRef* ref) {
    auto context = As(user);
    auto writer = jobs_->PutBlob(context.get(), ref);
    v1::BlobChunk chunk;
    chunk.set_sha256(sha);
    chunk.set_total_bytes(size);
    chunk.set_data(bytes);
    writer->Write(chunk);
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Compile(const std::string& user, const std::string& sha) {
    v1::CompileRequest request;
    request.set_model_sha256(sha);
    auto context = As(user);
    auto reader = compile_->Compile(context.get(), request);
    v1::CompileResponse response;
    while (reader->Read(&response)) {
    }
    return reader->Finish();
  }

  std::unique_ptr<test_support::TestServer> server_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::CompileService::Stub> compile_;
};

TEST_F(BlobOwnershipTest, AnotherUsersHashIsAnsweredAsOneNobodyStoredUntilTheBytesCome) {
  const std::string model = test_support::LinearModel(2, 3);
  const std::string sha = Hex(model);
  const std::string nobodys = Hex("a model nobody uploaded");
  v1::BlobRef ref;
  ASSERT_TRUE(Put("alice", sha, model.size(), model, &ref).ok());
  ASSERT_TRUE(Stat("alice", sha).ok());

  EXPECT_EQ(Stat("bob", sha).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Seen(Stat("bob", sha), sha), Seen(Stat("bob", nobodys), nobodys));
  EXPECT_EQ(Compile("bob", sha).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Seen(Compile("bob", sha), sha), Seen(Compile("bob", nobodys), nobodys));
  // Claiming the hash without the bytes: no already_stored, the error of
  // any upload that sent nothing, and bob still has no blob.
  const grpc::Status claimed = Put("bob", sha, model.size(), "", &ref);
  EXPECT_FALSE(ref.already_stored());
  EXPECT_FALSE(claimed.ok());
  EXPECT_EQ(Seen(claimed, sha), Seen(Put("bob", nobodys, model.size(), "", &ref), nobodys));
  EXPECT_EQ(Stat("bob", sha).error_code(), grpc::StatusCode::NOT_FOUND);

  // With the bytes, bob owns it: stat, compile and already_stored work.
  ASSERT_TRUE(Put("bob", sha, model.size(), model, &ref).ok());
  EXPECT_FALSE(ref.already_stored());
  EXPECT_TRUE(Stat("bob", sha).ok());
  EXPECT_TRUE(Compile("bob", sha).ok());
  ASSERT_TRUE(Put("bob", sha, model.size(), "", &ref).ok());
  EXPECT_TRUE(ref.already_stored());
  EXPECT_EQ(Stat("carol", sha).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace ipupod::server
