// The batch-job client calls (client/jobs.cc) and commands (submit, jobs,
// job ...) against an in-process fake JobService: uploads skipped when the
// blob is stored and chunked otherwise, resumable and verified downloads,
// events, reconnecting followers, and the exit code of each final state.
// The real server is tested end to end in tests/integration/.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "client/cli/app.h"
#include "client/cli/job_output.h"
#include "client/client.h"
#include "client/ipx_header.h"
#include "common/sha256.h"
#include "common/sync.h"
#include "tests/support/eventually.h"
#include "tests/support/temp_dir.h"

namespace ipupod::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kFakeChunkBytes = 64 * 1024;

std::string Bytes(size_t size, uint32_t seed) {
  std::string bytes(size, '\0');
  for (char& c : bytes) {
    seed = seed * 1103515245u + 12345u;
    c = static_cast<char>(seed >> 24);
  }
  return bytes;
}

std::string Hex(absl::string_view bytes) { return DigestHex(Sha256Of(bytes)); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// What one PutBlob stream carried.
struct Upload {
  std::string sha256;
  uint64_t total_bytes = 0;
  std::vector<size_t> chunk_sizes;
  bool later_chunks_named = false;  // a message after the first set sha256 or total_bytes
};

v1::JobEvent Event(uint64_t seq, const std::string& kind, v1::JobState state = v1::RUNNING) {
  v1::JobEvent event;
  event.set_seq(seq);
  event.set_unix_ms(1795694400000 + static_cast<int64_t>(seq) * 1000);
  event.set_kind(kind);
  if (kind == "state") event.set_state(state);
  if (kind == "run") {
    event.set_run(static_cast<int64_t>(seq));
    event.add_losses(0.5f);
  }
  return event;
}

// Jobs by id; blobs by hash; results by "id/name". Knobs say how streams
// misbehave once.
class FakeJobs final : public v1::JobService::Service {
 public:
  absl::Mutex mu;
  std::map<std::string, std::string> blobs ABSL_GUARDED_BY(mu);
  std::vector<Upload> uploads ABSL_GUARDED_BY(mu);
  std::map<std::string, v1::Job> jobs ABSL_GUARDED_BY(mu);
  std::map<std::string, std::vector<v1::JobEvent>> events ABSL_GUARDED_BY(mu);
  std::map<std::string, std::string> results ABSL_GUARDED_BY(mu);
  v1::SubmitJobRequest last_submit ABSL_GUARDED_BY(mu);
  v1::ListJobsRequest last_list ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> watch_from ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> fetch_offsets ABSL_GUARDED_BY(mu);
  uint64_t drop_fetch_after_bytes ABSL_GUARDED_BY(mu) = 0;  // 0: never
  bool corrupt_fetch ABSL_GUARDED_BY(mu) = false;
  int drop_watches ABSL_GUARDED_BY(mu) = 0;  // this many WatchJob calls fail UNAVAILABLE
  // A followed job that is not finished ends with this state (UNSPECIFIED:
  // the stream stays open until the client goes).
  v1::JobState finish_when_followed ABSL_GUARDED_BY(mu) = v1::JOB_STATE_UNSPECIFIED;

  // A job with one result file (`bytes`) under `name`.
  void AddJob(const std::string& id, v1::JobState state, const std::string& name = "",
              const std::string& bytes = "") {
    v1::Job job;
    job.set_id(id);
    job.set_user("alice");
    job.set_state(state);
    if (!name.empty()) {
      v1::ResultFile* file = job.add_results();
      file->set_name(name);
      file->set_size_bytes(bytes.size());
      file->set_sha256(Hex(bytes));
    }
    sync::MutexLock lock(&mu);
    jobs[id] = job;
    results[id + "/" + name] = bytes;
  }

  grpc::Status StatBlob(grpc::ServerContext*, const v1::StatBlobRequest* request,
                        v1::BlobRef* ref) override {
    sync::MutexLock lock(&mu);
    auto it = blobs.find(request->sha256());
    if (it == blobs.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such blob");
    ref->set_sha256(it->first);
    ref->set_size_bytes(it->second.size());
    return grpc::Status::OK;
  }

  grpc::Status PutBlob(grpc::ServerContext*, grpc::ServerReader<v1::BlobChunk>* reader,
                       v1::BlobRef* ref) override {
    Upload upload;
    std::string data;
    v1::BlobChunk chunk;
    for (bool first = true; reader->Read(&chunk); first = false) {
      if (first) {
        upload.sha256 = chunk.sha256();
        upload.total_bytes = chunk.total_bytes();
      } else if (!chunk.sha256().empty() || chunk.total_bytes() != 0) {
        upload.later_chunks_named = true;
      }
      upload.chunk_sizes.push_back(chunk.data().size());
      data += chunk.data();
    }
    sync::MutexLock lock(&mu);
    uploads.push_back(upload);
    if (Hex(data) != upload.sha256 || data.size() != upload.total_bytes) {
      return grpc::Status(grpc::StatusCode::DATA_LOSS, "the bytes do not hash to sha256");
    }
    blobs[upload.sha256] = data;
    ref->set_sha256(upload.sha256);
    ref->set_size_bytes(data.size());
    return grpc::Status::OK;
  }

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override {
    sync::MutexLock lock(&mu);
    last_submit = *request;
    const size_t values =
        request->sweep().empty()
            ? 0
            : std::count(request->sweep().begin(), request->sweep().end(), ',') + 1;
    for (size_t i = 0; i < std::max<size_t>(values, 1); ++i) {
      v1::Job* job = response->add_jobs();
      job->set_id(values == 0 ? "5" : "5." + std::to_string(i));
      job->set_state(v1::PENDING);
      job->set_reason("Resources");
      *job->mutable_spec() = request->spec();
      jobs[job->id()] = *job;
    }
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override {
    sync::MutexLock lock(&mu);
    last_list = *request;
    for (const auto& [id, job] : jobs) *response->add_jobs() = job;
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const v1::JobRequest* request,
                      v1::Job* response) override {
    sync::MutexLock lock(&mu);
    auto it = jobs.find(request->id());
    if (it == jobs.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + request->id());
    }
    *response = it->second;
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const v1::JobRequest* request,
                         v1::Job* response) override {
    sync::MutexLock lock(&mu);
    auto it = jobs.find(request->id());
    if (it == jobs.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job");
    it->second.set_state(v1::CANCELLED);
    it->second.set_reason("cancelled by alice");
    *response = it->second;
    return grpc::Status::OK;
  }

  grpc::Status DeleteJob(grpc::ServerContext*, const v1::JobRequest* request,
                         v1::DeleteJobResponse* response) override {
    sync::MutexLock lock(&mu);
    if (jobs.erase(request->id()) == 0) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no");
    response->set_freed_bytes(1500000);
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override {
    std::vector<v1::JobEvent> to_send;
    bool finished = false;
    v1::JobState finish = v1::JOB_STATE_UNSPECIFIED;
    {
      sync::MutexLock lock(&mu);
      watch_from.push_back(request->from_event());
      for (const v1::JobEvent& e : events[request->id()]) {
        if (e.seq() >= request->from_event()) to_send.push_back(e);
      }
      if (drop_watches > 0) {
        --drop_watches;
        for (const v1::JobEvent& e : to_send) writer->Write(e);
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "ipupodd is shutting down");
      }
      auto it = jobs.find(request->id());
      if (it == jobs.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job");
      finished = it->second.state() >= v1::COMPLETED;
      finish = finish_when_followed;
      if (request->follow() && !finished && finish != v1::JOB_STATE_UNSPECIFIED) {
        it->second.set_state(finish);
        v1::JobEvent end = Event(events[request->id()].size(), "state", finish);
        events[request->id()].push_back(end);
        to_send.push_back(end);
      }
    }
    for (const v1::JobEvent& e : to_send) writer->Write(e);
    if (!request->follow() || finished || finish != v1::JOB_STATE_UNSPECIFIED) {
      return grpc::Status::OK;
    }
    test_support::Eventually([&] { return context->IsCancelled(); }, absl::Seconds(30));
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }

  grpc::Status FetchResult(grpc::ServerContext*, const v1::FetchResultRequest* request,
                           grpc::ServerWriter<v1::ResultChunk>* writer) override {
    std::string bytes;
    uint64_t drop_after = 0;
    {
      sync::MutexLock lock(&mu);
      fetch_offsets.push_back(request->offset());
      auto it = results.find(request->id() + "/" + request->name());
      if (it == results.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no result");
      bytes = it->second;
      if (corrupt_fetch) bytes[bytes.size() / 2] ^= 1;
      drop_after = std::exchange(drop_fetch_after_bytes, 0);
    }
    if (request->offset() > bytes.size()) {
      return grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "offset past the end");
    }
    for (uint64_t at = request->offset(); at < bytes.size(); at += kFakeChunkBytes) {
      if (drop_after > 0 && at >= drop_after) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "ipupodd is shutting down");
      }
      v1::ResultChunk chunk;
      chunk.set_offset(at);
      chunk.set_data(bytes.substr(at, kFakeChunkBytes));
      writer->Write(chunk);
    }
    return grpc::Status::OK;
  }
};

class JobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&fake_);
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

  struct CliResult {
    int code;
    std::string out;
    std::string err;
  };
  CliResult Ipupod(std::vector<std::string> args) {
    args.insert(args.begin(), {"ipupod", "--server", options_.server, "--user", "alice"});
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    cli::EnvLookup no_env = [](absl::string_view) -> std::optional<std::string> {
      return std::nullopt;
    };
    int code = cli::RunCli(static_cast<int>(argv.size()), argv.data(), out, err, no_env);
    return {code, out.str(), err.str()};
  }

  FakeJobs fake_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  ClientOptions options_;
  test_support::TempDir dir_;
};

// ---------------------------------------------------------------- library

TEST_F(JobsTest, PutBlobFileUploadsInMebibyteChunksOnceThenFindsItStored) {
  const std::string bytes = Bytes(2 * kMiB + kMiB / 2, 1);
  WriteFile(dir_.sub("data.npz"), bytes);
  std::unique_ptr<Client> client = Connect();
  absl::StatusOr<v1::BlobRef> first = client->PutBlobFile(dir_.sub("data.npz"), "inputs");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->already_stored());
  EXPECT_EQ(first->sha256(), Hex(bytes));
  EXPECT_EQ(first->size_bytes(), bytes.size());
  absl::StatusOr<v1::BlobRef> again = client->PutBlobFile(dir_.sub("data.npz"), "inputs");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_stored());
  EXPECT_EQ(again->sha256(), Hex(bytes));
  sync::MutexLock lock(&fake_.mu);
  ASSERT_EQ(fake_.uploads.size(), 1u) << "the second call only asked StatBlob";
  const Upload& upload = fake_.uploads[0];
  EXPECT_EQ(upload.sha256, Hex(bytes));
  EXPECT_EQ(upload.total_bytes, bytes.size());
  EXPECT_EQ(upload.chunk_sizes, (std::vector<size_t>{kMiB, kMiB, kMiB / 2}));
  EXPECT_FALSE(upload.later_chunks_named) << "only the first chunk carries sha256 and size";
  EXPECT_EQ(fake_.blobs[Hex(bytes)], bytes);
}

TEST_F(JobsTest, PutBlobFileOfAMissingFileSendsNothing) {
  absl::StatusOr<v1::BlobRef> ref = Connect()->PutBlobFile(dir_.sub("none.npz"), "--inputs file");
  EXPECT_EQ(ref.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ref.status().message(), HasSubstr("--inputs file '"));
  sync::MutexLock lock(&fake_.mu);
  EXPECT_TRUE(fake_.uploads.empty());
}

TEST_F(JobsTest, SubmitJobReturnsEveryJobOfASweep) {
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_train(true);
  request.set_sweep("lr=0.1,0.01,0.001");
  absl::StatusOr<std::vector<v1::Job>> jobs = Connect()->SubmitJob(request);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[2].id(), "5.2");
  EXPECT_EQ(Connect()->GetJob("9").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobsTest, WatchJobDeliversEventsInOrderAndHonoursItsTimeout) {
  fake_.AddJob("7", v1::RUNNING);
  {
    sync::MutexLock lock(&fake_.mu);
    fake_.events["7"] = {Event(0, "state"), Event(1, "run"), Event(2, "run")};
  }
  std::unique_ptr<Client> client = Connect();
  std::vector<uint64_t> seen;
  auto record = [&seen](const v1::JobEvent& e) { seen.push_back(e.seq()); };
  ASSERT_TRUE(client->WatchJob("7", 1, /*follow=*/false, record).ok());
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2}));
  seen.clear();
  const absl::Time start = absl::Now();
  absl::Status followed = client->WatchJob("7", 0, /*follow=*/true, record, absl::Seconds(1));
  EXPECT_EQ(followed.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(followed.message(), HasSubstr("watching job 7: still open after 1s"));
  EXPECT_EQ(seen, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(JobsTest, FetchResultResumesADroppedDownloadFromItsPartFile) {
  const std::string bytes = Bytes(kMiB + 300000, 2);
  fake_.AddJob("3", v1::COMPLETED, "outputs.npz", bytes);
  {
    sync::MutexLock lock(&fake_.mu);
    fake_.drop_fetch_after_bytes = 10 * kFakeChunkBytes;
  }
  std::unique_ptr<Client> client = Connect();
  const v1::ResultFile file = client->GetJob("3")->results(0);
  const std::string dest = dir_.sub("outputs.npz");
  absl::StatusOr<FetchedResult> dropped = client->FetchResult("3", file, dest);
  EXPECT_EQ(dropped.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(dropped.status().message(), HasSubstr("fetch again to resume"));
  EXPECT_FALSE(std::filesystem::exists(dest));
  EXPECT_EQ(std::filesystem::file_size(dest + ".part"), 10 * kFakeChunkBytes);

  std::vector<uint64_t> progress;
  absl::StatusOr<FetchedResult> resumed = client->FetchResult(
      "3", file, dest, [&progress](uint64_t done, uint64_t) { progress.push_back(done); });
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_from, 10 * kFakeChunkBytes);
  EXPECT_EQ(ReadFile(dest), bytes);
  EXPECT_FALSE(std::filesystem::exists(dest + ".part"));
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back(), bytes.size());
  sync::MutexLock lock(&fake_.mu);
  EXPECT_EQ(fake_.fetch_offsets, (std::vector<uint64_t>{0, 10 * kFakeChunkBytes}));
}

TEST_F(JobsTest, FetchResultRemovesACorruptDownloadAndRestartsAStalePart) {
  const std::string bytes = Bytes(200000, 3);
  fake_.AddJob("3", v1::COMPLETED, "report.json", bytes);
  {
    sync::MutexLock lock(&fake_.mu);
    fake_.corrupt_fetch = true;
  }
  std::unique_ptr<Client> client = Connect();
  const v1::ResultFile file = client->GetJob("3")->results(0);
  const std::string dest = dir_.sub("report.json");
  absl::StatusOr<FetchedResult> corrupt = client->FetchResult("3", file, dest);
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(corrupt.status().message(), HasSubstr("arrived corrupted"));
  EXPECT_FALSE(std::filesystem::exists(dest));
  EXPECT_FALSE(std::filesystem::exists(dest + ".part")) << "resuming corrupt bytes never works";
  {
    sync::MutexLock lock(&fake_.mu);
    fake_.corrupt_fetch = false;
  }
  WriteFile(dest + ".part", Bytes(300000, 4));  // longer than the file: another version's
  absl::StatusOr<FetchedResult> fetched = client->FetchResult("3", file, dest);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(fetched->resumed_from, 0u);
  EXPECT_EQ(ReadFile(dest), bytes);
}

// ---------------------------------------------------------------- CLI

std::string IpxBytes(const std::string& payload) {
  std::string ipx(kIpxMagic.data(), kIpxMagic.size());
  ipx.resize(kIpxHeaderBytes, '\0');
  ipx[kIpxVersionOffset] = static_cast<char>(kIpxFormatVersion);
  const Sha256Digest hash = Sha256Of(payload);
  ipx.replace(kIpxHashOffset, kIpxHashBytes, reinterpret_cast<const char*>(hash.data()),
              hash.size());
  return ipx + payload;
}

TEST_F(JobsTest, SubmitUploadsEachFileOnceAndPrintsTheJobIds) {
  const std::string ipx = IpxBytes("payload");
  WriteFile(dir_.sub("mlp.ipx"), ipx);
  WriteFile(dir_.sub("data.npz"), "inputs");
  const std::vector<std::string> submit = {
      "submit", dir_.sub("mlp.ipx"), "--inputs",   dir_.sub("data.npz"), "--train", "--epochs",
      "2",      "--sweep",           "lr=0.1,0.01"};
  CliResult first = Ipupod(submit);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out, "submitted job 5.0\nsubmitted job 5.1\n");
  EXPECT_THAT(first.err, HasSubstr("uploaded executable " + dir_.sub("mlp.ipx")));
  EXPECT_THAT(first.err, HasSubstr("uploaded inputs " + dir_.sub("data.npz")));
  {
    sync::MutexLock lock(&fake_.mu);
    const v1::SubmitJobRequest request = fake_.last_submit;  // a copy, read under the lock
    EXPECT_EQ(request.spec().executable_sha256(), Hex(ipx)) << "the blob's hash: the whole file";
    EXPECT_EQ(request.spec().inputs().sha256(), Hex("inputs"));
    EXPECT_EQ(request.spec().inputs().format(), "npz");
    EXPECT_EQ(request.spec().epochs(), 2);
    EXPECT_EQ(request.sweep(), "lr=0.1,0.01");
  }
  CliResult again = Ipupod(submit);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("executable " + dir_.sub("mlp.ipx") + " already on the server"));
  EXPECT_THAT(again.err, Not(HasSubstr("uploaded")));
  CliResult json =
      Ipupod({"--json", "submit", dir_.sub("mlp.ipx"), "--inputs", dir_.sub("data.npz")});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("{\"jobs\":[{\"id\":\"5\""));
}

TEST_F(JobsTest, SubmitRefusesBadFilesBeforeUploadingAnything) {
  WriteFile(dir_.sub("model.onnx"), "not an ipx, but long enough to hold a header, surely....");
  WriteFile(dir_.sub("data.npz"), "inputs");
  CliResult onnx = Ipupod({"submit", dir_.sub("model.onnx"), "--inputs", dir_.sub("data.npz")});
  EXPECT_EQ(onnx.code, 9);
  EXPECT_THAT(onnx.err, HasSubstr("not an ipupod executable"));
  CliResult missing = Ipupod({"submit", dir_.sub("model.onnx"), "--inputs", dir_.sub("x.npz")});
  EXPECT_EQ(missing.code, 3);
  CliResult usage = Ipupod(
      {"submit", dir_.sub("model.onnx"), "--inputs", dir_.sub("data.npz"), "--time-limit", "0s"});
  EXPECT_EQ(usage.code, 2);
  EXPECT_THAT(usage.err, HasSubstr("--time-limit: '0s' is zero"));
  sync::MutexLock lock(&fake_.mu);
  EXPECT_TRUE(fake_.uploads.empty());
}

TEST_F(JobsTest, JobWaitExitsWithACodePerFinalState) {
  const std::vector<std::pair<v1::JobState, int>> cases = {
      {v1::COMPLETED, 0}, {v1::FAILED, 30}, {v1::CANCELLED, 31}, {v1::TIMEOUT, 32}};
  for (const auto& [state, code] : cases) {
    fake_.AddJob("1", state);
    CliResult r = Ipupod({"job", "wait", "1"});
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_THAT(r.out, HasSubstr("job 1 " + std::string(cli::JobStateText(state))));
  }
}

TEST_F(JobsTest, JobWaitFollowsARunningJobToItsEndThroughAServerRestart) {
  fake_.AddJob("2", v1::RUNNING);
  {
    sync::MutexLock lock(&fake_.mu);
    fake_.events["2"] = {Event(0, "state"), Event(1, "run")};
    fake_.drop_watches = 1;
    fake_.finish_when_followed = v1::FAILED;
  }
  CliResult r = Ipupod({"--json", "job", "wait", "2"});
  EXPECT_EQ(r.code, 30) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"state\":\"FAILED\""));
  sync::MutexLock lock(&fake_.mu);
  EXPECT_EQ(fake_.watch_from, (std::vector<uint64_t>{0, 2})) << "resumed after the last event";
}

TEST_F(JobsTest, JobWaitTimeoutExits33WhileTheJobGoesOn) {
  fake_.AddJob("4", v1::RUNNING);
  const absl::Time start = absl::Now();
  CliResult r = Ipupod({"job", "wait", "4", "--timeout", "1s"});
  EXPECT_EQ(r.code, 33) << r.err;
  EXPECT_THAT(r.out, HasSubstr("job 4 is still RUNNING"));
  EXPECT_THAT(r.err, HasSubstr("gave up waiting after 1s"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_EQ(Ipupod({"job", "wait", "4", "--timeout", "0s"}).code, 2);
  EXPECT_EQ(Ipupod({"job", "wait", "nope"}).code, 2) << "not a job id";
  EXPECT_EQ(Ipupod({"job", "wait", "404"}).code, 3) << "no such job";
}

TEST_F(JobsTest, JobFetchWritesEveryResultAndKeepsCompleteOnes) {
  const std::string bytes = Bytes(150000, 5);
  fake_.AddJob("6", v1::COMPLETED, "outputs.npz", bytes);
  const std::string out = dir_.sub("results/6");
  CliResult first = Ipupod({"job", "fetch", "6", "-o", out});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr("wrote " + out + "/outputs.npz"));
  EXPECT_EQ(ReadFile(out + "/outputs.npz"), bytes);
  CliResult second = Ipupod({"--json", "job", "fetch", "6", "-o", out});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_THAT(second.out, HasSubstr("\"already_there\":true"));
  fake_.AddJob("8", v1::RUNNING);
  CliResult running = Ipupod({"job", "fetch", "8", "-o", out});
  EXPECT_EQ(running.code, 7);
  EXPECT_THAT(running.err, HasSubstr("has no results yet"));
}

TEST_F(JobsTest, JobFetchRefusesAResultNameThatLeavesTheDirectory) {
  fake_.AddJob("6", v1::COMPLETED, "../escape", "bytes");
  CliResult r = Ipupod({"job", "fetch", "6", "-o", dir_.sub("out")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("not a plain file name"));
  EXPECT_FALSE(std::filesystem::exists(dir_.sub("escape")));
}

TEST_F(JobsTest, JobsLogsShowCancelAndDeleteTalkToTheServer) {
  fake_.AddJob("2", v1::PENDING);
  {
    sync::MutexLock lock(&fake_.mu);
    fake_.events["2"] = {Event(0, "state", v1::PENDING), Event(1, "run")};
  }
  CliResult logs = Ipupod({"job", "logs", "2"});
  ASSERT_EQ(logs.code, 0) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr("  state       PENDING\n"));
  EXPECT_THAT(logs.out, HasSubstr("  run         run 1; loss 0.5\n"));
  CliResult list = Ipupod({"jobs", "--state", "pending,failed", "--user", "bob"});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("ID  NAME  USER   ACCOUNT  QOS  STATE"));
  {
    sync::MutexLock lock(&fake_.mu);
    EXPECT_EQ(fake_.last_list.user(), "bob");
    EXPECT_TRUE(fake_.last_list.all()) << "a finished state was asked for";
    EXPECT_EQ(fake_.last_list.states_size(), 2);
  }
  EXPECT_THAT(Ipupod({"job", "show", "2"}).out, HasSubstr("state:         PENDING\n"));
  CliResult cancel = Ipupod({"job", "cancel", "2"});
  EXPECT_EQ(cancel.out, "cancelled job 2; it is CANCELLED (cancelled by alice)\n");
  EXPECT_EQ(Ipupod({"job", "delete", "2"}).out, "deleted job 2; freed 1.5 MB\n");
  EXPECT_EQ(Ipupod({"job", "show", "2"}).code, 3);
}

}  // namespace
}  // namespace ipupod::client
