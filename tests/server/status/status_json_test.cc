#include "server/status/status_json.h"

#include <string>

#include <gtest/gtest.h>

namespace ipupod::status {
namespace {

scheduler::IpuView Ipu(int id, device::IpuState state, std::string owner = "",
                       std::string partition = "") {
  scheduler::IpuView ipu;
  ipu.id = id;
  ipu.state = state;
  ipu.owner = owner;
  ipu.session = owner.empty() ? "" : "s1-1";
  ipu.partition = partition;
  return ipu;
}

StatusInputs Pod4() {
  StatusInputs in;
  in.server = ServerInfo{"0.1.0", "127.0.0.1:50051", "open", false, 1000};
  in.viewer = scheduler::Caller{"alice", false};
  in.now_unix_ms = 61'000;
  in.pod.name = "POD4";
  in.pod.num_ipus = 4;
  in.pod.free_ipus = 1;
  in.pod.ipus = {Ipu(0, device::IpuState::kAttached, "alice", "exp1"),
                 Ipu(1, device::IpuState::kBusy, "alice", "exp1"),
                 Ipu(2, device::IpuState::kFailed), Ipu(3, device::IpuState::kIdle)};
  in.pod.ipus[2].failure_reason = "unrecoverable fault injected by admin";
  scheduler::PartitionView exp1;
  exp1.name = "exp1";
  exp1.block = {0, 2};
  exp1.owner = "alice";
  in.pod.partitions = {exp1};
  scheduler::SessionView session;
  session.id = "s1-1";
  session.user = "alice";
  session.ipus = {0, 1};
  in.pod.sessions = {session};
  return in;
}

TEST(StatusJsonTest, CountsIpusByStateAndKeepsEveryIpu) {
  nlohmann::json s = StatusJson(Pod4());
  ASSERT_EQ(s["ipus"].size(), 4u);
  EXPECT_EQ(s["ipus"][1]["state"], "busy");
  EXPECT_EQ(s["ipus"][0]["owner"], "alice");
  EXPECT_EQ(s["ipus"][2]["failure_reason"], "unrecoverable fault injected by admin");
  EXPECT_EQ(s["summary"]["ipus_by_state"]["attached"], 1);
  EXPECT_EQ(s["summary"]["ipus_by_state"]["failed"], 1);
  EXPECT_EQ(s["summary"]["ipus_by_state"]["resetting"], 0);  // every state named, even at 0
  EXPECT_EQ(s["summary"]["ipus_allocated"], 2);
  EXPECT_EQ(s["partitions"][0]["first_ipu"], 0);
  EXPECT_EQ(s["partitions"][0]["size"], 2);
  EXPECT_EQ(s["sessions"]["rows"][0]["ipus"], nlohmann::json({0, 1}));
  EXPECT_EQ(s["server"]["viewer"]["user"], "alice");
}

TEST(StatusJsonTest, LongListsAreCappedWithTheirTotal) {
  StatusInputs in = Pod4();
  for (int i = 0; i < 10'000; ++i) {
    scheduler::QueueEntryView w;
    w.position = i + 1;
    w.user = absl::StrCat("u", i % 7);  // (GCC 12 warns on "u" + std::to_string at -O3)
    w.num_ipus = 1;
    in.queue.push_back(w);
  }
  nlohmann::json s = StatusJson(in);
  EXPECT_EQ(s["queue"]["total"], 10'000);
  EXPECT_EQ(s["queue"]["rows"].size(), kMaxRows);
  EXPECT_TRUE(s["queue"]["truncated"]);
  EXPECT_EQ(s["queue"]["rows"][0]["position"], 1);
  EXPECT_EQ(s["summary"]["waiting"], 10'000);
  EXPECT_FALSE(s["events"]["truncated"]);
}

TEST(StatusJsonTest, JobsEventsAndUsageCarryTheirFields) {
  StatusInputs in = Pod4();
  batch::JobView job;
  job.record.id = "17";
  job.record.user = "bob";
  job.record.spec.name = "gpt2-eval";
  job.record.state = jobs::JobState::kPending;
  job.record.reason = "Resources";
  job.queue_position = 1;
  in.active_jobs = {job};
  in.events = {PodEvent{5000, "fault", "unrecoverable", "injected", "IPU 2", {2}, {}}};
  in.usage = {accounting::UsageRow{"alice", 7200, 3600, 2, 1}};
  nlohmann::json s = StatusJson(in);
  EXPECT_EQ(s["jobs"]["active"]["rows"][0]["state"], "PENDING");
  EXPECT_EQ(s["jobs"]["active"]["rows"][0]["reason"], "Resources");
  EXPECT_EQ(s["events"]["rows"][0]["target"], "IPU 2");
  EXPECT_DOUBLE_EQ(s["usage"]["by_user"]["rows"][0]["ipu_hours"], 2.0);
  EXPECT_DOUBLE_EQ(s["usage"]["by_user"]["rows"][0]["job_ipu_hours"], 1.0);
}

}  // namespace
}  // namespace ipupod::status
