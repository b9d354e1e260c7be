#include "server/sharing_config.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ipupod::server {
namespace {

using json::Json;
using json::JsonPath;
using json::ObjectReader;

constexpr size_t kEntriesMax = 1024;  // accounts, QoS, users of one
constexpr int64_t kIpusMax = 1 << 20;
constexpr int64_t kCountMax = 1 << 30;
constexpr int64_t kHoursMax = 24 * 365 * 10;
constexpr int64_t kMinutesMax = 60 * kHoursMax;

absl::StatusOr<double> NonNegative(const Json& v, const JsonPath& at) {
  IPUPOD_ASSIGN_OR_RETURN(double x, json::ReadNumber(v, at));
  if (!(x >= 0 && x <= 1e12)) return at.TypeError("a number from 0 to 1e12", v);
  return x;
}

absl::Status ReadUsers(const Json& v, const JsonPath& at, std::vector<std::string>& users) {
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(v, at, kEntriesMax));
  IPUPOD_ASSIGN_OR_RETURN(users, json::ReadStringList(v, at));
  return absl::OkStatus();
}

absl::Status ReadLimits(const Json& v, const JsonPath& at, sharing::Limits& limits) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, at));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("max_ipus", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t n, json::ReadInt(x, k, 0, kIpusMax));
    limits.max_ipus = static_cast<int>(n);
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("max_jobs_pending", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t n, json::ReadInt(x, k, 0, kCountMax));
    limits.max_jobs_pending = static_cast<int>(n);
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("max_jobs_running", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t n, json::ReadInt(x, k, 0, kCountMax));
    limits.max_jobs_running = static_cast<int>(n);
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("max_ipu_hours", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(limits.max_ipu_hours, NonNegative(x, k));
    return absl::OkStatus();
  }));
  return r.RejectUnknownKeys();
}

absl::StatusOr<sharing::Account> ReadAccount(const Json& v, const JsonPath& at) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, at));
  sharing::Account a;
  IPUPOD_ASSIGN_OR_RETURN(a.name, r.String("name"));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("shares", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(a.shares, NonNegative(x, k));
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent(
      "users", [&](const Json& x, const JsonPath& k) { return ReadUsers(x, k, a.users); }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent(
      "limits", [&](const Json& x, const JsonPath& k) { return ReadLimits(x, k, a.limits); }));
  IPUPOD_RETURN_IF_ERROR(r.RejectUnknownKeys());
  return a;
}

absl::Status ReadQosFlags(ObjectReader& r, sharing::Qos& q) {
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("preemptible", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(q.preemptible, json::ReadBool(x, k));
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("admins_only", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(q.admins_only, json::ReadBool(x, k));
    return absl::OkStatus();
  }));
  return r.IfPresent("users",
                     [&](const Json& x, const JsonPath& k) { return ReadUsers(x, k, q.users); });
}

absl::StatusOr<sharing::Qos> ReadQos(const Json& v, const JsonPath& at) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, at));
  sharing::Qos q;
  IPUPOD_ASSIGN_OR_RETURN(q.name, r.String("name"));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("priority", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(q.priority, NonNegative(x, k));
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("max_wall_minutes", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t n, json::ReadInt(x, k, 0, kMinutesMax));
    q.max_wall = absl::Minutes(n);
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(ReadQosFlags(r, q));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent(
      "limits", [&](const Json& x, const JsonPath& k) { return ReadLimits(x, k, q.limits); }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent(
      "per_user", [&](const Json& x, const JsonPath& k) { return ReadLimits(x, k, q.per_user); }));
  IPUPOD_RETURN_IF_ERROR(r.RejectUnknownKeys());
  return q;
}

template <typename T, typename ReadOne>
absl::Status ReadList(const Json& v, const JsonPath& at, ReadOne read_one, std::vector<T>& out) {
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(v, at, kEntriesMax));
  out.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(T item, read_one(v[i], at.Index(i)));
    out.push_back(std::move(item));
  }
  return absl::OkStatus();
}

absl::Status ReadWeights(const Json& v, const JsonPath& at, sharing::PriorityWeights& w) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(v, at));
  for (auto [key, field] : {std::pair{"age", &w.age}, std::pair{"fair_share", &w.fair_share},
                            std::pair{"size", &w.size}, std::pair{"qos", &w.qos}}) {
    double* target = field;
    IPUPOD_RETURN_IF_ERROR(r.IfPresent(key, [&](const Json& x, const JsonPath& k) {
      IPUPOD_ASSIGN_OR_RETURN(*target, NonNegative(x, k));
      return absl::OkStatus();
    }));
  }
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("age_max_hours", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t n, json::ReadInt(x, k, 1, kHoursMax));
    w.age_max = absl::Hours(n);
    return absl::OkStatus();
  }));
  return r.RejectUnknownKeys();
}

// A duration key in whole units of `unit`, from `min`.
auto DurationKey(absl::Duration* out, absl::Duration unit, int64_t min, int64_t max) {
  return [out, unit, min, max](const Json& x, const JsonPath& k) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(int64_t n, json::ReadInt(x, k, min, max));
    *out = unit * n;
    return absl::OkStatus();
  };
}

absl::Status ReadTimes(ObjectReader& r, sharing::SharingPolicy& p) {
  IPUPOD_RETURN_IF_ERROR(r.IfPresent(
      "usage_half_life_hours", DurationKey(&p.usage_half_life, absl::Hours(1), 1, kHoursMax)));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("usage_window_hours",
                                     DurationKey(&p.usage_window, absl::Hours(1), 1, kHoursMax)));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent(
      "preempt_grace_seconds", DurationKey(&p.preempt_grace, absl::Seconds(1), 0, 24 * 3600)));
  return r.IfPresent("interactive_wall_minutes",
                     DurationKey(&p.interactive_wall, absl::Minutes(1), 0, kMinutesMax));
}

absl::Status ReadSections(ObjectReader& r, sharing::SharingPolicy& p) {
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("order", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(std::string name, json::ReadString(x, k));
    absl::StatusOr<sharing::QueueOrder> order = sharing::ParseQueueOrder(name);
    if (!order.ok()) return k.Error(order.status().message());
    p.order = *order;
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("accounts", [&](const Json& x, const JsonPath& k) {
    return ReadList(x, k, ReadAccount, p.accounts);
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("default_accounts", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(p.default_account, json::ReadStringMap(x, k));
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent(
      "qos", [&](const Json& x, const JsonPath& k) { return ReadList(x, k, ReadQos, p.qos); }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("default_qos", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(p.default_qos, json::ReadString(x, k));
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(r.IfPresent("user_limits", [&](const Json& x, const JsonPath& k) {
    return ReadLimits(x, k, p.user_limits);
  }));
  return r.IfPresent(
      "weights", [&](const Json& x, const JsonPath& k) { return ReadWeights(x, k, p.weights); });
}

}  // namespace

absl::StatusOr<sharing::SharingPolicy> ParseSharing(const Json& value, const JsonPath& at) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(value, at));
  sharing::SharingPolicy p = sharing::DefaultPolicy();
  IPUPOD_RETURN_IF_ERROR(ReadSections(r, p));
  IPUPOD_RETURN_IF_ERROR(ReadTimes(r, p));
  IPUPOD_RETURN_IF_ERROR(r.RejectUnknownKeys());
  const absl::Status valid = sharing::ValidateSharingPolicy(p);
  if (!valid.ok()) return at.Error(valid.message());
  return p;
}

}  // namespace ipupod::server
