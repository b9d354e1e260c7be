#include "server/config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_reader.h"
#include "common/status_macros.h"
#include "server/settings.h"
#include "server/sharing_config.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ipupod::server {
namespace {

using json::Json;
using json::JsonPath;
using json::ObjectReader;

constexpr size_t kShownValueMax = 40;  // how much of a bad value an error quotes
constexpr size_t kListMax = 1024;      // open_mode_admins entries
constexpr size_t kFaultKindsMax = 16;

constexpr std::array<absl::string_view, 7> kLogLevels = {"trace", "debug",    "info", "warn",
                                                         "error", "critical", "off"};

absl::StatusOr<std::string> GetString(const Json& v, const JsonPath& at, size_t max_length) {
  const std::string expected = absl::StrCat("a non-empty string of at most ", max_length, " bytes");
  if (!v.is_string()) return at.TypeError(expected, v);
  const std::string& s = v.get_ref<const std::string&>();
  if (s.empty() || s.size() > max_length || s.find('\0') != std::string::npos) {
    return at.TypeError(expected, v);
  }
  return s;
}

absl::StatusOr<int> GetSmallInt(const Json& v, const JsonPath& at, int min, int max) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t n, json::ReadInt(v, at, min, max));
  return static_cast<int>(n);
}

absl::StatusOr<std::string> GetUserName(const Json& v, const JsonPath& at) {
  if (!v.is_string() || !IsValidUserName(v.get_ref<const std::string&>())) {
    return at.TypeError("a user name of 1-64 characters from A-Z a-z 0-9 . _ - @", v);
  }
  return v.get<std::string>();
}

bool IsTokenText(absl::string_view token) {
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) return false;  // visible ASCII: it travels in a header
  }
  return !token.empty() && token.size() <= kTokenLengthMax;
}

absl::StatusOr<TokenEntry> ParseToken(const Json& v, const JsonPath& at) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader reader, ObjectReader::Open(v, at));
  const Json* token = reader.Find("token");
  const Json* user = reader.Find("user");
  const Json* role = reader.Find("role");
  IPUPOD_RETURN_IF_ERROR(reader.RejectUnknownKeys());
  if (token == nullptr || user == nullptr) {
    return at.Error("needs both \"token\" and \"user\" (and optionally \"role\")");
  }
  TokenEntry entry;
  if (!token->is_string() || !IsTokenText(token->get_ref<const std::string&>())) {
    // Never echo a token value into logs or errors.
    return at.Key("token").Error(absl::StrCat("expected a string of 1-", kTokenLengthMax,
                                              " visible ASCII characters (no spaces)"));
  }
  entry.token = token->get<std::string>();
  IPUPOD_ASSIGN_OR_RETURN(entry.user, GetUserName(*user, at.Key("user")));
  if (role != nullptr) {
    if (*role != "user" && *role != "admin") {
      return at.Key("role").TypeError("\"user\" or \"admin\"", *role);
    }
    entry.admin = *role == "admin";
  }
  return entry;
}

absl::Status ParseTokens(const Json& v, const JsonPath& at, ServerConfig& config) {
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(v, at, kTokensMax));
  config.tokens.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(TokenEntry entry, ParseToken(v[i], at.Index(i)));
    for (size_t j = 0; j < config.tokens.size(); ++j) {
      if (config.tokens[j].token == entry.token) {
        return at.Index(i).Key("token").Error(absl::StrCat("repeats the token of ", at.path(), "[",
                                                           j, "]; every token must be unique"));
      }
    }
    config.tokens.push_back(std::move(entry));
  }
  return absl::OkStatus();
}

absl::Status ParseAdmins(const Json& v, const JsonPath& at, ServerConfig& config) {
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(v, at, kListMax));
  config.open_mode_admins.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(std::string name, GetUserName(v[i], at.Index(i)));
    config.open_mode_admins.push_back(std::move(name));
  }
  return absl::OkStatus();
}

absl::Status ParseResetMs(const Json& v, const JsonPath& at, ServerConfig& config) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader reader, ObjectReader::Open(v, at));
  auto field = [&reader](absl::string_view key, int& out) {
    return reader.IfPresent(key, [&out](const Json& x, const JsonPath& k) -> absl::Status {
      IPUPOD_ASSIGN_OR_RETURN(out, GetSmallInt(x, k, 0, kResetMsMax));
      return absl::OkStatus();
    });
  };
  IPUPOD_RETURN_IF_ERROR(field("ipu", config.ipu_reset_ms));
  IPUPOD_RETURN_IF_ERROR(field("partition", config.partition_reset_ms));
  IPUPOD_RETURN_IF_ERROR(field("pod", config.pod_reset_ms));
  return reader.RejectUnknownKeys();
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

absl::Status ParseFaultKinds(const Json& v, const JsonPath& at,
                             std::vector<scheduler::FaultKind>& kinds) {
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(v, at, kFaultKindsMax));
  if (v.empty()) return at.TypeError("a non-empty array of fault kinds", v);
  kinds.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    auto kind = v[i].is_string() ? ParseFaultKindName(v[i].get<std::string>()) : std::nullopt;
    if (!kind) {
      return at.Index(i).TypeError(
          "one of \"ipu-reset\", \"link-reset\", \"partition-reset\", \"full-reset\", "
          "\"unrecoverable\"",
          v[i]);
    }
    kinds.push_back(*kind);
  }
  return absl::OkStatus();
}

absl::Status ParseRandomFaults(const Json& v, const JsonPath& at, ServerConfig& config) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader reader, ObjectReader::Open(v, at));
  scheduler::RandomFaults& faults = config.random_faults;
  IPUPOD_RETURN_IF_ERROR(reader.IfPresent("seed", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(faults.seed, json::ReadUint(x, k));
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(
      reader.IfPresent("probability_per_operation", [&](const Json& x, const JsonPath& k) {
        if (!x.is_number() || !(x.get<double>() >= 0.0 && x.get<double>() <= 1.0)) {
          return k.TypeError("a number from 0 to 1", x);
        }
        faults.probability_per_operation = x.get<double>();
        return absl::OkStatus();
      }));
  IPUPOD_RETURN_IF_ERROR(reader.IfPresent("kinds", [&](const Json& x, const JsonPath& k) {
    return ParseFaultKinds(x, k, faults.kinds);
  }));
  return reader.RejectUnknownKeys();
}

absl::Status ParseSharingSection(const Json& v, const JsonPath& at, ServerConfig& config) {
  IPUPOD_ASSIGN_OR_RETURN(config.sharing, ParseSharing(v, at));
  return absl::OkStatus();
}

// "tls": {"cert", "key", "client_ca"}: paths, read and checked at start
// (server/tls_files.h). A certificate needs its key, a key or a client CA a
// certificate.
absl::Status ParseTls(const Json& v, const JsonPath& at, ServerConfig& config) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader reader, ObjectReader::Open(v, at));
  auto path = [&reader](absl::string_view key, std::string& out) {
    return reader.IfPresent(key, [&out](const Json& x, const JsonPath& k) -> absl::Status {
      IPUPOD_ASSIGN_OR_RETURN(out, GetString(x, k, kStringLengthMax));
      return absl::OkStatus();
    });
  };
  TlsFiles& tls = config.tls;
  IPUPOD_RETURN_IF_ERROR(path("cert", tls.cert));
  IPUPOD_RETURN_IF_ERROR(path("key", tls.key));
  IPUPOD_RETURN_IF_ERROR(path("client_ca", tls.client_ca));
  IPUPOD_RETURN_IF_ERROR(reader.RejectUnknownKeys());
  if (!tls.cert.empty() && tls.key.empty()) {
    return at.Key("key").Error("is missing: \"cert\" needs the private key that matches it");
  }
  if (tls.cert.empty() && !tls.key.empty()) {
    return at.Key("cert").Error("is missing: \"key\" needs the certificate it belongs to");
  }
  if (tls.cert.empty() && !tls.client_ca.empty()) {
    return at.Key("cert").Error(
        "is missing: mutual TLS (\"client_ca\") needs the server's own \"cert\" and \"key\"");
  }
  return absl::OkStatus();
}

// "custom_ops": {"library_dirs": [absolute paths], "host", "memory_mb",
// "call_timeout_seconds", "max_hosts"}; the directories are checked to exist when the
// server starts (device/customop/library_registry.h).
absl::Status ParseCustomOpDirs(const Json& v, const JsonPath& at, CustomOpsConfig& config) {
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(v, at, kCustomOpLibraryDirsMax));
  config.library_dirs.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(std::string dir, GetString(v[i], at.Index(i), kStringLengthMax));
    if (dir.empty() || dir[0] != '/') {
      return at.Index(i).Error("must be an absolute path to a directory of custom op libraries");
    }
    config.library_dirs.push_back(std::move(dir));
  }
  return absl::OkStatus();
}

absl::Status ParseCustomOps(const Json& v, const JsonPath& at, ServerConfig& server) {
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader reader, ObjectReader::Open(v, at));
  CustomOpsConfig& config = server.custom_ops;
  IPUPOD_RETURN_IF_ERROR(reader.IfPresent("library_dirs", [&](const Json& x, const JsonPath& k) {
    return ParseCustomOpDirs(x, k, config);
  }));
  IPUPOD_RETURN_IF_ERROR(reader.IfPresent("host", [&](const Json& x, const JsonPath& k) {
    IPUPOD_ASSIGN_OR_RETURN(config.host, GetString(x, k, kStringLengthMax));
    return absl::OkStatus();
  }));
  const auto integer = [&](absl::string_view key, auto& out, int64_t min, int64_t max) {
    return reader.IfPresent(key, [&](const Json& x, const JsonPath& k) -> absl::Status {
      IPUPOD_ASSIGN_OR_RETURN(int64_t n, json::ReadInt(x, k, min, max));
      out = static_cast<std::remove_reference_t<decltype(out)>>(n);
      return absl::OkStatus();
    });
  };
  IPUPOD_RETURN_IF_ERROR(
      integer("memory_mb", config.memory_mb, kCustomOpMemoryMbMin, kCustomOpMemoryMbMax));
  IPUPOD_RETURN_IF_ERROR(integer("call_timeout_seconds", config.call_timeout_seconds, 1,
                                 kCustomOpCallTimeoutSecondsMax));
  IPUPOD_RETURN_IF_ERROR(integer("max_hosts", config.max_hosts, 1, kCustomOpMaxHostsMax));
  return reader.RejectUnknownKeys();
}

using KeyParser = absl::Status (*)(const Json&, const JsonPath&, ServerConfig&);

// The structured top-level keys, read by hand: a row of server/settings.h
// cannot express a list or an object. Every other key is a row.
constexpr std::pair<absl::string_view, KeyParser> kStructuredKeys[] = {
    {"tokens", ParseTokens},          {"open_mode_admins", ParseAdmins},
    {"reset_ms", ParseResetMs},       {"random_faults", ParseRandomFaults},
    {"sharing", ParseSharingSection}, {"tls", ParseTls},
    {"custom_ops", ParseCustomOps},
};

// The top-level keys, each read by its own parser; unknown keys are errors.
absl::Status ParseTopLevel(const Json& root, ServerConfig& config) {
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config must be a JSON object; got ", json::Describe(root)));
  }
  IPUPOD_ASSIGN_OR_RETURN(ObjectReader reader, ObjectReader::Open(root, JsonPath("config")));
  for (const Setting& setting : Settings()) {
    IPUPOD_RETURN_IF_ERROR(reader.IfPresent(setting.key, [&](const Json& v, const JsonPath& at) {
      return ReadSettingJson(setting, v, at, config);
    }));
  }
  for (const auto& [key, parse] : kStructuredKeys) {
    IPUPOD_RETURN_IF_ERROR(reader.IfPresent(
        key, [&, read = parse](const Json& v, const JsonPath& at) { return read(v, at, config); }));
  }
  return reader.RejectUnknownKeys();
}

// The config file's text. Opened without blocking (a FIFO in its place
// must not stall the start or the SIGHUP loop, which also hears SIGTERM),
// and read only when it is a regular file of at most kConfigFileBytesMax
// (/dev/zero would otherwise be read until memory ran out).
absl::StatusOr<std::string> ReadConfigText(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read config file '", path, "': ", std::strerror(errno)));
  }
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const absl::string_view kind = S_ISFIFO(st.st_mode)                         ? "a FIFO"
                                   : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                   : S_ISDIR(st.st_mode)                        ? "a directory"
                                                                                : "not a file";
    return absl::InvalidArgumentError(absl::StrCat("config file '", path,
                                                   "' is not a regular file but ", kind,
                                                   "; pass the path of a JSON file"));
  }
  if (st.st_size > kConfigFileBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat("config file '", path, "' is ", st.st_size,
                                                   " bytes, over the ", kConfigFileBytesMax,
                                                   " a config may have; is it the right file?"));
  }
  // One byte more than the bound: a file that grew since fstat is refused too.
  std::string text(static_cast<size_t>(kConfigFileBytesMax) + 1, '\0');
  size_t size = 0;
  while (size < text.size()) {
    const ssize_t n = ::read(fd, text.data() + size, text.size() - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read config file '", path, "': ", std::strerror(errno)));
    }
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  if (size > static_cast<size_t>(kConfigFileBytesMax)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config file '", path, "' is over the ", kConfigFileBytesMax, " bytes a config may have"));
  }
  text.resize(size);
  return text;
}

}  // namespace

absl::StatusOr<ServerConfig> ParseConfigJson(absl::string_view json_text) {
  IPUPOD_ASSIGN_OR_RETURN(Json root, json::Parse(json_text, "config", /*comments=*/true));
  ServerConfig config;
  IPUPOD_RETURN_IF_ERROR(ParseTopLevel(root, config));
  return config;
}

absl::StatusOr<ServerConfig> LoadConfigFile(const std::string& path) {
  IPUPOD_ASSIGN_OR_RETURN(const std::string text, ReadConfigText(path));
  absl::StatusOr<ServerConfig> config = ParseConfigJson(text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  // Parsed once more (it parsed above, so it parses): each key's text for DiffConfigKeys.
  absl::StatusOr<Json> root = json::Parse(text, "config", /*comments=*/true);
  if (root.ok() && root->is_object()) {
    for (const auto& [key, value] : root->items()) config->file_keys[key] = value.dump();
  }
  return config;
}

ConfigChanges DiffConfigKeys(const std::map<std::string, std::string>& running,
                             const std::map<std::string, std::string>& fresh) {
  std::set<std::string> changed;
  for (const auto& [key, value] : running) {
    const auto it = fresh.find(key);
    if (it == fresh.end() || it->second != value) changed.insert(key);
  }
  for (const auto& [key, value] : fresh) {
    if (!running.contains(key)) changed.insert(key);
  }
  ConfigChanges changes;
  for (const std::string& key : changed) {
    const bool reloadable =
        std::find(std::begin(kReloadableConfigKeys), std::end(kReloadableConfigKeys), key) !=
        std::end(kReloadableConfigKeys);
    (reloadable ? changes.applied : changes.need_restart).push_back(key);
  }
  return changes;
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

namespace {

// A per-user share larger than the whole would never be reached: say so
// rather than let the config mean something else than it says.
absl::Status ValidateShare(absl::string_view key, int per_user, int total) {
  if (per_user <= total) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(key, "_per_user (", per_user, ") is larger than ", key, " (", total,
                   "), the calls of every user together; lower the first or raise the second"));
}

absl::Status ValidateJobBounds(const ServerConfig& config) {
  IPUPOD_RETURN_IF_ERROR(
      ValidateShare("jobs_max_calls", config.jobs_max_calls_per_user, config.jobs_max_calls));
  IPUPOD_RETURN_IF_ERROR(ValidateShare("accounting_max_calls", config.accounting_max_calls_per_user,
                                       config.accounting_max_calls));
  IPUPOD_RETURN_IF_ERROR(
      ValidateShare("audit_max_calls", config.audit_max_calls_per_user, config.audit_max_calls));
  if (config.jobs_max_watchers_per_user > config.jobs_max_watchers) {
    return absl::InvalidArgumentError(
        absl::StrCat("jobs_max_watchers_per_user (", config.jobs_max_watchers_per_user,
                     ") is larger than jobs_max_watchers (", config.jobs_max_watchers,
                     "), the watches of every user together; lower the first or raise the second"));
  }
  return absl::OkStatus();
}

// The TLS files fit together, and tokens never cross the network in clear
// text: a token listener off loopback needs TLS.
absl::Status ValidateTransport(const ServerConfig& config, const ListenAddress& address) {
  const TlsFiles& tls = config.tls;
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS needs both a certificate and its private key, but only the ",
                     tls.cert.empty() ? "key" : "certificate",
                     " is given; pass --tls-cert FILE and "
                     "--tls-key FILE (or \"tls\": {\"cert\": ..., \"key\": ...} in the config)"));
  }
  if (!tls.client_ca.empty() && !tls.enabled()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca (\"tls\": {\"client_ca\"}) asks for mutual TLS, which needs the "
        "server's own certificate and key too; pass --tls-cert FILE and --tls-key FILE");
  }
  if (!config.open_mode() && !tls.enabled() && !IsLoopbackHost(address.host)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "token mode without TLS on '", config.listen,
        "', which is not loopback: the tokens clients send would cross the network in clear "
        "text; configure TLS (--tls-cert FILE --tls-key FILE, or \"tls\" in the config), or "
        "listen on loopback (--listen 127.0.0.1:PORT) behind a proxy that terminates TLS"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateConfig(const ServerConfig& config) {
  IPUPOD_ASSIGN_OR_RETURN(ListenAddress address, ParseListenAddress(config.listen));
  if (config.open_mode() && !IsLoopbackHost(address.host)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "open mode (no tokens configured) trusts the user name clients send, so it listens on "
        "loopback only, but listen is '",
        config.listen, "'; use --listen 127.0.0.1:PORT or configure \"tokens\""));
  }
  IPUPOD_RETURN_IF_ERROR(ValidateTransport(config, address));
  IPUPOD_RETURN_IF_ERROR(CheckSettingRanges(config));
  if (config.jobs_blob_store_user_mb > config.jobs_blob_store_mb) {
    return absl::InvalidArgumentError(
        absl::StrCat("jobs_blob_store_user_mb (", config.jobs_blob_store_user_mb,
                     ") is larger than the whole blob store, jobs_blob_store_mb (",
                     config.jobs_blob_store_mb, "); lower the first or raise the second"));
  }
  IPUPOD_RETURN_IF_ERROR(ValidateJobBounds(config));
  return ValidateMetricsListen(config, config.tls.enabled());
}

std::string MetricsListenAddress(const ServerConfig& config) {
  if (config.metrics_listen == "off") return "";
  if (!config.metrics_listen.empty()) return config.metrics_listen;
  const absl::StatusOr<ListenAddress> listen = ParseListenAddress(config.listen);
  if (listen.ok() && listen->port == 0) return "127.0.0.1:0";
  return std::string(kMetricsListenDefault);
}

absl::Status ValidateMetricsListen(const ServerConfig& config, bool tls) {
  const std::string metrics = MetricsListenAddress(config);
  if (metrics.empty()) return absl::OkStatus();
  absl::StatusOr<ListenAddress> address = ParseListenAddress(metrics);
  if (!address.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("metrics_listen: ", address.status().message(),
                                                   ", or \"off\" for no metrics"));
  }
  if (IsLoopbackHost(address->host)) return absl::OkStatus();
  if (config.open_mode()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "open mode (no tokens configured) serves metrics to anyone who can connect, so the "
        "metrics listener stays on loopback, but metrics_listen is '",
        metrics, "'; use --metrics-listen 127.0.0.1:PORT, or configure \"tokens\""));
  }
  if (!tls) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the metrics listener on '", metrics,
        "', which is not loopback, would take tokens in clear text; configure TLS for it, or "
        "keep it on loopback (--metrics-listen 127.0.0.1:PORT) behind a proxy that terminates "
        "TLS"));
  }
  return absl::OkStatus();
}

int ExecutionThreadsPerUser(const ServerConfig& config) {
  if (config.max_execution_threads_per_user == 0) {
    return std::max(1, config.max_execution_threads / 2);
  }
  return std::min(config.max_execution_threads_per_user, config.max_execution_threads);
}

scheduler::SchedulerOptions ToSchedulerOptions(const ServerConfig& config) {
  scheduler::SchedulerOptions options;
  options.pod = config.pod;
  options.ipu_reset_time = absl::Milliseconds(config.ipu_reset_ms);
  options.partition_reset_time = absl::Milliseconds(config.partition_reset_ms);
  options.pod_reset_time = absl::Milliseconds(config.pod_reset_ms);
  options.max_waiters = config.max_waiters;
  options.max_backfill_waiters = config.max_backfill_waiters;
  options.check_invariants = config.check_invariants;
  options.random_faults = config.random_faults;
  options.policy = std::make_shared<const sharing::SharingPolicy>(config.sharing);
  return options;
}

}  // namespace ipupod::server
