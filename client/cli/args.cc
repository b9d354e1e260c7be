#include "client/cli/args.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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

absl::Status ParseOptimizerAttributes(absl::string_view text, std::map<std::string, double>& into) {
  constexpr absl::string_view kExample = "; use NAME=VALUE,... e.g. lr=0.001,momentum=0.9";
  std::map<std::string, double> parsed = into;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    const absl::string_view name = absl::StripAsciiWhitespace(item.substr(0, eq));
    if (eq == absl::string_view::npos || name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--opt: ", Quote(item), " is not NAME=VALUE", kExample));
    }
    const absl::string_view value = absl::StripAsciiWhitespace(item.substr(eq + 1));
    double number = 0;
    if (value == "true" || value == "false") {
      number = value == "true" ? 1.0 : 0.0;
    } else if (!absl::SimpleAtod(value, &number) || std::isnan(number)) {
      return absl::InvalidArgumentError(absl::StrCat("--opt ", name, ": ", Quote(value),
                                                     " is not a number or true/false", kExample));
    }
    if (!parsed.emplace(std::string(name), number).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--opt ", name, " is given twice; give each attribute once"));
    }
  }
  into = std::move(parsed);
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
  return options;
}

}  // namespace ipupod::cli
