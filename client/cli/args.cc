#include "client/cli/args.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/transport_security.h"
#include "common/status_macros.h"

namespace ipupod::cli {
namespace {

bool AllDigits(absl::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// digits[.digits] only: no sign, exponent, inf or nan.
bool PlainDecimal(absl::string_view text) {
  size_t dot = text.find('.');
  if (dot == absl::string_view::npos) return AllDigits(text);
  absl::string_view whole = text.substr(0, dot);
  absl::string_view frac = text.substr(dot + 1);
  return (!whole.empty() || !frac.empty()) && (whole.empty() || AllDigits(whole)) &&
         (frac.empty() || AllDigits(frac));
}

std::string Quote(absl::string_view text) { return absl::StrCat("'", text, "'"); }

}  // namespace

absl::StatusOr<int64_t> ParseInteger(absl::string_view text, absl::string_view what, int64_t min,
                                     int64_t max) {
  std::string range = absl::StrCat("a whole number from ", min, " to ", max);
  if (!AllDigits(text)) {
    if (!text.empty() && text[0] == '-' && AllDigits(text.substr(1))) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", Quote(text), " is negative; use ", range));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", Quote(text), " is not a number; use ", range));
  }
  int64_t value = 0;
  // Too many digits for int64 fails SimpleAtoi: that is "too large" too.
  if (!absl::SimpleAtoi(text, &value) || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", Quote(text), " is too large; use ", range));
  }
  if (value < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", Quote(text), " is too small; use ", range));
  }
  return value;
}

absl::StatusOr<uint32_t> ParseIpuCount(absl::string_view text, absl::string_view what) {
  absl::StatusOr<int64_t> value = ParseInteger(text, what, 0, kIpuCountMax);
  if (!value.ok()) return value.status();
  return static_cast<uint32_t>(*value);
}

absl::StatusOr<uint32_t> ParseIpuId(absl::string_view text, absl::string_view what) {
  absl::StatusOr<int64_t> value = ParseInteger(text, what, 0, kIpuCountMax - 1);
  if (!value.ok()) return value.status();
  return static_cast<uint32_t>(*value);
}

absl::StatusOr<double> ParseSeconds(absl::string_view text, absl::string_view what,
                                    bool allow_zero) {
  std::string range = absl::StrCat("seconds, ", allow_zero ? "0" : "more than 0", " to ",
                                   static_cast<int64_t>(kSecondsMax), " (e.g. 30 or 0.5)");
  double value = 0;
  if (!PlainDecimal(text) || !absl::SimpleAtod(text, &value)) {
    if (!text.empty() && text[0] == '-') {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", Quote(text), " is negative; use ", range));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", Quote(text), " is not a number of seconds; use ", range));
  }
  if (value > kSecondsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", Quote(text), " is too large; use ", range));
  }
  if (value == 0 && !allow_zero) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", Quote(text), " must be more than 0; use ", range));
  }
  return value;
}

absl::Status ParseOptimizerAttributes(absl::string_view text, std::map<std::string, double>& into,
                                      absl::string_view flag) {
  constexpr absl::string_view kExample = "; use NAME=VALUE,... e.g. lr=0.001,momentum=0.9";
  std::map<std::string, double> parsed = into;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    const absl::string_view name = absl::StripAsciiWhitespace(item.substr(0, eq));
    if (eq == absl::string_view::npos || name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": ", Quote(item), " is not NAME=VALUE", kExample));
    }
    const absl::string_view value = absl::StripAsciiWhitespace(item.substr(eq + 1));
    double number = 0;
    if (value == "true" || value == "false") {
      number = value == "true" ? 1.0 : 0.0;
    } else if (!absl::SimpleAtod(value, &number) || std::isnan(number)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", name, ": ", Quote(value),
                                                     " is not a number or true/false", kExample));
    }
    if (!parsed.emplace(std::string(name), number).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", name, " is given twice; give each attribute once"));
    }
  }
  into = std::move(parsed);
  return absl::OkStatus();
}

// Split at the last ':' so that the attributes (which hold none) stay whole
// whatever the weight names hold.
absl::Status ParseParamGroup(absl::string_view text, std::vector<std::string>& weights,
                             std::map<std::string, double>& attrs) {
  constexpr absl::string_view kForm =
      "; use WEIGHT,...:NAME=VALUE,... e.g. fc.bias,ln.weight:weight_decay=0";
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--opt-group ", Quote(text), " has no ':' before its attributes", kForm));
  }
  std::vector<std::string> names;
  for (absl::string_view w : absl::StrSplit(text.substr(0, colon), ',')) {
    w = absl::StripAsciiWhitespace(w);
    if (w.empty() || std::find(names.begin(), names.end(), w) != names.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--opt-group ", Quote(text), w.empty() ? " has an empty weight name" : " repeats ",
          w.empty() ? "" : Quote(w), kForm));
    }
    names.emplace_back(w);
  }
  std::map<std::string, double> parsed;
  IPUPOD_RETURN_IF_ERROR(ParseOptimizerAttributes(text.substr(colon + 1), parsed, "--opt-group"));
  if (parsed.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--opt-group ", Quote(text),
                     " sets no attribute (its weights would take the optimizer's)", kForm));
  }
  weights = std::move(names);
  attrs = std::move(parsed);
  return absl::OkStatus();
}

absl::StatusOr<v1::FaultKind> ParseFaultKind(absl::string_view text) {
  if (text == "ipu-reset") return v1::FAULT_KIND_IPU_RESET;
  if (text == "link-reset") return v1::FAULT_KIND_LINK_RESET;
  if (text == "partition-reset") return v1::FAULT_KIND_PARTITION_RESET;
  if (text == "full-reset") return v1::FAULT_KIND_FULL_RESET;
  if (text == "unrecoverable") return v1::FAULT_KIND_UNRECOVERABLE;
  return absl::InvalidArgumentError(
      absl::StrCat("--kind: ", Quote(text),
                   " is not a fault kind; use ipu-reset, link-reset, partition-reset, "
                   "full-reset or unrecoverable"));
}

// ---------------------------------------------------------------- batch jobs

namespace {

constexpr absl::string_view kDurationUnits = "dhms";
constexpr int64_t kDurationUnitSeconds[] = {86400, 3600, 60, 1};
// Digits in one part of a duration: enough for any sensible one, and the
// sum of four parts cannot overflow.
constexpr size_t kDurationDigitsMax = 9;

size_t LeadingDigits(absl::string_view text) {
  size_t n = 0;
  while (n < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[n]))) ++n;
  return n;
}

}  // namespace

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text, absl::string_view what,
                                             absl::Duration max) {
  const std::string shape =
      absl::StrCat("; use whole numbers with units d, h, m, s, largest first (e.g. 90s, 30m, 2h, ",
                   "1d or 1h30m), at most ", FormatDurationArg(absl::ToInt64Seconds(max)));
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", Quote(text), " ", why, shape));
  };
  if (text.empty()) return bad("is empty");
  int64_t seconds = 0;
  size_t next_unit = 0;  // units must come largest first, each once
  for (absl::string_view rest = text; !rest.empty();) {
    const size_t digits = LeadingDigits(rest);
    if (digits == 0) return bad("is not a duration");
    if (digits > kDurationDigitsMax) return bad("is too large");
    if (digits == rest.size()) return bad("has a number without a unit");
    const size_t unit = kDurationUnits.find(rest[digits]);
    if (unit == absl::string_view::npos) {
      return bad(absl::StrCat("has the unit '", rest.substr(digits, 1), "', not d, h, m or s"));
    }
    if (unit < next_unit) return bad("repeats a unit or puts a smaller one first");
    int64_t number = 0;
    (void)absl::SimpleAtoi(rest.substr(0, digits), &number);  // digits only, at most 9
    seconds += number * kDurationUnitSeconds[unit];
    next_unit = unit + 1;
    rest.remove_prefix(digits + 1);
  }
  if (seconds == 0) return bad("is zero; it must be more than 0");
  if (absl::Seconds(seconds) > max) return bad("is too long");
  return absl::Seconds(seconds);
}

absl::StatusOr<absl::Time> ParseTimeArg(absl::string_view text, absl::string_view what,
                                        absl::Time now) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", Quote(text), " ", why,
        "; use RFC 3339 (2026-11-26T10:00:00Z), a date (2026-11-26, midnight UTC), now, or a "
        "time ago such as -2h, -7d or -1d12h"));
  };
  const std::string given(absl::StripAsciiWhitespace(text));
  if (given.empty()) return bad("is empty");
  if (given == "now") return now;
  if (given[0] == '-') {
    absl::StatusOr<absl::Duration> ago =
        ParseDuration(absl::string_view(given).substr(1), what, kTimeAgoMax);
    if (!ago.ok()) return ago.status();
    return now - *ago;
  }
  if (!absl::ascii_isdigit(static_cast<unsigned char>(given[0]))) return bad("is not a time");
  absl::Time t;
  std::string error;
  if (given.find_first_of("Tt") != std::string::npos) {
    if (absl::ParseTime(absl::RFC3339_full, given, &t, &error)) return t;
    return bad("is not an RFC 3339 time");
  }
  if (absl::ParseTime("%Y-%m-%d", given, absl::UTCTimeZone(), &t, &error)) return t;
  return bad("is not a date");
}

absl::StatusOr<TimeWindow> ParseTimeWindow(absl::string_view since, absl::string_view until) {
  const absl::Time now = absl::Now();
  TimeWindow w;
  if (!since.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(const absl::Time t, ParseTimeArg(since, "--since", now));
    w.since_ms = std::max<int64_t>(1, absl::ToUnixMillis(t));
  }
  if (!until.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(const absl::Time t, ParseTimeArg(until, "--until", now));
    w.until_ms = std::max<int64_t>(1, absl::ToUnixMillis(t));
  }
  if (w.since_ms > 0 && w.until_ms > 0 && w.since_ms >= w.until_ms) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--since ", since, " is not before --until ", until,
        ": the window is empty; give --since an earlier time (e.g. --since -7d --until now)"));
  }
  return w;
}

std::string FormatDurationArg(uint64_t seconds) {
  if (seconds == 0) return "0s";
  std::string text;
  for (size_t i = 0; i < kDurationUnits.size(); ++i) {
    const uint64_t unit = static_cast<uint64_t>(kDurationUnitSeconds[i]);
    if (seconds >= unit) {
      absl::StrAppend(&text, seconds / unit, kDurationUnits.substr(i, 1));
      seconds %= unit;
    }
  }
  return text;
}

namespace {

bool IsVariableName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<SweepArg> ParseSweep(absl::string_view text) {
  constexpr absl::string_view kShape =
      "; use NAME=V1,V2,... with an optimizer variable and numbers, e.g. --sweep "
      "\"lr=0.1,0.01,0.001\"";
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--sweep: ", why, kShape));
  };
  const size_t eq = text.find('=');
  if (eq == absl::string_view::npos) return bad(absl::StrCat(Quote(text), " has no '='"));
  SweepArg sweep;
  sweep.variable = std::string(absl::StripAsciiWhitespace(text.substr(0, eq)));
  if (!IsVariableName(sweep.variable)) {
    return bad(absl::StrCat(Quote(sweep.variable),
                            " is not a variable name (letters, digits and _, not starting with a "
                            "digit)"));
  }
  for (absl::string_view item : absl::StrSplit(text.substr(eq + 1), ',')) {
    item = absl::StripAsciiWhitespace(item);
    double value = 0;
    if (item.empty()) return bad(absl::StrCat("an empty value in ", Quote(text)));
    if (!absl::SimpleAtod(item, &value) || !std::isfinite(value)) {
      return bad(absl::StrCat(Quote(item), " is not a finite number"));
    }
    if (std::find(sweep.values.begin(), sweep.values.end(), value) != sweep.values.end()) {
      return bad(absl::StrCat(Quote(item), " is given twice; give each value once"));
    }
    if (sweep.values.size() == kSweepValuesMax) {
      return bad(absl::StrCat("more than ", kSweepValuesMax, " values; split the sweep"));
    }
    sweep.values.push_back(value);
  }
  return sweep;
}

absl::Status CheckJobId(absl::string_view text, absl::string_view what) {
  constexpr size_t kNumberDigitsMax = 18;
  const size_t dot = text.find('.');
  const absl::string_view number = text.substr(0, dot);
  const absl::string_view index =
      dot == absl::string_view::npos ? absl::string_view("0") : text.substr(dot + 1);
  if (!AllDigits(number) || number.size() > kNumberDigitsMax || !AllDigits(index) ||
      index.size() > kNumberDigitsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", Quote(text),
                     " is not a job id; ids look like 17, or 17.3 for a job of a sweep "
                     "(`ipupod jobs` lists them)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::JobState>> ParseJobStates(absl::string_view text) {
  static constexpr std::pair<absl::string_view, v1::JobState> kStates[] = {
      {"PENDING", v1::PENDING}, {"RUNNING", v1::RUNNING},     {"COMPLETED", v1::COMPLETED},
      {"FAILED", v1::FAILED},   {"CANCELLED", v1::CANCELLED}, {"TIMEOUT", v1::TIMEOUT}};
  std::vector<v1::JobState> states;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::string word = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(item));
    const auto* found = std::find_if(std::begin(kStates), std::end(kStates),
                                     [&word](const auto& s) { return s.first == word; });
    if (found == std::end(kStates)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--state: ", Quote(item),
          " is not a job state; use PENDING, RUNNING, COMPLETED, FAILED, CANCELLED or TIMEOUT "
          "(or several, separated by commas)"));
    }
    if (std::find(states.begin(), states.end(), found->second) == states.end()) {
      states.push_back(found->second);
    }
  }
  return states;
}

EnvLookup ProcessEnv() {
  return [](absl::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace {

// The first non-empty of: the flag, then each environment variable.
std::string FirstSet(const std::string& flag, std::initializer_list<absl::string_view> vars,
                     const EnvLookup& env, absl::string_view fallback) {
  if (!flag.empty()) return flag;
  for (absl::string_view var : vars) {
    std::optional<std::string> value = env(var);
    if (value && !value->empty()) return *value;
  }
  return std::string(fallback);
}

}  // namespace

absl::StatusOr<client::ClientOptions> ResolveClientOptions(const GlobalFlags& flags,
                                                           const EnvLookup& env) {
  client::ClientOptions options;
  options.server = FirstSet(flags.server, {"IPUPOD_SERVER"}, env, client::kDefaultServer);
  options.token = FirstSet(flags.token, {"IPUPOD_TOKEN"}, env, "");
  options.user = FirstSet(flags.user, {"IPUPOD_USER", "USER"}, env, "nobody");
  if (!flags.timeout.empty()) {
    absl::StatusOr<double> seconds = ParseSeconds(flags.timeout, "--timeout", false);
    if (!seconds.ok()) return seconds.status();
    options.rpc_timeout = absl::Seconds(*seconds);
  }
  options.tls_ca = FirstSet(flags.tls_ca, {"IPUPOD_TLS_CA"}, env, "");
  options.tls_cert = FirstSet(flags.tls_cert, {"IPUPOD_TLS_CERT"}, env, "");
  options.tls_key = FirstSet(flags.tls_key, {"IPUPOD_TLS_KEY"}, env, "");
  return options;
}

}  // namespace ipupod::cli
