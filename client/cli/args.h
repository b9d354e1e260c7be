// File: client/cli/args.h
//
// Validation of command-line values before anything is sent to ipupodd. Bad
// numbers (negative, huge, non-numeric, octal/hex look-alikes) are usage
// errors: INVALID_ARGUMENT with a message naming the option and the accepted
// range; the CLI turns them into exit code 2.
//
// Global options resolve against the environment here too, so the defaults
// ($IPUPOD_SERVER, $IPUPOD_TOKEN, $IPUPOD_USER, $USER) are testable.
//
// Thread safety: pure functions.
#ifndef IPUPOD_CLIENT_CLI_ARGS_H_
#define IPUPOD_CLIENT_CLI_ARGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace ipupod::cli {

// Largest IPU count or id accepted on the command line (a POD256 has 256;
// the limit only stops garbage, the server checks against its pod).
inline constexpr int64_t kIpuCountMax = 65536;
// Largest --timeout / --wait-timeout (seconds): one week.
inline constexpr double kSecondsMax = 7 * 24 * 3600.0;

// A decimal integer in [min, max]: digits only (no sign, spaces, or base
// prefixes). `what` names the value in the message ("--ipus").
absl::StatusOr<int64_t> ParseInteger(absl::string_view text, absl::string_view what, int64_t min,
                                     int64_t max);
// An IPU count: 0..kIpuCountMax (0 is well-formed; the server refuses it
// with INVALID_ARGUMENT, like any count its pod cannot serve).
absl::StatusOr<uint32_t> ParseIpuCount(absl::string_view text, absl::string_view what);
// An IPU id: 0..kIpuCountMax-1.
absl::StatusOr<uint32_t> ParseIpuId(absl::string_view text, absl::string_view what);
// A decimal number of seconds in [0, kSecondsMax] ("30", "0.5"); zero only
// when `allow_zero`.
absl::StatusOr<double> ParseSeconds(absl::string_view text, absl::string_view what,
                                    bool allow_zero);
// A fault kind: ipu-reset | partition-reset | link-reset | full-reset |
// unrecoverable.
absl::StatusOr<v1::FaultKind> ParseFaultKind(absl::string_view text);

// ---------------------------------------------------------------- batch jobs

// Longest `submit --time-limit` (the server refuses more too).
inline constexpr absl::Duration kTimeLimitMax = absl::Hours(24 * 30);
// Longest `job wait --timeout`: a year.
inline constexpr absl::Duration kJobWaitMax = absl::Hours(24 * 365);

// A duration as `submit --time-limit` and `job wait --timeout` take it:
// whole numbers with a unit each, d, h, m, s, largest first and each at
// most once: "90s", "30m", "2h", "1d", "1h30m", "2d12h". INVALID_ARGUMENT
// naming `what` for a number without a unit, another unit, a unit twice or
// out of order, zero, or more than `max`.
absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text, absl::string_view what,
                                             absl::Duration max);
// The inverse for whole seconds: 5400 -> "1h30m", 86400 -> "1d", 0 -> "0s".
std::string FormatDurationArg(uint64_t seconds);

// ---------------------------------------------------------------- accounting

// How far back a relative time may go (`usage --since -Nd`): ten years.
inline constexpr absl::Duration kTimeAgoMax = absl::Hours(24 * 3660);

// A point in time as `usage` and `history` take it (--since, --until):
// RFC 3339 ("2026-11-26T10:00:00Z", "2026-11-26T10:00:00+01:00"), a date
// ("2026-11-26": midnight UTC), "now", or a time before `now` written as
// a minus and a duration of ParseDuration ("-2h", "-7d", "-1d12h").
// INVALID_ARGUMENT naming `what` and showing the forms otherwise.
absl::StatusOr<absl::Time> ParseTimeArg(absl::string_view text, absl::string_view what,
                                        absl::Time now);

// --since and --until of `usage`, `history` and `audit` as Unix
// milliseconds (0: not given, "" for either). INVALID_ARGUMENT for a bad
// time (ParseTimeArg) or a window that does not end after it starts.
struct TimeWindow {
  int64_t since_ms = 0;
  int64_t until_ms = 0;
};
absl::StatusOr<TimeWindow> ParseTimeWindow(absl::string_view since, absl::string_view until);

// `submit --sweep "NAME=V1,V2,..."`: one job per value of the optimizer
// variable NAME (letters, digits and '_', not starting with a digit), 1 to
// kSweepValuesMax finite numbers, none twice. INVALID_ARGUMENT saying what
// is wrong and showing the shape otherwise.
inline constexpr size_t kSweepValuesMax = 64;
struct SweepArg {
  std::string variable;
  std::vector<double> values;
};
absl::StatusOr<SweepArg> ParseSweep(absl::string_view text);

// A job id: "17", or "17.3" for a job of a sweep. INVALID_ARGUMENT naming
// `what` ("--after") otherwise.
absl::Status CheckJobId(absl::string_view text, absl::string_view what);

// `jobs --state S`: one state or a comma list ("running", "PENDING,RUNNING"),
// case-insensitive. INVALID_ARGUMENT naming the states otherwise.
absl::StatusOr<std::vector<v1::JobState>> ParseJobStates(absl::string_view text);

// The global options as given on the command line (empty = not given).
struct GlobalFlags {
  std::string server;
  std::string token;
  std::string user;
  std::string timeout;  // seconds, as text
  bool json = false;
  std::string tls_ca;  // PEM file paths (client/transport_security.h)
  std::string tls_cert;
  std::string tls_key;
};

// `compile --opt`: optimizer attributes "k=v,k2=v2" (repeatable; each call
// parses one string). Values are numbers (1e-3 and inf accepted, NaN not)
// or true/false for flags (1/0). Names are checked later, against the
// optimizer. INVALID_ARGUMENT for an item without '=', an empty name, a value
// that is not a number, or a name given twice (`into` is unchanged then).
absl::Status ParseOptimizerAttributes(absl::string_view text, std::map<std::string, double>& into,
                                      absl::string_view flag = "--opt");

// `compile --opt-group`: one param group, "WEIGHT,...:NAME=VALUE,..." (the
// weights, then after the last ':' attributes as --opt takes them), e.g.
// "fc.bias,ln.weight:weight_decay=0". INVALID_ARGUMENT without ':', without
// a weight or an attribute, for an empty or repeated weight name, or what
// ParseOptimizerAttributes refuses.
absl::Status ParseParamGroup(absl::string_view text, std::vector<std::string>& weights,
                             std::map<std::string, double>& attrs);

// Reads an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(absl::string_view)>;
EnvLookup ProcessEnv();

// Flags over environment over defaults:
//   server  --server, $IPUPOD_SERVER, 127.0.0.1:50051
//   token   --token, $IPUPOD_TOKEN
//   user    --user, $IPUPOD_USER, $USER, "nobody"
//   timeout --timeout, 30 s
//   TLS     --tls-ca, $IPUPOD_TLS_CA; --tls-cert, $IPUPOD_TLS_CERT;
//           --tls-key, $IPUPOD_TLS_KEY
// The CLI then checks them with client::CheckTransportSecurity (a token in
// clear text to an address that is not loopback, a certificate without its
// key) before a command that connects runs (client/cli/app.cc).
absl::StatusOr<client::ClientOptions> ResolveClientOptions(const GlobalFlags& flags,
                                                           const EnvLookup& env);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_ARGS_H_
