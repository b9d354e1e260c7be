// File: scheduler/sharing/policy.h
//
// The sharing policy of one pod: accounts (teams) with shares, QoS levels,
// limits per user, account and QoS, the weights of the multifactor priority
// and the queue order. It is plain data, parsed from the server config
// (server/config.h, "sharing") and replaced whole on SIGHUP; the Scheduler
// holds the one in force as a shared_ptr<const SharingPolicy>.
//
// Defaults (an empty "sharing" section): no accounts configured, so every
// user is an account of their own with one share (fair sharing between users
// out of the box); QoS `normal` (the default, priority 100), `high` (priority
// 1000, admins only unless `users` lists others) and `scavenger` (priority 0,
// preemptible); no limits; multifactor order. The formula and
// its factors are in scheduler/sharing/priority.h and docs/scheduling.md.
//
// Errors: ValidateSharingPolicy and Resolve return INVALID_ARGUMENT (a bad
// policy, an unknown account or QoS) or PERMISSION_DENIED (a user asking for
// an account or QoS not theirs), each naming what was wrong and what to do.
//
// Thread safety: plain values and pure functions.
#ifndef IPUPOD_SHARING_POLICY_H_
#define IPUPOD_SHARING_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ipupod::sharing {

// The order of the queue walk. kMultifactor is the default; the others exist
// to compare against (ipupod-replay --policy) and for sites that want them.
enum class QueueOrder {
  kFifo,         // arrival order; the head blocks everyone behind it (no backfill)
  kBackfill,     // arrival order with backfill (time limits used)
  kMultifactor,  // priority order (scheduler/sharing/priority.h) with backfill
};
absl::string_view QueueOrderName(QueueOrder order);  // "fifo", "backfill", "multifactor"
absl::StatusOr<QueueOrder> ParseQueueOrder(absl::string_view name);

// Limits of one user, account or QoS; 0 means no limit. An account's or a
// QoS's limits are for all its users together, except `per_user`, which
// limits each user within it (Slurm's MaxTRESPerUser).
struct Limits {
  int max_ipus = 0;          // IPUs held at once
  int max_jobs_pending = 0;  // batch jobs PENDING (refused at submit beyond it)
  int max_jobs_running = 0;  // batch jobs RUNNING
  double max_ipu_hours = 0;  // IPU-hours used in the rolling usage window
  bool any() const {
    return max_ipus > 0 || max_jobs_pending > 0 || max_jobs_running > 0 || max_ipu_hours > 0;
  }
};

struct Account {
  std::string name;
  double shares = 1;               // > 0
  std::vector<std::string> users;  // members; a user may be in several accounts
  Limits limits;                   // for the account as a whole
};

struct Qos {
  std::string name;
  double priority = 0;                             // >= 0; its factor is priority / the largest
  absl::Duration max_wall = absl::ZeroDuration();  // zero = none
  bool preemptible = false;                        // only preemptible work is ever preempted
  std::vector<std::string> users;                  // empty = everyone (`high`: admins only)
  bool admins_only = false;
  Limits limits;    // the QoS as a whole
  Limits per_user;  // each user within the QoS
};

// Weights of the multifactor priority (scheduler/sharing/priority.h).
struct PriorityWeights {
  double age = 1000;
  double fair_share = 10000;
  double size = 100;
  double qos = 10000;
  absl::Duration age_max = absl::Hours(24);  // age factor reaches 1 here
};

struct SharingPolicy {
  QueueOrder order = QueueOrder::kMultifactor;
  std::vector<Account> accounts;                       // empty = one per user
  std::map<std::string, std::string> default_account;  // user -> account (else its first)
  std::vector<Qos> qos;                                // see DefaultQos()
  std::string default_qos = "normal";
  Limits user_limits;  // every user
  PriorityWeights weights;
  absl::Duration usage_half_life = absl::Hours(24 * 7);
  absl::Duration usage_window = absl::Hours(24 * 7);  // for max_ipu_hours
  absl::Duration preempt_grace = absl::Seconds(30);   // interactive sessions' notice
  // Time an interactive session is expected to hold its IPUs when its QoS has
  // no max_wall (used only by backfill; zero = unknown, never backfilled over).
  absl::Duration interactive_wall = absl::ZeroDuration();
};

// normal (default), high (weight 1000, admins only), scavenger (preemptible).
std::vector<Qos> DefaultQos();
// A policy with the defaults above.
SharingPolicy DefaultPolicy();

// INVALID_ARGUMENT naming every problem: shares not > 0, names repeated or
// invalid, a default account the user is not in, an unknown default QoS,
// negative limits or weights, durations not > 0 where needed.
absl::Status ValidateSharingPolicy(const SharingPolicy& policy);

// What a request is charged to and ordered by.
struct Association {
  std::string account;
  std::string qos;
};

// The account and QoS of a request by `user` that asked for `account` and
// `qos` ("" = the default). NOT_FOUND-like mistakes are INVALID_ARGUMENT
// naming the choices; a QoS or account the user may not use is
// PERMISSION_DENIED. Admins may use every QoS and any account.
absl::StatusOr<Association> Resolve(const SharingPolicy& policy, absl::string_view user, bool admin,
                                    absl::string_view account, absl::string_view qos);

// The account or QoS named, or nullptr. With no accounts configured, every
// user's account is a one-share account named after the user (AccountOf
// returns nullptr for it; use SharesOf).
const Account* FindAccount(const SharingPolicy& policy, absl::string_view name);
const Qos* FindQos(const SharingPolicy& policy, absl::string_view name);
double SharesOf(const SharingPolicy& policy, absl::string_view account);

}  // namespace ipupod::sharing

#endif  // IPUPOD_SHARING_POLICY_H_
