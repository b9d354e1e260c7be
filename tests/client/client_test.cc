// The client library against an in-process fake ipupodd (gRPC sync server,
// Hold on the callback API): identity metadata, status + trailing metadata
// conversion, deadlines, and the AttachCall lifecycle (queue, grant, cancel,
// detach, release, loss).
#include "client/client.h"

#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "common/errors.h"
#include "common/sync.h"
#include "tests/support/eventually.h"

namespace ipupod::client {
namespace {

using ::testing::HasSubstr;

using test_support::Eventually;

// What the fake saw and what it should do; shared by its services.
class FakeHold;

struct FakeState {
  absl::Mutex mu;
  std::multimap<std::string, std::string> last_metadata ABSL_GUARDED_BY(mu);
  bool detach_requested ABSL_GUARDED_BY(mu) = false;
  FakeHold* granted_hold ABSL_GUARDED_BY(mu) = nullptr;  // the Hold holding s1-2
  std::atomic<int> attach_cancelled{0};
  std::atomic<int> detach_calls{0};
  std::atomic<int> hold_closed{0};  // Hold streams whose client closed its side
  std::atomic<int> ipus_reset{0};
};

void RecordMetadata(FakeState& state, const grpc::ServerContextBase& context) {
  sync::MutexLock lock(&state.mu);
  state.last_metadata.clear();
  for (const auto& [k, v] : context.client_metadata()) {
    state.last_metadata.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
  }
}

class FakePod final : public v1::PodService::Service {
 public:
  explicit FakePod(FakeState& state) : state_(state) {}
  grpc::Status GetPodInfo(grpc::ServerContext* context, const v1::GetPodInfoRequest*,
                          v1::GetPodInfoResponse* response) override {
    RecordMetadata(state_, *context);
    response->mutable_pod()->set_name("POD16");
    response->mutable_pod()->set_num_ipus(16);
    return grpc::Status::OK;
  }
  // IPU 99 blocks until the client's deadline passes (tests the deadline).
  grpc::Status ResetIpu(grpc::ServerContext* context, const v1::ResetIpuRequest* request,
                        v1::ResetResponse* response) override {
    if (request->ipu() == 99) {
      Eventually([&] { return context->IsCancelled(); });
      return grpc::Status(grpc::StatusCode::CANCELLED, "gone");
    }
    if (request->ipu() == 4 || request->ipu() == 5) {  // the faulted IPUs of s-faulty
      ++state_.ipus_reset;
      response->add_reset_ipus(request->ipu());
      return grpc::Status::OK;
    }
    context->AddTrailingMetadata("ipupod-error-kind", "recoverable");
    context->AddTrailingMetadata("ipupod-recovery-action", "PARTITION_RESET");
    context->AddTrailingMetadata("ipupod-ipus", "4,5,6,7");
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "IPU 4 needs PARTITION_RESET: run ipupod partition reset p1");
  }

 private:
  FakeState& state_;
};

// Hold behaviour by num_ipus (callback API, as ipupodd's):
//   1: grant at once, then hold until cancelled, detached elsewhere (ABORTED)
//      or closed by the client (`released`, then OK)
//   2: queued (position 2, then 1), then wait until cancelled
//   3: fail RESOURCE_EXHAUSTED at once
class FakeHold final : public grpc::ServerBidiReactor<v1::AttachRequest, v1::AttachEvent> {
 public:
  FakeHold(FakeState& state, const grpc::CallbackServerContext& context) : state_(state) {
    RecordMetadata(state_, context);
    sync::Released(this);  // for the reactions, on other gRPC threads
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    Enter();
    bool granted = false;
    {
      sync::MutexLock lock(&mu_);
      if (read_request_) {
        if (!ok && !cancelled_ && !finish_) {  // the client closed its side: detach
          ++state_.hold_closed;
          events_.emplace_back().mutable_released()->set_session("s1-2");
          finish_ = grpc::Status::OK;
          PumpLocked();
        }
        return;
      }
      read_request_ = true;
      granted = ok && Begin();
      PumpLocked();
      if (ok && !finish_) StartRead(&request_);  // completes on the client's close
    }
    if (granted) {
      sync::MutexLock lock(&state_.mu);
      state_.granted_hold = this;
    }
  }
  void OnWriteDone(bool /*ok*/) override {
    Enter();
    sync::MutexLock lock(&mu_);
    writing_ = false;
    PumpLocked();
  }
  void OnCancel() override {
    Enter();
    ++state_.attach_cancelled;
    sync::MutexLock lock(&mu_);
    cancelled_ = true;
    events_.clear();
    if (!finish_) finish_ = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    PumpLocked();
  }
  void OnDone() override {
    Enter();
    {
      sync::MutexLock lock(&state_.mu);
      if (state_.granted_hold == this) state_.granted_hold = nullptr;
    }
    delete this;
  }
  // Detach of s1-2 from another call. REQUIRES: state_.mu held (keeps this alive).
  void DetachedElsewhere() {
    sync::MutexLock lock(&mu_);
    if (!finish_)
      finish_ = grpc::Status(grpc::StatusCode::ABORTED, "session s1-2 was detached by admin");
    PumpLocked();
  }

 private:
  // gRPC runs the reactions on threads it hands this reactor to inside
  // libgrpc, where TSan cannot see the order: the edges it needs.
  void Enter() {
    sync::Acquired(this);
    sync::Acquired(&state_);
  }
  // Queues the answer to the request; true when it granted s1-2.
  bool Begin() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (request_.num_ipus() == 3) {
      finish_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no 3 IPUs free; held by s1-1");
      return false;
    }
    if (request_.num_ipus() == 2) {
      for (uint32_t position : {2u, 1u}) {
        v1::QueuePosition* queued = events_.emplace_back().mutable_queued();
        queued->set_ticket("t-1");
        queued->set_position(position);
        queued->set_queue_length(2);
      }
      return false;
    }
    v1::SessionInfo* granted = events_.emplace_back().mutable_granted();
    granted->set_session("s1-2");
    granted->add_ipus(4);
    granted->set_device_id(4);
    return true;
  }
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (!events_.empty()) {
      writing_ = true;
      current_ = std::move(events_.front());
      events_.pop_front();
      StartWrite(&current_);
    } else if (finish_) {
      finished_ = true;
      Finish(*finish_);
    }
  }

  FakeState& state_;
  v1::AttachRequest request_;  // the request, then reads that wait for the close
  absl::Mutex mu_;
  bool read_request_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::AttachEvent> events_ ABSL_GUARDED_BY(mu_);
  v1::AttachEvent current_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
};

// Attach behaviour by num_ipus:
//   1: grant at once, then hold until cancelled or detached (ABORTED)
//   2: queued (position 2, then 1), then wait until cancelled
//   3: fail RESOURCE_EXHAUSTED at once
class FakeSessions final
    : public v1::SessionService::WithCallbackMethod_Hold<v1::SessionService::Service> {
 public:
  explicit FakeSessions(FakeState& state) : state_(state) {}

  grpc::ServerBidiReactor<v1::AttachRequest, v1::AttachEvent>* Hold(
      grpc::CallbackServerContext* context) override {
    // gRPC's callback threads may predate this test's FakeState; SetUp
    // published it before the server started (an edge TSan cannot see
    // inside libgrpc).
    sync::Acquired(&state_);
    return new FakeHold(state_, *context);
  }

  grpc::Status Attach(grpc::ServerContext* context, const v1::AttachRequest* request,
                      grpc::ServerWriter<v1::AttachEvent>* writer) override {
    RecordMetadata(state_, *context);
    if (request->num_ipus() == 3) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no 3 IPUs free; held by s1-1");
    }
    if (request->num_ipus() == 2) {
      for (uint32_t position : {2u, 1u}) {
        v1::AttachEvent event;
        event.mutable_queued()->set_ticket("t-1");
        event.mutable_queued()->set_position(position);
        event.mutable_queued()->set_queue_length(2);
        writer->Write(event);
      }
      return WaitForEnd(context);
    }
    v1::AttachEvent event;
    v1::SessionInfo* granted = event.mutable_granted();
    granted->set_session("s1-2");
    granted->add_ipus(4);
    granted->set_device_id(4);
    writer->Write(event);
    return WaitForEnd(context);
  }

  // s-faulty: IPUs 4 and 5 need IPU_RESET until both were reset.
  grpc::Status GetSession(grpc::ServerContext* context, const v1::GetSessionRequest* request,
                          v1::SessionInfo* response) override {
    if (request->session() != "s-faulty") return grpc::Status(grpc::StatusCode::NOT_FOUND, "no");
    if (state_.ipus_reset.load() < 2) {
      context->AddTrailingMetadata("ipupod-error-kind", "recoverable");
      context->AddTrailingMetadata("ipupod-recovery-action", "IPU_RESET");
      context->AddTrailingMetadata("ipupod-ipus", "4,5");
      return grpc::Status(grpc::StatusCode::ABORTED, "session s-faulty: IPUs 4,5 need IPU_RESET");
    }
    response->set_session("s-faulty");
    response->set_needs_load(true);
    return grpc::Status::OK;
  }

  grpc::Status Detach(grpc::ServerContext* context, const v1::DetachRequest* request,
                      v1::DetachResponse* response) override {
    ++state_.detach_calls;
    if (request->session() != "s1-2") return grpc::Status(grpc::StatusCode::NOT_FOUND, "no");
    sync::MutexLock lock(&state_.mu);
    state_.detach_requested = true;
    if (state_.granted_hold != nullptr) state_.granted_hold->DetachedElsewhere();
    response->add_released_ipus(4);
    return grpc::Status::OK;
  }

 private:
  grpc::Status WaitForEnd(grpc::ServerContext* context) {
    absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      if (context->IsCancelled()) {
        ++state_.attach_cancelled;
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      {
        sync::MutexLock lock(&state_.mu);
        if (state_.detach_requested) {
          return grpc::Status(grpc::StatusCode::ABORTED, "session s1-2 was detached by admin");
        }
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    return grpc::Status(grpc::StatusCode::INTERNAL, "test hung");
  }
  FakeState& state_;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&pod_);
    builder.RegisterService(&sessions_);
    sync::Released(&state_);  // for the callback threads (FakeSessions::Hold)
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    options_.server = "127.0.0.1:" + std::to_string(port_);
    options_.user = "alice";
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }
  std::unique_ptr<Client> Connect() {
    auto client = Client::Connect(options_);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }
  std::string Metadata(const std::string& key) {
    sync::MutexLock lock(&state_.mu);
    auto it = state_.last_metadata.find(key);
    return it == state_.last_metadata.end() ? "<none>" : it->second;
  }
  v1::AttachRequest Request(int ipus) {
    v1::AttachRequest request;
    request.set_num_ipus(ipus);
    request.set_wait(true);
    return request;
  }

  FakeState state_;
  FakePod pod_{state_};
  FakeSessions sessions_{state_};
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  ClientOptions options_;
};

TEST_F(ClientTest, OpenModeSendsTheUserName) {
  auto info = Connect()->GetPodInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pod().name(), "POD16");
  EXPECT_EQ(Metadata("x-ipupod-user"), "alice");
  EXPECT_EQ(Metadata("authorization"), "<none>");
}

TEST_F(ClientTest, TokenModeSendsABearerTokenInstead) {
  options_.token = "alice-secret";
  ASSERT_TRUE(Connect()->GetPodInfo().ok());
  EXPECT_EQ(Metadata("authorization"), "Bearer alice-secret");
  EXPECT_EQ(Metadata("x-ipupod-user"), "<none>");
}

TEST_F(ClientTest, ErrorTrailersBecomeErrorPayloads) {
  auto reset = Connect()->ResetIpu(7);
  ASSERT_FALSE(reset.ok());
  EXPECT_EQ(reset.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reset.status().message(), HasSubstr("run ipupod partition reset p1"));
  EXPECT_EQ(GetErrorKind(reset.status()), ErrorKind::kRecoverable);
  EXPECT_EQ(GetRecoveryAction(reset.status()), RecoveryAction::kPartitionReset);
  EXPECT_EQ(GetErrorIpus(reset.status()), (std::vector<int>{4, 5, 6, 7}));
}

// The recovery pattern documented in client/client.h, as written there.
TEST_F(ClientTest, RecoveryPatternOfTheHeaderWorks) {
  std::unique_ptr<Client> client = Connect();
  const std::string id = "s-faulty";
  absl::StatusOr<v1::SessionInfo> info = client->GetSession(id);
  ASSERT_FALSE(info.ok());
  {
    const absl::Status& error = info.status();
    switch (ipupod::GetErrorKind(error)) {
      case ipupod::ErrorKind::kRecoverable:
        switch (ipupod::GetRecoveryAction(error)) {
          case ipupod::RecoveryAction::kIpuReset:
            for (int ipu : ipupod::GetErrorIpus(error)) EXPECT_TRUE(client->ResetIpu(ipu).ok());
            break;
          default:
            ADD_FAILURE() << "expected IPU_RESET";
        }
        break;
      default:
        ADD_FAILURE() << "expected a recoverable error";
    }
  }
  info = client->GetSession(id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->needs_load());
}

TEST_F(ClientTest, EveryCallHasADeadline) {
  options_.rpc_timeout = absl::Milliseconds(200);
  absl::Time start = absl::Now();
  auto reset = Connect()->ResetIpu(99);
  EXPECT_EQ(reset.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(reset.status().message(), HasSubstr("did not answer ResetIpu within 200ms"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(ClientTest, UnreachableServerSaysHowToStartIt) {
  options_.server = "127.0.0.1:1";
  auto info = Connect()->GetPodInfo();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(info.status().message(), HasSubstr("cannot reach ipupodd at 127.0.0.1:1: "));
  EXPECT_THAT(info.status().message(), HasSubstr("is it running?"));
}

TEST_F(ClientTest, ConnectRefusesUnusableOptions) {
  options_.token = std::string(10000, 'x');
  EXPECT_EQ(Client::Connect(options_).status().code(), absl::StatusCode::kUnauthenticated);
  options_.token = "has space";
  EXPECT_EQ(Client::Connect(options_).status().code(), absl::StatusCode::kUnauthenticated);
  options_.token = "";
  options_.user = "bad\nname";
  EXPECT_EQ(Client::Connect(options_).status().code(), absl::StatusCode::kInvalidArgument);
  options_.user = "alice";
  options_.server = "";
  EXPECT_EQ(Client::Connect(options_).status().code(), absl::StatusCode::kInvalidArgument);
  options_.server = "127.0.0.1:1";
  options_.rpc_timeout = absl::ZeroDuration();
  EXPECT_EQ(Client::Connect(options_).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, AttachReportsQueuePositionsThenCancelLeavesTheQueueAtOnce) {
  auto client = Connect();
  std::unique_ptr<AttachCall> call = client->StartAttach(Request(2));
  std::vector<uint32_t> positions;
  std::thread canceller;
  absl::Time cancelled_at;
  auto grant = call->WaitForGrant([&](const v1::QueuePosition& q) {
    positions.push_back(q.position());
    if (q.position() == 1) {  // cancel from another thread, as a signal watcher would
      cancelled_at = absl::Now();
      canceller = std::thread([&] { call->Cancel(); });
    }
  });
  canceller.join();
  EXPECT_EQ(grant.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - cancelled_at, absl::Seconds(2));
  EXPECT_EQ(positions, (std::vector<uint32_t>{2, 1}));
  EXPECT_TRUE(Eventually([&] { return state_.attach_cancelled.load() == 1; }))
      << "the server saw the cancellation";
  EXPECT_EQ(Metadata("x-ipupod-user"), "alice");
}

TEST_F(ClientTest, AttachFailureIsTheStreamStatus) {
  auto grant = Connect()->StartAttach(Request(3))->WaitForGrant(nullptr);
  EXPECT_EQ(grant.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(grant.status().message(), HasSubstr("held by s1-1"));
}

TEST_F(ClientTest, AttachToUnreachableServerIsUnavailable) {
  options_.server = "127.0.0.1:1";
  auto grant = Connect()->StartAttach(Request(1))->WaitForGrant(nullptr);
  EXPECT_EQ(grant.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(grant.status().message(), HasSubstr("cannot reach ipupodd at 127.0.0.1:1"));
}

TEST_F(ClientTest, GrantedSessionStaysAliveUntilDetachedElsewhere) {
  auto client = Connect();
  auto call = client->StartAttach(Request(1));
  auto grant = call->WaitForGrant(nullptr);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->session(), "s1-2");
  EXPECT_EQ(call->session(), "s1-2");

  absl::Status alive = call->WaitForEnd(absl::Milliseconds(50));
  EXPECT_EQ(alive.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(call->Ended());

  ASSERT_TRUE(client->Detach("s1-2").ok());  // "elsewhere": another RPC
  absl::Status ended = call->WaitForEnd(absl::Seconds(10));
  EXPECT_TRUE(call->Ended());
  EXPECT_EQ(ended.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(ended.message(), HasSubstr("detached by admin"));
  EXPECT_TRUE(call->Release().ok()) << "releasing an ended session is fine";
}

// Release closes the client's side of the Hold stream and returns once the
// server has answered `released` and ended it: no Detach call, no reader
// thread, the server's release already done when it returns.
TEST_F(ClientTest, ReleaseClosesTheHoldStreamAndWaitsForTheRelease) {
  auto call = Connect()->StartAttach(Request(1));
  ASSERT_TRUE(call->WaitForGrant(nullptr).ok());
  EXPECT_TRUE(call->Release().ok());
  EXPECT_EQ(state_.hold_closed.load(), 1) << "the server saw the close before Release returned";
  EXPECT_EQ(state_.detach_calls.load(), 0);
  EXPECT_EQ(state_.attach_cancelled.load(), 0) << "closed, not cancelled";
  EXPECT_TRUE(call->Ended());
  EXPECT_EQ(call->WaitForEnd(absl::ZeroDuration()).code(), absl::StatusCode::kCancelled);
}

TEST_F(ClientTest, DestroyingTheCallReleasesTheSession) {
  {
    auto call = Connect()->StartAttach(Request(1));
    ASSERT_TRUE(call->WaitForGrant(nullptr).ok());
  }
  EXPECT_TRUE(Eventually([&] { return state_.attach_cancelled.load() == 1; }));
}

TEST_F(ClientTest, CancelBeforeTheStreamStartsIsHonoured) {
  auto call = Connect()->StartAttach(Request(2));
  call->Cancel();
  EXPECT_EQ(call->WaitForGrant(nullptr).status().code(), absl::StatusCode::kCancelled);
}

TEST_F(ClientTest, ServerGoingAwayAfterTheGrantEndsTheSession) {
  auto call = Connect()->StartAttach(Request(1));
  ASSERT_TRUE(call->WaitForGrant(nullptr).ok());
  std::thread stopper([&] {
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  });
  absl::Status ended = call->WaitForEnd(absl::Seconds(20));
  stopper.join();
  ASSERT_TRUE(call->Ended());
  EXPECT_NE(ended.code(), absl::StatusCode::kOk);
  EXPECT_NE(ended.code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace ipupod::client
