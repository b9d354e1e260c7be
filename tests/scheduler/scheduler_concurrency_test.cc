// Many threads attaching and releasing on one POD16 with wait: no IPU is ever
// in two sessions, every request is granted, and all finish in bounded time.
// The invariant checkers are validated single-threaded first.
#include <array>
#include <atomic>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace ipupod::scheduler::testing {
namespace {

constexpr int kPodIpus = 16;

// Records which session holds each IPU, as reported by OnGranted. Claim fails
// if an IPU is already held: two sessions would share it.
class Ledger {
 public:
  bool Claim(const std::string& session, const std::vector<int>& ipus) {
    sync::MutexLock lock(&mu_);
    for (int i : ipus) {
      if (!owner_[i].empty()) return false;
    }
    for (int i : ipus) owner_[i] = session;
    return true;
  }
  // Called by a client before it releases: the IPUs are still held until
  // Release, so freeing early can never hide a double grant.
  void Free(const std::vector<int>& ipus) {
    sync::MutexLock lock(&mu_);
    for (int i : ipus) owner_[i].clear();
  }

 private:
  absl::Mutex mu_;
  std::array<std::string, kPodIpus> owner_ ABSL_GUARDED_BY(mu_);
};

// "" when the snapshot is consistent: every IPU in at most one session, each
// IPU's session field matching the session lists, blocks aligned.
std::string CheckPod(const PodView& pod) {
  std::vector<std::string> holder(pod.num_ipus);
  for (const SessionView& s : pod.sessions) {
    const int size = static_cast<int>(s.ipus.size());
    if (size == 0 || !device::IsPowerOfTwo(size) || s.ipus[0] % size != 0) {
      return absl::StrCat("session ", s.id, " has a misaligned block");
    }
    for (int i : s.ipus) {
      if (!holder[i].empty()) return absl::StrCat("IPU ", i, " in ", holder[i], " and ", s.id);
      holder[i] = s.id;
    }
  }
  for (const IpuView& ipu : pod.ipus) {
    if (ipu.session != holder[ipu.id]) return absl::StrCat("IPU ", ipu.id, " session mismatch");
  }
  return "";
}

// Records in `error` (if still empty) the first broken invariant of the
// pod: run after every operation of every client.
void CheckInvariantsInto(const Scheduler& sched, std::string& error) {
  if (!error.empty()) return;
  absl::Status status = CheckSchedulerInvariants(sched);
  if (!status.ok()) error = status.ToString();
}

class LedgerObserver : public RecordingObserver {
 public:
  explicit LedgerObserver(Ledger* ledger) : ledger_(ledger) {}
  void OnGranted(const SessionView& session) override {
    if (!ledger_->Claim(session.id, session.ipus)) violations_.fetch_add(1);
    RecordingObserver::OnGranted(session);
  }
  static std::atomic<int> violations_;

 private:
  Ledger* ledger_;
};
std::atomic<int> LedgerObserver::violations_{0};

TEST(ConcurrencyCheckerTest, LedgerDetectsASharedIpu) {
  Ledger ledger;
  EXPECT_TRUE(ledger.Claim("s1", {0, 1}));
  EXPECT_FALSE(ledger.Claim("s2", {1, 2}));
  EXPECT_TRUE(ledger.Claim("s2", {2, 3}));
  ledger.Free({0, 1});
  EXPECT_TRUE(ledger.Claim("s3", {0, 1}));
}

TEST(ConcurrencyCheckerTest, PodCheckDetectsOverlapAndMismatch) {
  PodView pod;
  pod.num_ipus = 4;
  for (int i = 0; i < 4; ++i) {
    IpuView ipu;
    ipu.id = i;
    pod.ipus.push_back(ipu);
  }
  EXPECT_EQ(CheckPod(pod), "");
  SessionView a;
  a.id = "s1";
  a.ipus = {0, 1};
  pod.sessions.push_back(a);
  EXPECT_NE(CheckPod(pod), "");  // IPUs 0-1 do not name s1
  pod.ipus[0].session = pod.ipus[1].session = "s1";
  EXPECT_EQ(CheckPod(pod), "");
  SessionView b;
  b.id = "s2";
  b.ipus = {1};
  pod.sessions.push_back(b);
  EXPECT_NE(CheckPod(pod), "");  // IPU 1 twice
  pod.sessions.back().ipus = {1, 2};
  EXPECT_NE(CheckPod(pod), "");  // misaligned
}

TEST(ConcurrencyCheckerTest, PodCheckPassesOnARealScheduler) {
  SchedulerOptions o;
  absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(o, nullptr);
  ASSERT_TRUE(s.ok());
  for (int n : {4, 2, 8, 1}) ASSERT_TRUE((*s)->Attach(Caller{"u"}, Req(n), nullptr).ok());
  EXPECT_EQ(CheckPod((*s)->GetPod()), "");
}

TEST(SchedulerConcurrencyTest, ThirtyTwoThreadsNeverShareAnIpu) {
  constexpr int kThreads = 32;
  constexpr int kRounds = 25;
  SchedulerOptions o;
  o.pod = *device::PodFromSize(kPodIpus);
  absl::StatusOr<std::unique_ptr<Scheduler>> created = Scheduler::Create(o, nullptr);
  ASSERT_TRUE(created.ok());
  Scheduler& sched = **created;
  Ledger ledger;
  std::atomic<int> grants{0}, failures{0}, queued{0};
  absl::Notification go;  // start together so that requests really contend
  std::vector<std::string> pod_errors(kThreads);
  const absl::Time start = absl::Now();

  auto client = [&](int index) {
    sync::WaitForNotificationWithTimeout(&go, absl::Seconds(30));
    std::mt19937 rng(1000 + index);
    const Caller caller{absl::StrCat("user", index % 5)};
    for (int round = 0; round < kRounds; ++round) {
      AttachRequest r = Req(1 << (rng() % 5), /*wait=*/true);  // 1..16
      r.wait_timeout = absl::Seconds(60);
      auto observer = std::make_shared<LedgerObserver>(&ledger);
      absl::StatusOr<std::string> ticket = sched.Attach(caller, r, observer);
      CheckInvariantsInto(sched, pod_errors[index]);
      if (!ticket.ok() || !observer->WaitGranted(absl::Seconds(60))) {
        failures.fetch_add(1);
        if (ticket.ok()) sched.Release(*ticket);
        continue;
      }
      grants.fetch_add(1);
      if (!observer->queued().empty()) queued.fetch_add(1);
      const SessionView s = *observer->granted();
      // Hold the IPUs for a few operations. The short pause models the work a
      // client does while attached; it is not a wait for a condition, and it
      // makes threads interleave even when each would fit in one timeslice.
      for (int op = 0; op < 4; ++op) {
        if (!sched.GetSession(caller, s.id).ok()) failures.fetch_add(1);
        CheckInvariantsInto(sched, pod_errors[index]);
        absl::SleepFor(absl::Microseconds(50));
      }
      if (round % 5 == 0 && pod_errors[index].empty()) pod_errors[index] = CheckPod(sched.GetPod());
      ledger.Free(s.ipus);
      sched.Release(*ticket);
      CheckInvariantsInto(sched, pod_errors[index]);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(client, i);
  sync::Notify(&go);
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(LedgerObserver::violations_.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(grants.load(), kThreads * kRounds);
  EXPECT_GT(queued.load(), 0);  // the wait queue was exercised
  std::printf("%d of %d grants waited in the queue\n", queued.load(), grants.load());
  for (const std::string& e : pod_errors) EXPECT_EQ(e, "");
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  PodView pod = sched.GetPod();
  EXPECT_EQ(pod.free_ipus, kPodIpus);
  EXPECT_EQ(pod.waiting, 0);
  EXPECT_TRUE(pod.sessions.empty());
  EXPECT_EQ(CheckSchedulerInvariants(sched), absl::OkStatus());
}

}  // namespace
}  // namespace ipupod::scheduler::testing
