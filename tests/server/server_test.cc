// In-process PodServer on an ephemeral loopback port, driven through the
// generated stubs: attach grants, the no-wait refusal naming holders, the
// wait queue handing over on release, device errors in trailing metadata,
// authentication and ownership errors, health and reflection, liveness of
// silent clients, shutdown, and durability across a restart.
#include "server/server.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ipupod/v1/pod.grpc.pb.h"
#include "tests/support/eventually.h"
#include "tests/support/temp_dir.h"
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ipupod::server {
namespace {

using ::testing::HasSubstr;

constexpr auto kRpcTimeout = std::chrono::seconds(15);

using test_support::Eventually;

using test_support::TempDir;

std::string Trailer(const grpc::ClientContext& context, const std::string& key) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(key);
  return it == trailers.end() ? "" : std::string(it->second.data(), it->second.size());
}

// A caller: open mode sends its name, token mode its token.
class Client {
 public:
  Client(const std::string& address, std::string user, std::string token = "")
      : Client(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), std::move(user),
               std::move(token)) {}
  Client(std::shared_ptr<grpc::Channel> channel, std::string user, std::string token)
      : channel_(std::move(channel)),
        user_(std::move(user)),
        token_(std::move(token)),
        pod_(v1::PodService::NewStub(channel_)),
        partition_(v1::PartitionService::NewStub(channel_)),
        session_(v1::SessionService::NewStub(channel_)) {}

  std::unique_ptr<grpc::ClientContext> Context() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
    if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
    if (!user_.empty()) context->AddMetadata("x-ipupod-user", user_);
    return context;
  }
  v1::PodService::Stub& pod() { return *pod_; }
  v1::PartitionService::Stub& partition() { return *partition_; }
  v1::SessionService::Stub& session() { return *session_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  v1::GetPodInfoResponse Info() {
    v1::GetPodInfoResponse info;
    auto context = Context();
    EXPECT_TRUE(pod_->GetPodInfo(context.get(), {}, &info).ok());
    return info;
  }
  int QueueLength() {
    v1::ListQueueResponse queue;
    auto context = Context();
    EXPECT_TRUE(session_->ListQueue(context.get(), {}, &queue).ok());
    return queue.entries_size();
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::string user_;
  std::string token_;
  std::unique_ptr<v1::PodService::Stub> pod_;
  std::unique_ptr<v1::PartitionService::Stub> partition_;
  std::unique_ptr<v1::SessionService::Stub> session_;
};

// One Attach stream, read synchronously (every read is bounded by the
// context deadline).
class AttachCall {
 public:
  AttachCall(Client& client, int num_ipus, bool wait = false, const std::string& partition = "")
      : context_(client.Context()) {
    v1::AttachRequest request;
    request.set_num_ipus(static_cast<uint32_t>(num_ipus));
    request.set_wait(wait);
    request.set_partition(partition);
    request.set_client("server_test");
    reader_ = client.session().Attach(context_.get(), request);
  }
  std::optional<v1::AttachEvent> Next() {
    v1::AttachEvent event;
    if (reader_->Read(&event)) return event;
    return std::nullopt;
  }
  // Reads until the grant; nullopt if the stream ends first.
  std::optional<v1::SessionInfo> AwaitGrant() {
    while (auto event = Next()) {
      if (event->has_granted()) return event->granted();
    }
    return std::nullopt;
  }
  grpc::Status Finish() { return reader_->Finish(); }
  void Cancel() { context_->TryCancel(); }
  grpc::ClientContext& context() { return *context_; }

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReader<v1::AttachEvent>> reader_;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(); }

  ServerConfig BaseConfig() {
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.state_dir = state_.path() + "/state";
    config.session_lease_seconds = 2;
    config.ipu_reset_ms = 20;
    config.partition_reset_ms = 20;
    config.pod_reset_ms = 20;
    config.log_level = "warn";
    return config;
  }
  void StartServer(std::optional<ServerConfig> config = std::nullopt) {
    auto server = PodServer::Start(config ? *config : BaseConfig());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  Client NewClient(const std::string& user) { return Client(address(), user); }

  TempDir state_;
  std::unique_ptr<PodServer> server_;
};

TEST_F(ServerTest, ReportsTheBoundPortAndAReadyLine) {
  EXPECT_GT(server_->port(), 0);
  EXPECT_EQ(server_->address(), address());
  std::smatch m;
  std::string line = server_->ReadyLine();
  ASSERT_TRUE(std::regex_match(
      line, m,
      std::regex(R"(ipupodd listening on 127\.0\.0\.1:(\d+) \(POD16, 16 IPUs, open mode\); )"
                 R"(http://127\.0\.0\.1:\d+ serves the status page, /metrics and /healthz)")))
      << line;
  EXPECT_EQ(std::stoi(m[1]), server_->port());
}

TEST_F(ServerTest, PodInfoDescribesThePodAndEveryIpu) {
  Client alice = NewClient("alice");
  v1::GetPodInfoResponse info = alice.Info();
  EXPECT_EQ(info.pod().name(), "POD16");
  EXPECT_EQ(info.pod().num_ipus(), 16u);
  EXPECT_EQ(info.pod().free_ipus(), 16u);
  EXPECT_TRUE(info.pod().open_mode());
  EXPECT_EQ(info.pod().ipu().name(), "GC200");
  EXPECT_EQ(info.pod().server_version(), IPUPOD_VERSION);
  ASSERT_EQ(info.ipus_size(), 16);
  EXPECT_EQ(info.ipus(5).id(), 5u);
  EXPECT_EQ(info.ipus(5).state(), v1::IPU_STATE_IDLE);
  EXPECT_EQ(info.ipus(5).memory_total_bytes(), 900'000'000u);
}

TEST_F(ServerTest, AttachGrantsAndCancellingReleases) {
  Client alice = NewClient("alice");
  AttachCall call(alice, 4);
  auto grant = call.AwaitGrant();
  ASSERT_TRUE(grant) << call.Finish().error_message();
  EXPECT_EQ(grant->user(), "alice");
  ASSERT_EQ(grant->ipus_size(), 4);
  EXPECT_EQ(grant->ipus(0) % 4, 0u);
  EXPECT_EQ(grant->client(), "server_test");
  v1::GetPodInfoResponse info = alice.Info();
  EXPECT_EQ(info.ipus(static_cast<int>(grant->ipus(0))).state(), v1::IPU_STATE_ATTACHED);
  EXPECT_EQ(info.ipus(static_cast<int>(grant->ipus(0))).session(), grant->session());
  EXPECT_EQ(info.pod().sessions(), 1u);

  call.Cancel();
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(Eventually([&] { return alice.Info().pod().sessions() == 0; }));
  EXPECT_EQ(alice.Info().pod().free_ipus(), 16u);
}

TEST_F(ServerTest, NoWaitIsResourceExhaustedNamingTheHolders) {
  Client alice = NewClient("alice");
  Client bob = NewClient("bob");
  AttachCall holder(alice, 16);
  auto grant = holder.AwaitGrant();
  ASSERT_TRUE(grant);

  AttachCall refused(bob, 1);
  EXPECT_FALSE(refused.Next());
  grpc::Status status = refused.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("alice"));
  EXPECT_THAT(status.error_message(), HasSubstr(grant->session()));
  EXPECT_EQ(Trailer(refused.context(), "ipupod-error-kind"), "application");
  EXPECT_EQ(bob.QueueLength(), 0);
}

TEST_F(ServerTest, WaiterIsQueuedThenGrantedWhenTheHolderLeaves) {
  Client alice = NewClient("alice");
  Client bob = NewClient("bob");
  AttachCall holder(alice, 16);
  auto first = holder.AwaitGrant();
  ASSERT_TRUE(first);

  AttachCall waiter(bob, 8, /*wait=*/true);
  auto queued = waiter.Next();
  ASSERT_TRUE(queued);
  ASSERT_TRUE(queued->has_queued());
  EXPECT_EQ(queued->queued().position(), 1u);
  EXPECT_FALSE(queued->queued().ticket().empty());
  EXPECT_THAT(queued->queued().blocking_sessions(), ::testing::Contains(first->session()));
  EXPECT_EQ(alice.QueueLength(), 1);

  holder.Cancel();
  auto grant = waiter.AwaitGrant();
  ASSERT_TRUE(grant) << waiter.Finish().error_message();
  EXPECT_EQ(grant->user(), "bob");
  EXPECT_EQ(grant->ipus_size(), 8);
  EXPECT_EQ(alice.QueueLength(), 0);
}

TEST_F(ServerTest, DetachEndsTheAttachStreamWithAborted) {
  Client alice = NewClient("alice");
  AttachCall call(alice, 2);
  auto grant = call.AwaitGrant();
  ASSERT_TRUE(grant);
  v1::DetachRequest request;
  request.set_session(grant->session());
  v1::DetachResponse response;
  auto context = alice.Context();
  ASSERT_TRUE(alice.session().Detach(context.get(), request, &response).ok());
  EXPECT_EQ(response.released_ipus_size(), 2);
  while (call.Next()) {
  }
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::ABORTED);
}

TEST_F(ServerTest, GrantedStreamCarriesHeartbeats) {
  Client alice = NewClient("alice");
  AttachCall call(alice, 1);
  ASSERT_TRUE(call.AwaitGrant());
  absl::Time start = absl::Now();
  auto event = call.Next();  // lease 2 s: a heartbeat within about 1 s
  ASSERT_TRUE(event);
  EXPECT_TRUE(event->has_heartbeat());
  EXPECT_GT(event->heartbeat().server_unix_ms(), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST_F(ServerTest, InjectedFaultReachesGetSessionWithTrailingMetadata) {
  Client alice = NewClient("alice");
  Client admin = NewClient("admin");
  AttachCall call(alice, 2);
  auto grant = call.AwaitGrant();
  ASSERT_TRUE(grant);
  const uint32_t ipu = grant->ipus(1);

  v1::InjectFaultRequest fault;
  fault.set_ipu(ipu);
  fault.set_kind(v1::FAULT_KIND_IPU_RESET);
  v1::InjectFaultResponse injected;
  auto fault_context = admin.Context();
  ASSERT_TRUE(admin.pod().InjectFault(fault_context.get(), fault, &injected).ok());
  EXPECT_THAT(injected.affected_sessions(), ::testing::Contains(grant->session()));

  v1::GetSessionRequest get;
  get.set_session(grant->session());
  v1::SessionInfo info;
  auto context = alice.Context();
  grpc::Status status = alice.session().GetSession(context.get(), get, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED) << status.error_message();
  EXPECT_EQ(Trailer(*context, "ipupod-error-kind"), "recoverable");
  EXPECT_EQ(Trailer(*context, "ipupod-recovery-action"), "IPU_RESET");
  EXPECT_EQ(Trailer(*context, "ipupod-ipus"), std::to_string(ipu));

  // The asynchronous reset path: finishes from the scheduler's callback.
  v1::ResetIpuRequest reset;
  reset.set_ipu(ipu);
  v1::ResetResponse reset_response;
  auto reset_context = alice.Context();
  grpc::Status reset_status = alice.pod().ResetIpu(reset_context.get(), reset, &reset_response);
  ASSERT_TRUE(reset_status.ok()) << reset_status.error_message();
  EXPECT_THAT(reset_response.reset_ipus(), ::testing::Contains(ipu));
  EXPECT_TRUE(Eventually([&] {
    v1::SessionInfo healed;
    auto c = alice.Context();
    return alice.session().GetSession(c.get(), get, &healed).ok() && healed.needs_load();
  }));
}

TEST_F(ServerTest, NonAdminsMayNotInjectFaultsOrResetThePod) {
  Client alice = NewClient("alice");
  v1::InjectFaultRequest fault;
  fault.set_ipu(0);
  fault.set_kind(v1::FAULT_KIND_IPU_RESET);
  v1::InjectFaultResponse response;
  auto context = alice.Context();
  EXPECT_EQ(alice.pod().InjectFault(context.get(), fault, &response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ResetResponse reset;
  auto reset_context = alice.Context();
  EXPECT_EQ(alice.pod().ResetPod(reset_context.get(), {}, &reset).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  fault.set_kind(v1::FAULT_KIND_UNSPECIFIED);
  Client admin = NewClient("admin");
  auto admin_context = admin.Context();
  EXPECT_EQ(admin.pod().InjectFault(admin_context.get(), fault, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerTest, AnotherUsersPartitionIsPermissionDenied) {
  Client alice = NewClient("alice");
  Client bob = NewClient("bob");
  v1::CreatePartitionRequest create;
  create.set_name("ap");
  create.set_size(2);
  v1::Partition partition;
  auto context = alice.Context();
  ASSERT_TRUE(alice.partition().CreatePartition(context.get(), create, &partition).ok());
  EXPECT_EQ(partition.owner(), "alice");
  EXPECT_EQ(partition.ipus_size(), 2);

  v1::RemovePartitionRequest remove;
  remove.set_name("ap");
  v1::RemovePartitionResponse removed;
  auto bob_context = bob.Context();
  grpc::Status status = bob.partition().RemovePartition(bob_context.get(), remove, &removed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("alice"));

  AttachCall intruder(bob, 1, false, "ap");
  EXPECT_FALSE(intruder.Next());
  EXPECT_EQ(intruder.Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);

  v1::ListPartitionsResponse list;
  auto list_context = bob.Context();
  ASSERT_TRUE(bob.partition().ListPartitions(list_context.get(), {}, &list).ok());
  ASSERT_EQ(list.partitions_size(), 1);
  EXPECT_EQ(list.partitions(0).name(), "ap");
}

TEST_F(ServerTest, MissingUserNameIsUnauthenticated) {
  Client nobody = NewClient("");
  v1::GetPodInfoResponse info;
  auto context = nobody.Context();
  grpc::Status status = nobody.pod().GetPodInfo(context.get(), {}, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status.error_message(), "no user name: pass --user or set $USER");
  AttachCall call(nobody, 1);
  EXPECT_FALSE(call.Next());
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

std::string BufferBytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

// One unary call of `method` with `request` as raw bytes (no stub, no
// serialisation): what a client in any language, or a hostile one, sends.
grpc::Status RawUnaryCall(const std::string& address, const std::string& method,
                          const std::string& request, std::string* response_bytes,
                          const std::string& user = "") {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  if (!user.empty()) context.AddMetadata("x-ipupod-user", user);
  grpc::CompletionQueue cq;
  grpc::Slice slice(request);
  grpc::ByteBuffer buffer(&slice, 1);
  auto call = stub.PrepareUnaryCall(&context, method, buffer, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (response_bytes != nullptr) *response_bytes = BufferBytes(response);
  return status;
}

// HealthCheckRequest{service: ""} encodes to nothing; SERVING is 08 01.
TEST_F(ServerTest, HealthCheckIsServing) {
  std::string bytes;
  grpc::Status status = RawUnaryCall(address(), "/grpc.health.v1.Health/Check", "", &bytes);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(bytes, std::string("\x08\x01", 2)) << "status: SERVING";
}

// Issue 11: request bytes that are no protobuf message at all.
TEST_F(ServerTest, GarbageRequestBytesAreInvalidArgument) {
  const std::string garbage("\x0a\xff\xff\xff\xff\x0f", 6);  // a field longer than the message
  for (const std::string method :
       {"/ipupod.v1.PodService/GetPodInfo", "/ipupod.v1.ExecutionService/StatExecutable"}) {
    grpc::Status status = RawUnaryCall(address(), method, garbage, nullptr, "alice");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << status.error_code() << " '" << status.error_message() << "'";
    EXPECT_THAT(status.error_message(), HasSubstr("is not a valid protobuf message"));
  }
}

// What server reflection answers to list_services, as raw bytes.
std::string ReflectedServices(const std::string& address) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  grpc::ByteBuffer response;
  if (cq.Next(&tag, &ok) && ok) {
    grpc::Slice list_services(std::string("\x3a\x00", 2));  // list_services: ""
    grpc::ByteBuffer request(&list_services, 1);
    call->Write(request, reinterpret_cast<void*>(2));
    if (cq.Next(&tag, &ok) && ok) {
      call->Read(&response, reinterpret_cast<void*>(3));
      cq.Next(&tag, &ok);
    }
  }
  context.TryCancel();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return BufferBytes(response);
}

TEST_F(ServerTest, ReflectionListsTheServices) {
  const std::string bytes = ReflectedServices(address());
  for (const char* service : {"ipupod.v1.PodService", "ipupod.v1.PartitionService",
                              "ipupod.v1.SessionService", "grpc.health.v1.Health"}) {
    EXPECT_THAT(bytes, HasSubstr(service));
  }
}

int ThreadCount() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// Hundreds of clients waiting in the queue are just reactors: the server
// needs no thread per waiter, answers other calls, and hands over in order.
TEST_F(ServerTest, HundredsOfWaitersTieUpNoThreads) {
  constexpr int kWaiters = 200;
  Client alice = NewClient("alice");
  AttachCall holder(alice, 16);
  ASSERT_TRUE(holder.AwaitGrant());
  const int threads_before = ThreadCount();

  grpc::CompletionQueue cq;
  struct Waiter {
    grpc::ClientContext context;
    v1::AttachEvent event;
    std::unique_ptr<grpc::ClientAsyncReader<v1::AttachEvent>> reader;
    grpc::Status status;  // Finish writes it when its tag completes
  };
  std::vector<std::unique_ptr<Waiter>> waiters;
  Client bob = NewClient("bob");
  for (int i = 0; i < kWaiters; ++i) {
    auto w = std::make_unique<Waiter>();
    w->context.AddMetadata("x-ipupod-user", "bob");
    w->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::AttachRequest request;
    request.set_num_ipus(16);
    request.set_wait(true);
    w->reader = bob.session().PrepareAsyncAttach(&w->context, request, &cq);
    w->reader->StartCall(w.get());
    waiters.push_back(std::move(w));
  }
  ASSERT_TRUE(Eventually([&] { return bob.QueueLength() == kWaiters; })) << bob.QueueLength();
  EXPECT_LT(ThreadCount() - threads_before, 32) << "no thread per waiting client";
  absl::Time start = absl::Now();
  EXPECT_EQ(bob.Info().pod().waiting(), static_cast<uint32_t>(kWaiters));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "other calls still answered promptly";

  for (auto& w : waiters) w->context.TryCancel();
  for (int started = 0; started < kWaiters;) {  // drain the StartCall tags
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    ++started;
  }
  for (auto& w : waiters) w->reader->Finish(&w->status, w.get());
  for (int finished = 0; finished < kWaiters; ++finished) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_TRUE(Eventually([&] { return bob.QueueLength() == 0; }));
}

// Forwards one TCP connection to the server; Freeze() stops forwarding in
// both directions while keeping the sockets open, as a stopped (SIGSTOP)
// client or a silently dropped network would.
class FreezableProxy {
 public:
  explicit FreezableProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(listen_fd_, 4);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~FreezableProxy() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  void Freeze() { frozen_ = true; }

 private:
  void Run() {
    pollfd accept_poll{listen_fd_, POLLIN, 0};
    absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!stop_ && absl::Now() < deadline && poll(&accept_poll, 1, 50) == 0) {
    }
    if (stop_ || absl::Now() >= deadline) return;
    int client = accept(listen_fd_, nullptr, nullptr);
    int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      Pump(client, server, deadline);
    }
    close(client);
    close(server);
  }
  void Pump(int a, int b, absl::Time deadline) {
    char buffer[16384];
    while (!stop_ && absl::Now() < deadline) {
      if (frozen_) {
        absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (poll(fds, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
        if (n <= 0) return;
        if (write(fds[1 - i].fd, buffer, static_cast<size_t>(n)) != n) return;
      }
    }
  }

  int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> frozen_{false};
  std::thread thread_;
};

// Keepalive: a holder whose connection goes silent loses its session within
// about one lease (2 s here), and the waiter gets the IPUs.
TEST_F(ServerTest, SilentClientLosesItsSessionWithinTheLease) {
  FreezableProxy proxy(server_->port());
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own connection
  Client alice(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(proxy.port()),
                                         grpc::InsecureChannelCredentials(), args),
               "alice", "");
  AttachCall holder(alice, 16);
  ASSERT_TRUE(holder.AwaitGrant());
  Client bob = NewClient("bob");
  AttachCall waiter(bob, 16, /*wait=*/true);
  auto queued = waiter.Next();
  ASSERT_TRUE(queued && queued->has_queued());

  absl::Time frozen_at = absl::Now();
  proxy.Freeze();
  auto grant = waiter.AwaitGrant();
  ASSERT_TRUE(grant) << waiter.Finish().error_message();
  EXPECT_EQ(grant->user(), "bob");
  EXPECT_LT(absl::Now() - frozen_at, absl::Seconds(6)) << "lease 2 s plus keepalive slack";
  holder.Cancel();
}

TEST_F(ServerTest, ShutdownEndsAttachStreamsUnavailable) {
  Client alice = NewClient("alice");
  AttachCall call(alice, 1);
  ASSERT_TRUE(call.AwaitGrant());
  Client bob = NewClient("bob");
  AttachCall waiter(bob, 16, /*wait=*/true);
  ASSERT_TRUE(waiter.Next());
  std::thread shutdown([&] { server_->Shutdown(); });
  while (call.Next()) {
  }
  while (waiter.Next()) {
  }
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(waiter.Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  shutdown.join();
  server_->Wait();
  server_->Shutdown();  // idempotent
}

TEST_F(ServerTest, PartitionsSurviveARestartSessionsDoNot) {
  Client alice = NewClient("alice");
  v1::CreatePartitionRequest create;
  create.set_name("keep");
  create.set_size(4);
  v1::Partition created;
  auto context = alice.Context();
  ASSERT_TRUE(alice.partition().CreatePartition(context.get(), create, &created).ok());
  std::string session;
  {
    AttachCall call(alice, 2);
    auto grant = call.AwaitGrant();
    ASSERT_TRUE(grant);
    session = grant->session();
    server_.reset();  // the stream ends with the server
    while (call.Next()) {
    }
    EXPECT_FALSE(call.Finish().ok());
  }
  StartServer();
  Client again = NewClient("alice");
  v1::GetPartitionRequest get;
  get.set_name("keep");
  v1::Partition loaded;
  auto get_context = again.Context();
  ASSERT_TRUE(again.partition().GetPartition(get_context.get(), get, &loaded).ok());
  EXPECT_EQ(loaded.owner(), "alice");
  EXPECT_EQ(loaded.ipus(0), created.ipus(0));
  v1::GetSessionRequest get_session;
  get_session.set_session(session);
  v1::SessionInfo info;
  auto session_context = again.Context();
  EXPECT_EQ(again.session().GetSession(session_context.get(), get_session, &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerTest, StartupErrors) {
  ServerConfig open_wide = BaseConfig();
  open_wide.listen = "0.0.0.0:0";
  open_wide.state_dir = state_.path() + "/other";
  EXPECT_EQ(PodServer::Start(open_wide).status().code(), absl::StatusCode::kFailedPrecondition);

  ServerConfig same_state = BaseConfig();  // the running server holds the state dir
  auto second = PodServer::Start(same_state);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use"));

  ServerConfig same_port = BaseConfig();
  same_port.listen = address();
  same_port.state_dir = state_.path() + "/third";
  auto clash = PodServer::Start(same_port);
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable) << clash.status();
  EXPECT_THAT(std::string(clash.status().message()), HasSubstr(address()));
}

class TokenServerTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerConfig config = BaseConfig();
    config.tokens = {{"alice-secret", "alice", false}, {"ops-secret", "ops", true}};
    StartServer(config);
  }
};

TEST_F(TokenServerTest, BadTokenIsUnauthenticatedGoodTokenNamesTheUser) {
  EXPECT_THAT(server_->ReadyLine(), HasSubstr("token mode"));
  for (const std::string& token :
       std::vector<std::string>{"wrong", "alice-secre", std::string(5000, 'x')}) {
    Client mallory(address(), "admin", token);
    v1::GetPodInfoResponse info;
    auto context = mallory.Context();
    grpc::Status status = mallory.pod().GetPodInfo(context.get(), {}, &info);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token.substr(0, 20);
    EXPECT_THAT(status.error_message(), ::testing::Not(HasSubstr("alice")));
  }
  Client no_token(address(), "admin", "");
  v1::GetPodInfoResponse info;
  auto context = no_token.Context();
  EXPECT_EQ(no_token.pod().GetPodInfo(context.get(), {}, &info).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  Client alice(address(), "admin", "alice-secret");  // the claimed name is ignored
  EXPECT_FALSE(alice.Info().pod().open_mode());
  AttachCall call(alice, 1);
  auto grant = call.AwaitGrant();
  ASSERT_TRUE(grant);
  EXPECT_EQ(grant->user(), "alice");
  v1::ResetResponse reset;
  auto reset_context = alice.Context();
  EXPECT_EQ(alice.pod().ResetPod(reset_context.get(), {}, &reset).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  Client ops(address(), "", "ops-secret");
  auto ops_context = ops.Context();
  EXPECT_TRUE(ops.pod().ResetPod(ops_context.get(), {}, &reset).ok());
}

// Issue 11, decided: on a token server, health and reflection still answer
// without a token. Load balancers and orchestrators probe health without
// credentials, and reflection describes only the public ipupod.v1 proto;
// neither reveals pods, users or sessions (docs/design.md). Every ipupod
// service still wants a token.
TEST_F(TokenServerTest, HealthAndReflectionAnswerWithoutAToken) {
  std::string bytes;
  grpc::Status status = RawUnaryCall(address(), "/grpc.health.v1.Health/Check", "", &bytes);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(bytes, std::string("\x08\x01", 2)) << "status: SERVING";
  EXPECT_THAT(ReflectedServices(address()), HasSubstr("ipupod.v1.PodService"));
  status = RawUnaryCall(address(), "/ipupod.v1.PodService/GetPodInfo", "", nullptr, "alice");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace ipupod::server
