// SessionService.Hold on an in-process PodServer, through the generated
// stub and the client library: the same session as Attach, ended by the
// client closing its side - released exactly as Detach releases (usage
// record RELEASED, IPUs free before the stream's end reaches the client) -
// and the edges: closed while queued, a second message, detached or
// cancelled from elsewhere.
#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ipupod/v1/accounting.grpc.pb.h"
#include "ipupod/v1/pod.grpc.pb.h"
#include "tests/support/eventually.h"
#include "tests/support/test_server.h"

namespace ipupod::server {
namespace {

using test_support::Eventually;
using ::testing::HasSubstr;

using HoldStream = grpc::ClientReaderWriter<v1::AttachRequest, v1::AttachEvent>;

class HoldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = test_support::TestServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    sessions_ = v1::SessionService::NewStub(channel_);
  }
  std::unique_ptr<grpc::ClientContext> Context(const std::string& user = "alice") {
    auto context = std::make_unique<grpc::ClientContext>();
    context->AddMetadata("x-ipupod-user", user);
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return context;
  }
  static v1::AttachRequest Request(uint32_t ipus, bool wait = false) {
    v1::AttachRequest request;
    request.set_num_ipus(ipus);
    request.set_wait(wait);
    return request;
  }
  int Sessions() {
    auto stub = v1::PodService::NewStub(channel_);
    auto context = Context();
    v1::GetPodInfoResponse info;
    EXPECT_TRUE(stub->GetPodInfo(context.get(), {}, &info).ok());
    return info.sessions_size();
  }
  std::string RecordState(const std::string& session) {
    auto stub = v1::AccountingService::NewStub(channel_);
    auto context = Context();
    v1::ListHistoryRequest request;
    v1::ListHistoryResponse response;
    EXPECT_TRUE(stub->ListHistory(context.get(), request, &response).ok());
    for (const v1::UsageRecord& r : response.records()) {
      if (r.id() == session) return r.state();
    }
    return "(none)";
  }
  // Opens a Hold and reads up to the grant.
  std::unique_ptr<HoldStream> Granted(grpc::ClientContext* context, v1::SessionInfo* session) {
    auto stream = sessions_->Hold(context);
    EXPECT_TRUE(stream->Write(Request(2)));
    v1::AttachEvent event;
    EXPECT_TRUE(stream->Read(&event));
    EXPECT_TRUE(event.has_granted()) << event.DebugString();
    *session = event.granted();
    return stream;
  }

  std::unique_ptr<test_support::TestServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SessionService::Stub> sessions_;
};

TEST_F(HoldTest, ClosingTheClientSideReleasesAsDetachDoesAndEndsOk) {
  auto context = Context();
  v1::SessionInfo session;
  auto stream = Granted(context.get(), &session);
  EXPECT_EQ(session.ipus_size(), 2);
  EXPECT_EQ(Sessions(), 1);
  EXPECT_EQ(RecordState(session.session()), "RUNNING");
  ASSERT_TRUE(stream->WritesDone());
  v1::AttachEvent event;
  ASSERT_TRUE(stream->Read(&event));
  ASSERT_TRUE(event.has_released()) << event.DebugString();
  EXPECT_EQ(event.released().session(), session.session());
  EXPECT_EQ(event.released().released_ipus_size(), 2);
  EXPECT_FALSE(stream->Read(&event)) << "released is the last event";
  grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(Sessions(), 0) << "free when the stream ended";
  EXPECT_EQ(RecordState(session.session()), "RELEASED") << "as its own user's Detach";
}

TEST_F(HoldTest, ClosedWhileQueuedTheRequestLeavesTheQueue) {
  auto holder_context = Context("bob");
  auto holder = sessions_->Attach(holder_context.get(), Request(16));
  v1::AttachEvent event;
  ASSERT_TRUE(holder->Read(&event) && event.has_granted());
  auto context = Context();
  auto stream = sessions_->Hold(context.get());
  ASSERT_TRUE(stream->Write(Request(1, /*wait=*/true)));
  ASSERT_TRUE(stream->Read(&event));
  ASSERT_TRUE(event.has_queued()) << event.DebugString();
  stream->WritesDone();
  while (stream->Read(&event)) {
  }
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_THAT(status.error_message(), HasSubstr("before the grant; the request left the queue"));
  auto list_context = Context();
  v1::ListQueueResponse queue;
  ASSERT_TRUE(sessions_->ListQueue(list_context.get(), {}, &queue).ok());
  EXPECT_EQ(queue.entries_size(), 0);
  holder_context->TryCancel();
}

TEST_F(HoldTest, ASecondMessageIsRefusedAndEndsTheSession) {
  auto context = Context();
  v1::SessionInfo session;
  auto stream = Granted(context.get(), &session);
  stream->Write(Request(1));
  v1::AttachEvent event;
  while (stream->Read(&event)) {
  }
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("close your side of the stream to detach"));
  EXPECT_TRUE(Eventually([&] { return Sessions() == 0; }));
}

TEST_F(HoldTest, BadRequestsFailAsOnAttach) {
  auto context = Context();
  auto stream = sessions_->Hold(context.get());
  ASSERT_TRUE(stream->Write(Request(3)));
  stream->WritesDone();
  v1::AttachEvent event;
  EXPECT_FALSE(stream->Read(&event));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("power of two"));
  auto nobody = std::make_unique<grpc::ClientContext>();
  auto anonymous = sessions_->Hold(nobody.get());
  anonymous->Write(Request(1));
  anonymous->WritesDone();
  while (anonymous->Read(&event)) {
  }
  EXPECT_EQ(anonymous->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Sessions(), 0);
}

TEST_F(HoldTest, DetachedElsewhereTheHoldEndsAborted) {
  auto context = Context();
  v1::SessionInfo session;
  auto stream = Granted(context.get(), &session);
  auto admin = Context("admin");
  v1::DetachRequest detach;
  detach.set_session(session.session());
  v1::DetachResponse detached;
  ASSERT_TRUE(sessions_->Detach(admin.get(), detach, &detached).ok());
  v1::AttachEvent event;
  while (stream->Read(&event)) EXPECT_FALSE(event.has_released());
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(status.error_message(), HasSubstr("detached by admin"));
  EXPECT_EQ(RecordState(session.session()), "DETACHED");
}

TEST_F(HoldTest, ACancelledHoldReleasesItsSession) {
  auto context = Context();
  v1::SessionInfo session;
  auto stream = Granted(context.get(), &session);
  context->TryCancel();
  (void)stream->Finish();
  EXPECT_TRUE(Eventually([&] { return Sessions() == 0; }));
  EXPECT_TRUE(Eventually([&] { return RecordState(session.session()) == "RELEASED"; }));
}

// AttachCall::Release returns once the server released: nothing to wait for.
TEST_F(HoldTest, TheClientLibrarysReleaseReturnsWithTheIpusFree) {
  client::ClientOptions options;
  options.server = server_->address();
  options.user = "alice";
  auto c = client::Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 3; ++i) {
    auto call = (*c)->StartAttach(Request(4));
    auto granted = call->WaitForGrant(nullptr);
    ASSERT_TRUE(granted.ok()) << granted.status();
    EXPECT_EQ(Sessions(), 1);
    ASSERT_TRUE(call->Release().ok());
    EXPECT_EQ(Sessions(), 0);
    EXPECT_EQ(call->WaitForEnd(absl::ZeroDuration()).code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(RecordState(granted->session()), "RELEASED");
  }
}

}  // namespace
}  // namespace ipupod::server
