// File: server/sharing_config.h
//
// The "sharing" section of the server config (server/config.h) read into a
// sharing::SharingPolicy. Every key is optional; an empty section is
// sharing::DefaultPolicy(). docs/configuration.md shows a whole example.
//
//   "sharing": {
//     "order": "multifactor",                  fifo | backfill | multifactor
//     "accounts": [{"name": "vision", "shares": 3, "users": ["alice", "bob"],
//                   "limits": {...}}],          none: every user is its own account
//     "default_accounts": {"bob": "vision"},    else a user's first account
//     "qos": [{"name": "normal", "priority": 100, "max_wall_minutes": 0,
//              "preemptible": false, "users": [], "admins_only": false,
//              "limits": {...}, "per_user": {...}}],   given: replaces the defaults
//     "default_qos": "normal",
//     "user_limits": {"max_ipus": 0, "max_jobs_pending": 0, "max_jobs_running": 0,
//                     "max_ipu_hours": 0},      0 = no limit; the same keys in
//                                              accounts' and QoS' limits
//     "weights": {"age": 1000, "fair_share": 10000, "size": 100, "qos": 10000,
//                 "age_max_hours": 24},
//     "usage_half_life_hours": 168,
//     "usage_window_hours": 168,
//     "preempt_grace_seconds": 30,
//     "interactive_wall_minutes": 0
//   }
//
// Errors: INVALID_ARGUMENT naming the key path ("config key
// 'sharing.accounts[1].shares': ..."), unknown keys with a did-you-mean, and
// the policy's own checks (sharing::ValidateSharingPolicy).
//
// Thread safety: pure functions.
#ifndef IPUPOD_SERVER_SHARING_CONFIG_H_
#define IPUPOD_SERVER_SHARING_CONFIG_H_

#include "absl/status/statusor.h"
#include "common/json_reader.h"
#include "scheduler/sharing/policy.h"

namespace ipupod::server {

absl::StatusOr<sharing::SharingPolicy> ParseSharing(const json::Json& value,
                                                    const json::JsonPath& at);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_SHARING_CONFIG_H_
