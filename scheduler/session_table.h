// File: scheduler/session_table.h
//
// The pod's sessions: each by its id, the ticket that asked for it, and which
// session holds each IPU. One part of the Scheduler (scheduler_impl.h), kept
// apart so that the rule "no IPU in two sessions" lives in one place.
//
// Invariants (CheckInvariants reports the first one broken):
//   * every session is stored under its id, and its ticket names it;
//   * its block is aligned and inside the pod (allocator.h IsAlignedIn);
//   * an IPU is held by at most one session: exactly the IPUs of the
//     sessions' blocks are held, each by the session whose block holds it.
// Add and Remove keep them; a caller that changes, through Find or ForEach, a
// stored session's id, ticket or block breaks them (REQUIRES: it does not).
// Every other field of a Session is the caller's to change.
//
// Ownership: the table owns its Sessions; a pointer or reference it returns
// stays valid until the next Add or Remove.
//
// Thread safety: not thread-safe; SchedulerImpl holds its lock (mu_) around
// every call.
// Errors: none returned. Add's REQUIRES are programmer errors, checked with
// IPUPOD_CHECK (common/check.h): a breach aborts.
#ifndef IPUPOD_SCHEDULER_SESSION_TABLE_H_
#define IPUPOD_SCHEDULER_SESSION_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "device/device_ids.h"
#include "scheduler/allocator.h"
#include "scheduler/scheduler.h"

namespace ipupod::scheduler {

struct Session {
  std::string id;
  std::string ticket;
  std::string user;
  device::Block block;
  int requested_ipus = 0;
  std::string partition;
  int64_t attached_unix_ms = 0;
  std::string client;
  bool needs_load = false;
  uint64_t load_generation = 0;              // scheduler.h SessionOperation
  std::shared_ptr<AttachObserver> observer;  // may be null
  std::string account;
  std::string qos;
  std::string job;
  absl::Time submitted;
  absl::Time granted;
  absl::Time expected_end = absl::InfiniteFuture();  // not known
  absl::Time charged_until;                          // usage charged up to here
  std::vector<std::string> usage_keys;               // its limit scopes (sharing.cc)
  double waited_seconds = 0;
  double fragmentation_delay_seconds = 0;
  bool preemptible = false;                              // its QoS's
  absl::Time preempt_deadline = absl::InfiniteFuture();  // set once notified
  // An interactive session's time limit (its --time-limit, else its QoS's
  // max wall time; zero = none) and the timer that ends it there.
  absl::Duration wall_limit = absl::ZeroDuration();
  uint64_t wall_timer_id = 0;
};

class SessionTable {
 public:
  using Map = absl::flat_hash_map<std::string, Session>;

  // An empty table for a pod of `pod_size` IPUs.
  // REQUIRES: 1 <= pod_size <= device::kMaxPodIpus.
  explicit SessionTable(int pod_size);
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // Stores `session`: its block's IPUs become held by it and its ticket names
  // it. Returns it as stored.
  // REQUIRES: its id and ticket are new; its block is aligned, inside the pod
  // and holds no IPU another session holds.
  Session& Add(Session session);
  // Removes the session `id` and returns it (its IPUs no longer held, its
  // ticket naming nothing); nullopt if there is none.
  std::optional<Session> Remove(absl::string_view id);

  // The session `id`; null if there is none.
  Session* Find(absl::string_view id);
  const Session* Find(absl::string_view id) const;
  // The id of the session granted to `ticket`; null if none (the ticket still
  // waits, ended, or never was).
  const std::string* IdOfTicket(absl::string_view ticket) const;
  // The id of the session holding `ipu`, "" if none. REQUIRES: 0 <= ipu < pod size.
  const std::string& HolderOf(int ipu) const;
  // The session holding `ipu`; null if none. REQUIRES: 0 <= ipu < pod size.
  Session* SessionOf(int ipu);
  const Session* SessionOf(int ipu) const;
  // The IPUs some session holds.
  IpuMask Held() const { return held_; }

  size_t size() const { return sessions_.size(); }
  bool empty() const { return sessions_.empty(); }
  // Every session, by id, in no particular order.
  const Map& all() const { return sessions_; }
  // Calls `fn` on every session, in no particular order; it may change any
  // field but id, ticket and block (see the invariants above).
  void ForEach(const std::function<void(Session&)>& fn);

  // OK, or INTERNAL naming the first broken invariant (see above). Costs
  // O(pod size + sessions).
  absl::Status CheckInvariants() const;

 private:
  const int pod_size_;
  Map sessions_;                                           // by id
  absl::flat_hash_map<std::string, std::string> tickets_;  // ticket -> id
  std::vector<std::string> holder_;                        // per IPU; "" = none
  IpuMask held_;                                           // IPUs with a holder
};

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_SESSION_TABLE_H_
