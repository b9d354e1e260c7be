#include "scheduler/sharing/policy.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ipupod::sharing {
namespace {

constexpr int kMaxNameLength = 64;

bool Contains(const std::vector<std::string>& v, absl::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength || !absl::ascii_isalnum(name[0])) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

void CheckLimits(absl::string_view what, const Limits& l, std::vector<std::string>& problems) {
  if (l.max_ipus < 0 || l.max_jobs_pending < 0 || l.max_jobs_running < 0 ||
      !(l.max_ipu_hours >= 0)) {
    problems.push_back(absl::StrCat(what, ": limits must not be negative (0 = no limit)"));
  }
}

void CheckAccounts(const SharingPolicy& p, std::vector<std::string>& problems) {
  std::set<std::string> names;
  for (const Account& a : p.accounts) {
    if (!ValidName(a.name)) {
      problems.push_back(absl::StrFormat(
          "account name \"%s\" must be 1-%d characters of [A-Za-z0-9._-], starting with a letter "
          "or digit",
          a.name, kMaxNameLength));
    }
    if (!names.insert(a.name).second)
      problems.push_back(absl::StrCat("account ", a.name, " is defined twice"));
    if (!(a.shares > 0)) {
      problems.push_back(
          absl::StrFormat("account %s: shares must be greater than 0 (got %g)", a.name, a.shares));
    }
    CheckLimits(absl::StrCat("account ", a.name), a.limits, problems);
  }
  for (const auto& [user, account] : p.default_account) {
    const Account* a = FindAccount(p, account);
    if (a == nullptr) {
      problems.push_back(absl::StrFormat("default account of %s: no account %s", user, account));
    } else if (!Contains(a->users, user)) {
      problems.push_back(
          absl::StrFormat("default account of %s: %s is not a member of %s", user, user, account));
    }
  }
}

void CheckQos(const SharingPolicy& p, std::vector<std::string>& problems) {
  std::set<std::string> names;
  for (const Qos& q : p.qos) {
    if (!ValidName(q.name))
      problems.push_back(absl::StrFormat("QoS name \"%s\" is not valid", q.name));
    if (!names.insert(q.name).second)
      problems.push_back(absl::StrCat("QoS ", q.name, " is defined twice"));
    if (!(q.priority >= 0)) {
      problems.push_back(absl::StrFormat("QoS %s: priority must not be negative", q.name));
    }
    if (q.max_wall < absl::ZeroDuration()) {
      problems.push_back(absl::StrFormat("QoS %s: max_wall must not be negative", q.name));
    }
    CheckLimits(absl::StrCat("QoS ", q.name), q.limits, problems);
    CheckLimits(absl::StrCat("QoS ", q.name, " per user"), q.per_user, problems);
  }
  if (FindQos(p, p.default_qos) == nullptr) {
    problems.push_back(absl::StrFormat("default QoS %s is not defined", p.default_qos));
  }
}

void CheckWeights(const SharingPolicy& p, std::vector<std::string>& problems) {
  const PriorityWeights& w = p.weights;
  if (!(w.age >= 0 && w.fair_share >= 0 && w.size >= 0 && w.qos >= 0)) {
    problems.push_back("priority weights must not be negative");
  }
  if (w.age_max <= absl::ZeroDuration()) problems.push_back("age_max must be greater than 0");
  if (p.usage_half_life <= absl::ZeroDuration()) {
    problems.push_back("usage_half_life must be greater than 0");
  }
  if (p.usage_window <= absl::ZeroDuration())
    problems.push_back("usage_window must be greater than 0");
  if (p.preempt_grace < absl::ZeroDuration() || p.interactive_wall < absl::ZeroDuration()) {
    problems.push_back("preempt_grace and interactive_wall must not be negative");
  }
}

std::string QosNames(const SharingPolicy& p) {
  return absl::StrJoin(p.qos, ", ", [](std::string* out, const Qos& q) { out->append(q.name); });
}

std::vector<std::string> AccountsOf(const SharingPolicy& p, absl::string_view user) {
  std::vector<std::string> names;
  for (const Account& a : p.accounts) {
    if (Contains(a.users, user)) names.push_back(a.name);
  }
  return names;
}

absl::StatusOr<std::string> ResolveAccount(const SharingPolicy& p, absl::string_view user,
                                           bool admin, absl::string_view account) {
  if (p.accounts.empty()) {
    if (account.empty() || account == user) return std::string(user);
    return absl::InvalidArgumentError(absl::StrFormat(
        "no accounts are configured on this server: every user is charged to an account of "
        "their own name; leave --account out (got %s)",
        account));
  }
  const std::vector<std::string> mine = AccountsOf(p, user);
  const std::string theirs = mine.empty() ? "none" : absl::StrJoin(mine, ", ");
  if (account.empty()) {
    auto it = p.default_account.find(std::string(user));
    if (it != p.default_account.end()) return it->second;
    if (!mine.empty()) return mine.front();
    return absl::PermissionDeniedError(absl::StrFormat(
        "user %s belongs to no account; an admin must add %s to one (sharing.accounts in the "
        "server config)",
        user, user));
  }
  if (FindAccount(p, account) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("account %s does not exist; yours: %s", account, theirs));
  }
  if (!admin && !Contains(mine, account)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("user %s is not a member of account %s; yours: %s", user, account, theirs));
  }
  return std::string(account);
}

}  // namespace

absl::string_view QueueOrderName(QueueOrder order) {
  switch (order) {
    case QueueOrder::kFifo:
      return "fifo";
    case QueueOrder::kBackfill:
      return "backfill";
    case QueueOrder::kMultifactor:
      return "multifactor";
  }
  return "multifactor";
}

absl::StatusOr<QueueOrder> ParseQueueOrder(absl::string_view name) {
  for (QueueOrder o : {QueueOrder::kFifo, QueueOrder::kBackfill, QueueOrder::kMultifactor}) {
    if (name == QueueOrderName(o)) return o;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown queue order \"%s\"; use fifo, backfill or multifactor", name));
}

std::vector<Qos> DefaultQos() {
  Qos normal;
  normal.name = "normal";
  normal.priority = 100;
  Qos high;
  high.name = "high";
  high.priority = 1000;
  high.admins_only = true;
  Qos scavenger;
  scavenger.name = "scavenger";
  scavenger.preemptible = true;
  return {normal, high, scavenger};
}

SharingPolicy DefaultPolicy() {
  SharingPolicy p;
  p.qos = DefaultQos();
  return p;
}

absl::Status ValidateSharingPolicy(const SharingPolicy& policy) {
  std::vector<std::string> problems;
  CheckAccounts(policy, problems);
  CheckQos(policy, problems);
  CheckLimits("user limits", policy.user_limits, problems);
  CheckWeights(policy, problems);
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("sharing policy: ", absl::StrJoin(problems, "; ")));
}

absl::StatusOr<Association> Resolve(const SharingPolicy& policy, absl::string_view user, bool admin,
                                    absl::string_view account, absl::string_view qos) {
  const std::string qos_name = qos.empty() ? policy.default_qos : std::string(qos);
  const Qos* q = FindQos(policy, qos_name);
  if (q == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("QoS %s does not exist; the QoS are: %s", qos_name, QosNames(policy)));
  }
  const bool restricted = q->admins_only || !q->users.empty();
  if (restricted && !admin && !Contains(q->users, user)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "user %s may not use QoS %s (%s); use %s, or ask an admin to allow it", user, q->name,
        q->users.empty() ? "admins only"
                         : absl::StrCat("admins and ", absl::StrJoin(q->users, ", ")),
        policy.default_qos));
  }
  absl::StatusOr<std::string> resolved = ResolveAccount(policy, user, admin, account);
  if (!resolved.ok()) return resolved.status();
  return Association{*std::move(resolved), q->name};
}

const Account* FindAccount(const SharingPolicy& policy, absl::string_view name) {
  for (const Account& a : policy.accounts) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

const Qos* FindQos(const SharingPolicy& policy, absl::string_view name) {
  for (const Qos& q : policy.qos) {
    if (q.name == name) return &q;
  }
  return nullptr;
}

double SharesOf(const SharingPolicy& policy, absl::string_view account) {
  if (policy.accounts.empty()) return 1.0;
  const Account* a = FindAccount(policy, account);
  return a == nullptr ? 0.0 : a->shares;
}

}  // namespace ipupod::sharing
