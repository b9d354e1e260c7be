#include "server/config.h"

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include <arpa/inet.h>
#include <netinet/in.h>

namespace ipupod::server {
namespace {

using Json = nlohmann::json;

constexpr size_t kShownValueMax = 40;  // how much of a bad value an error quotes
constexpr size_t kListMax = 1024;      // open_mode_admins entries
constexpr size_t kFaultKindsMax = 16;

constexpr std::array<absl::string_view, 7> kLogLevels = {"trace", "debug",    "info", "warn",
                                                         "error", "critical", "off"};

// "a string \"abc\"", "an integer -3", ...: what the config held, shortened.
std::string Describe(const Json& value) {
  std::string text = value.dump(-1, ' ', true, Json::error_handler_t::replace);
  if (text.size() > kShownValueMax) text = text.substr(0, kShownValueMax) + "...";
  const char* type = "a value";
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      type = "a boolean";
      break;
    case Json::value_t::string:
      type = "a string";
      break;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      type = "an integer";
      break;
    case Json::value_t::number_float:
      type = "a number";
      break;
    case Json::value_t::object:
      type = "an object";
      break;
    case Json::value_t::array:
      type = "an array";
      break;
    default:
      break;
  }
  return absl::StrCat(type, " ", text);
}

absl::Status Bad(absl::string_view key, absl::string_view expected, const Json& got) {
  return absl::InvalidArgumentError(
      absl::StrCat("config key '", key, "' must be ", expected, "; got ", Describe(got)));
}

absl::StatusOr<std::string> GetString(const Json& v, absl::string_view key, size_t max_length) {
  std::string expected = absl::StrCat("a non-empty string of at most ", max_length, " bytes");
  if (!v.is_string()) return Bad(key, expected, v);
  const std::string& s = v.get_ref<const std::string&>();
  if (s.empty() || s.size() > max_length || s.find('\0') != std::string::npos) {
    return Bad(key, expected, v);
  }
  return s;
}

absl::StatusOr<int64_t> GetInt(const Json& v, absl::string_view key, int64_t min, int64_t max) {
  std::string expected = absl::StrCat("an integer from ", min, " to ", max);
  if (!v.is_number_integer()) return Bad(key, expected, v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
    return Bad(key, expected, v);
  }
  int64_t n = v.get<int64_t>();
  if (n < min || n > max) return Bad(key, expected, v);
  return n;
}

absl::StatusOr<int> GetSmallInt(const Json& v, absl::string_view key, int min, int max) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, GetInt(v, key, min, max));
  return static_cast<int>(n);
}

absl::Status ExpectObject(const Json& v, absl::string_view key) {
  return v.is_object() ? absl::OkStatus() : Bad(key, "an object", v);
}

absl::Status ExpectArray(const Json& v, absl::string_view key, size_t max_size) {
  if (v.is_array() && v.size() <= max_size) return absl::OkStatus();
  return Bad(key, absl::StrCat("an array of at most ", max_size, " entries"), v);
}

// Handlers for the keys of one JSON object; unknown keys are errors.
using Handler = std::function<absl::Status(const Json&, const std::string& key)>;

absl::Status ForEachKey(const Json& object, absl::string_view prefix,
                        const std::map<std::string, Handler>& handlers) {
  for (const auto& [name, value] : object.items()) {
    std::string key = prefix.empty() ? name : absl::StrCat(prefix, ".", name);
    auto it = handlers.find(name);
    if (it == handlers.end()) {
      std::vector<std::string> known;
      for (const auto& h : handlers) known.push_back(h.first);
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown config key '", key, "'; valid keys here: ", absl::StrJoin(known, ", ")));
    }
    IPUPOD_RETURN_IF_ERROR(it->second(value, key));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GetUserName(const Json& v, absl::string_view key) {
  if (!v.is_string() || !IsValidUserName(v.get_ref<const std::string&>())) {
    return Bad(key, "a user name of 1-64 characters from A-Z a-z 0-9 . _ - @", v);
  }
  return v.get<std::string>();
}

bool IsTokenText(absl::string_view token) {
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) return false;  // visible ASCII: it travels in a header
  }
  return !token.empty() && token.size() <= kTokenLengthMax;
}

absl::StatusOr<TokenEntry> ParseToken(const Json& v, const std::string& key) {
  IPUPOD_RETURN_IF_ERROR(ExpectObject(v, key));
  TokenEntry entry;
  bool has_token = false;
  bool has_user = false;
  IPUPOD_RETURN_IF_ERROR(
      ForEachKey(v, key,
                 {
                     {"token",
                      [&](const Json& t, const std::string& k) -> absl::Status {
                        if (!t.is_string() || !IsTokenText(t.get_ref<const std::string&>())) {
                          // Never echo a token value into logs or errors.
                          return absl::InvalidArgumentError(absl::StrCat(
                              "config key '", k, "' must be a string of 1-", kTokenLengthMax,
                              " visible ASCII characters (no spaces)"));
                        }
                        entry.token = t.get<std::string>();
                        has_token = true;
                        return absl::OkStatus();
                      }},
                     {"user",
                      [&](const Json& u, const std::string& k) -> absl::Status {
                        IPUPOD_ASSIGN_OR_RETURN(entry.user, GetUserName(u, k));
                        has_user = true;
                        return absl::OkStatus();
                      }},
                     {"role",
                      [&](const Json& r, const std::string& k) -> absl::Status {
                        if (r != "user" && r != "admin") return Bad(k, "\"user\" or \"admin\"", r);
                        entry.admin = r == "admin";
                        return absl::OkStatus();
                      }},
                 }));
  if (!has_token || !has_user) {
    return absl::InvalidArgumentError(absl::StrCat("config key '", key,
                                                   "' needs both \"token\""
                                                   " and \"user\" (and optionally \"role\")"));
  }
  return entry;
}

absl::Status ParseTokens(const Json& v, const std::string& key, ServerConfig& config) {
  IPUPOD_RETURN_IF_ERROR(ExpectArray(v, key, kTokensMax));
  config.tokens.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    std::string item_key = absl::StrCat(key, "[", i, "]");
    IPUPOD_ASSIGN_OR_RETURN(TokenEntry entry, ParseToken(v[i], item_key));
    for (size_t j = 0; j < config.tokens.size(); ++j) {
      if (config.tokens[j].token == entry.token) {
        return absl::InvalidArgumentError(absl::StrCat("config key '", item_key,
                                                       ".token' repeats the token of ", key, "[", j,
                                                       "]; every token must be unique"));
      }
    }
    config.tokens.push_back(std::move(entry));
  }
  return absl::OkStatus();
}

absl::Status ParseAdmins(const Json& v, const std::string& key, ServerConfig& config) {
  IPUPOD_RETURN_IF_ERROR(ExpectArray(v, key, kListMax));
  config.open_mode_admins.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(std::string name, GetUserName(v[i], absl::StrCat(key, "[", i, "]")));
    config.open_mode_admins.push_back(std::move(name));
  }
  return absl::OkStatus();
}

absl::Status ParsePodValue(const Json& v, const std::string& key, ServerConfig& config) {
  absl::StatusOr<device::PodConfig> pod;
  if (v.is_string() && v.get_ref<const std::string&>().size() <= kShownValueMax) {
    pod = ParsePod(v.get<std::string>());
  } else if (v.is_number_integer()) {
    pod = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{1} << 31
              ? device::PodFromSize(int64_t{1} << 31)
              : device::PodFromSize(v.get<int64_t>());
  } else {
    return Bad(key, "a pod name such as \"POD16\" or an IPU count such as 16", v);
  }
  if (!pod.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key '", key, "': ", pod.status().message()));
  }
  config.pod = *std::move(pod);
  return absl::OkStatus();
}

absl::Status ParseResetMs(const Json& v, const std::string& key, ServerConfig& config) {
  IPUPOD_RETURN_IF_ERROR(ExpectObject(v, key));
  auto field = [](int& out) {
    return [&out](const Json& x, const std::string& k) -> absl::Status {
      IPUPOD_ASSIGN_OR_RETURN(out, GetSmallInt(x, k, 0, kResetMsMax));
      return absl::OkStatus();
    };
  };
  return ForEachKey(v, key,
                    {{"ipu", field(config.ipu_reset_ms)},
                     {"partition", field(config.partition_reset_ms)},
                     {"pod", field(config.pod_reset_ms)}});
}

std::optional<scheduler::FaultKind> ParseFaultKindName(absl::string_view name) {
  using scheduler::FaultKind;
  static const std::map<std::string, FaultKind, std::less<>> kKinds = {
      {"ipu-reset", FaultKind::kIpuReset},
      {"link-reset", FaultKind::kLinkReset},
      {"partition-reset", FaultKind::kPartitionReset},
      {"full-reset", FaultKind::kFullReset},
      {"unrecoverable", FaultKind::kUnrecoverable}};
  auto it = kKinds.find(name);
  if (it == kKinds.end()) return std::nullopt;
  return it->second;
}

absl::Status ParseFaultKinds(const Json& v, const std::string& key,
                             std::vector<scheduler::FaultKind>& kinds) {
  IPUPOD_RETURN_IF_ERROR(ExpectArray(v, key, kFaultKindsMax));
  if (v.empty()) return Bad(key, "a non-empty array of fault kinds", v);
  kinds.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    auto kind = v[i].is_string() ? ParseFaultKindName(v[i].get<std::string>()) : std::nullopt;
    if (!kind) {
      return Bad(absl::StrCat(key, "[", i, "]"),
                 "one of \"ipu-reset\", \"link-reset\", \"partition-reset\", \"full-reset\", "
                 "\"unrecoverable\"",
                 v[i]);
    }
    kinds.push_back(*kind);
  }
  return absl::OkStatus();
}

absl::Status ParseRandomFaults(const Json& v, const std::string& key, ServerConfig& config) {
  IPUPOD_RETURN_IF_ERROR(ExpectObject(v, key));
  scheduler::RandomFaults& faults = config.random_faults;
  return ForEachKey(
      v, key,
      {
          {"seed",
           [&](const Json& x, const std::string& k) -> absl::Status {
             if (!x.is_number_integer() || (!x.is_number_unsigned() && x.get<int64_t>() < 0)) {
               return Bad(k, "a non-negative integer", x);
             }
             faults.seed = x.get<uint64_t>();
             return absl::OkStatus();
           }},
          {"probability_per_operation",
           [&](const Json& x, const std::string& k) -> absl::Status {
             if (!x.is_number() || !(x.get<double>() >= 0.0 && x.get<double>() <= 1.0)) {
               return Bad(k, "a number from 0 to 1", x);
             }
             faults.probability_per_operation = x.get<double>();
             return absl::OkStatus();
           }},
          {"kinds", [&](const Json& x,
                        const std::string& k) { return ParseFaultKinds(x, k, faults.kinds); }},
      });
}

absl::Status ParseTopLevel(const Json& root, ServerConfig& config) {
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config must be a JSON object; got ", Describe(root)));
  }
  auto string_key = [](std::string& out) {
    return [&out](const Json& v, const std::string& k) -> absl::Status {
      IPUPOD_ASSIGN_OR_RETURN(out, GetString(v, k, kStringLengthMax));
      return absl::OkStatus();
    };
  };
  auto with_config = [&config](
                         absl::Status (*parse)(const Json&, const std::string&, ServerConfig&)) {
    return [&config, parse](const Json& v, const std::string& k) { return parse(v, k, config); };
  };
  return ForEachKey(
      root, "",
      {
          {"listen",
           [&](const Json& v, const std::string& k) -> absl::Status {
             IPUPOD_ASSIGN_OR_RETURN(config.listen, GetString(v, k, kStringLengthMax));
             absl::Status address = ParseListenAddress(config.listen).status();
             if (!address.ok())
               return absl::InvalidArgumentError(
                   absl::StrCat("config key '", k, "': ", address.message()));
             return absl::OkStatus();
           }},
          {"pod", with_config(&ParsePodValue)},
          {"state_dir", string_key(config.state_dir)},
          {"tokens", with_config(&ParseTokens)},
          {"open_mode_admins", with_config(&ParseAdmins)},
          {"session_lease_seconds",
           [&](const Json& v, const std::string& k) -> absl::Status {
             IPUPOD_ASSIGN_OR_RETURN(config.session_lease_seconds,
                                     GetSmallInt(v, k, 1, kLeaseSecondsMax));
             return absl::OkStatus();
           }},
          {"reset_ms", with_config(&ParseResetMs)},
          {"max_waiters",
           [&](const Json& v, const std::string& k) -> absl::Status {
             IPUPOD_ASSIGN_OR_RETURN(config.max_waiters, GetSmallInt(v, k, 1, kMaxWaitersMax));
             return absl::OkStatus();
           }},
          {"executable_cache_mb",
           [&](const Json& v, const std::string& k) -> absl::Status {
             IPUPOD_ASSIGN_OR_RETURN(config.executable_cache_mb,
                                     GetInt(v, k, 1, kExecutableCacheMbMax));
             return absl::OkStatus();
           }},
          {"max_execution_threads",
           [&](const Json& v, const std::string& k) -> absl::Status {
             IPUPOD_ASSIGN_OR_RETURN(config.max_execution_threads,
                                     GetSmallInt(v, k, kExecutionThreadsMin, kExecutionThreadsMax));
             return absl::OkStatus();
           }},
          {"compute_threads",
           [&](const Json& v, const std::string& k) -> absl::Status {
             IPUPOD_ASSIGN_OR_RETURN(config.compute_threads,
                                     GetSmallInt(v, k, 0, kComputeThreadsMax));
             return absl::OkStatus();
           }},
          {"random_faults", with_config(&ParseRandomFaults)},
          {"log_level",
           [&](const Json& v, const std::string& k) -> absl::Status {
             if (!v.is_string() || !ValidateLogLevel(v.get<std::string>()).ok()) {
               return Bad(k, absl::StrCat("one of ", absl::StrJoin(kLogLevels, ", ")), v);
             }
             config.log_level = v.get<std::string>();
             return absl::OkStatus();
           }},
      });
}

}  // namespace

absl::StatusOr<ServerConfig> ParseConfigJson(absl::string_view json_text) {
  ServerConfig config;
  try {
    Json root = Json::parse(json_text.begin(), json_text.end(), /*cb=*/nullptr,
                            /*allow_exceptions=*/true, /*ignore_comments=*/true);
    IPUPOD_RETURN_IF_ERROR(ParseTopLevel(root, config));
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("config is not valid JSON: ", e.what()));
  } catch (const Json::exception& e) {  // a type mismatch we failed to check first
    return absl::InvalidArgumentError(absl::StrCat("config is not valid: ", e.what()));
  }
  return config;
}

absl::StatusOr<ServerConfig> LoadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read config file '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read config file '", path, "'"));
  }
  absl::StatusOr<ServerConfig> config = ParseConfigJson(text.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

absl::StatusOr<device::PodConfig> ParsePod(absl::string_view text) {
  int64_t count = 0;
  if (!text.empty() && absl::ascii_isdigit(static_cast<unsigned char>(text[0]))) {
    if (!absl::SimpleAtoi(text, &count)) {
      return absl::InvalidArgumentError(
          absl::StrCat("pod '", text.substr(0, kShownValueMax),
                       "' is neither a pod name (POD4, POD16, POD64) nor an IPU count"));
    }
    return device::PodFromSize(count);
  }
  return device::PodFromName(text.substr(0, kShownValueMax));
}

absl::Status ValidateLogLevel(absl::string_view level) {
  for (absl::string_view known : kLogLevels) {
    if (level == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("log level '", level.substr(0, kShownValueMax),
                                                 "' is not one of ",
                                                 absl::StrJoin(kLogLevels, ", ")));
}

bool IsValidUserName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' &&
        c != '@') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view listen) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", listen.substr(0, kShownValueMax),
                     "' is not host:port (e.g. 127.0.0.1:50051, localhost:0 or [::1]:50051)"));
  };
  ListenAddress address;
  absl::string_view port_text;
  if (absl::StartsWith(listen, "[")) {
    size_t close = listen.find(']');
    if (close == absl::string_view::npos || listen.substr(close + 1, 1) != ":") return bad();
    address.host = std::string(listen.substr(1, close - 1));
    address.ipv6 = true;
    port_text = listen.substr(close + 2);
  } else {
    size_t colon = listen.rfind(':');
    if (colon == absl::string_view::npos) return bad();
    address.host = std::string(listen.substr(0, colon));
    if (address.host.find(':') != std::string::npos) return bad();  // bare IPv6
    port_text = listen.substr(colon + 1);
  }
  if (address.host.empty() || port_text.empty() || port_text.size() > 5) return bad();
  for (char c : address.host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '/' || c == '[') return bad();
  }
  for (char c : port_text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return bad();
  }
  if (!absl::SimpleAtoi(port_text, &address.port) || address.port > 65535) return bad();
  return address;
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

absl::Status ValidateConfig(const ServerConfig& config) {
  IPUPOD_ASSIGN_OR_RETURN(ListenAddress address, ParseListenAddress(config.listen));
  if (config.open_mode() && !IsLoopbackHost(address.host)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "open mode (no tokens configured) trusts the user name clients send, so it listens on "
        "loopback only, but listen is '",
        config.listen, "'; use --listen 127.0.0.1:PORT or configure \"tokens\""));
  }
  if (config.session_lease_seconds < 1 || config.session_lease_seconds > kLeaseSecondsMax) {
    return absl::InvalidArgumentError(absl::StrCat("lease seconds must be from 1 to ",
                                                   kLeaseSecondsMax, "; got ",
                                                   config.session_lease_seconds));
  }
  if (config.state_dir.empty() || config.state_dir.size() > kStringLengthMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("state dir must be 1 to ", kStringLengthMax, " bytes long"));
  }
  if (config.executable_cache_mb < 1 || config.executable_cache_mb > kExecutableCacheMbMax) {
    return absl::InvalidArgumentError(absl::StrCat("executable cache MB must be from 1 to ",
                                                   kExecutableCacheMbMax, "; got ",
                                                   config.executable_cache_mb));
  }
  if (config.max_execution_threads < kExecutionThreadsMin ||
      config.max_execution_threads > kExecutionThreadsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("max execution threads must be from ", kExecutionThreadsMin, " to ",
                     kExecutionThreadsMax, "; got ", config.max_execution_threads));
  }
  if (config.compute_threads < 0 || config.compute_threads > kComputeThreadsMax) {
    return absl::InvalidArgumentError(absl::StrCat("compute threads must be from 0 (every CPU) to ",
                                                   kComputeThreadsMax, "; got ",
                                                   config.compute_threads));
  }
  return ValidateLogLevel(config.log_level);
}

scheduler::SchedulerOptions ToSchedulerOptions(const ServerConfig& config) {
  scheduler::SchedulerOptions options;
  options.pod = config.pod;
  options.ipu_reset_time = absl::Milliseconds(config.ipu_reset_ms);
  options.partition_reset_time = absl::Milliseconds(config.partition_reset_ms);
  options.pod_reset_time = absl::Milliseconds(config.pod_reset_ms);
  options.max_waiters = config.max_waiters;
  options.random_faults = config.random_faults;
  return options;
}

}  // namespace ipupod::server
