#include "tests/support/http_client.h"

#include <cstdlib>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/support/python_cases.h"
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ipupod::test_support {
namespace {

size_t Append(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

void SetRequest(CURL* curl, const std::string& url, const HttpOptions& options,
                curl_slist** headers) {
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options.timeout)));
  if (options.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (options.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, options.method.c_str());
  }
  if (!options.bearer.empty()) {
    *headers = curl_slist_append(*headers, ("Authorization: Bearer " + options.bearer).c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, *headers);
  }
  if (!options.basic_user.empty() || !options.basic_password.empty()) {
    curl_easy_setopt(curl, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(curl, CURLOPT_USERNAME, options.basic_user.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, options.basic_password.c_str());
  }
  if (!options.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options.ca_file.c_str());
  if (!options.source.empty()) {
    curl_easy_setopt(curl, CURLOPT_INTERFACE, ("host!" + options.source).c_str());
  }
}

}  // namespace

bool HttpResult::HasHeader(const std::string& line) const {
  for (absl::string_view header : absl::StrSplit(headers, "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || header.size() < line.size()) continue;
    if (absl::EqualsIgnoreCase(header.substr(0, colon), line.substr(0, colon)) &&
        absl::StartsWith(header.substr(colon), line.substr(colon))) {
      return true;
    }
  }
  return false;
}

HttpResult HttpGet(const std::string& url, const HttpOptions& options) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpResult result;
  CURL* curl = curl_easy_init();
  curl_slist* headers = nullptr;
  SetRequest(curl, url, options, &headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &result.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &result.headers);
  const CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.status);
  } else {
    result.error = curl_easy_strerror(code);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return result;
}

HttpOptions WithMethod(std::string method) {
  HttpOptions options;
  options.method = std::move(method);
  return options;
}

HttpOptions WithBearer(std::string token) {
  HttpOptions options;
  options.bearer = std::move(token);
  return options;
}

HttpOptions WithBasic(std::string user, std::string password) {
  HttpOptions options;
  options.basic_user = std::move(user);
  options.basic_password = std::move(password);
  return options;
}

HttpOptions WithCa(std::string ca_file) {
  HttpOptions options;
  options.ca_file = std::move(ca_file);
  return options;
}

HttpOptions WithTimeout(absl::Duration timeout) {
  HttpOptions options;
  options.timeout = timeout;
  return options;
}

HttpOptions WithSource(std::string source) {
  HttpOptions options;
  options.source = std::move(source);
  return options;
}

int ConnectLoopback(int port, const std::string& source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (!source.empty()) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    if (::inet_pton(AF_INET, source.c_str(), &local.sin_addr) != 1 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool HasIpv6Loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return ok;
}

bool ClosedWithin(int fd, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  char buffer[4096];
  while (absl::Now() < deadline) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 20) <= 0) continue;
    if (::recv(fd, buffer, sizeof buffer, 0) <= 0) return true;
  }
  return false;
}

std::string SendRaw(int port, const std::string& bytes, absl::Duration timeout) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string reply;
  const absl::Time deadline = absl::Now() + timeout;
  char buffer[4096];
  while (absl::Now() < deadline) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply;
}

std::optional<TestCertificate> MakeSelfSignedCertificate(const TempDir& dir,
                                                         const std::string& name) {
  TestCertificate made{dir.sub(name + ".pem"), dir.sub(name + ".key"), "", ""};
  const std::string command =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
      "-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout '" +
      made.key_path + "' -out '" + made.cert_path + "' >/dev/null 2>&1";
  if (std::system(command.c_str()) != 0) return std::nullopt;
  made.cert_pem = ReadTextFile(made.cert_path);
  made.key_pem = ReadTextFile(made.key_path);
  if (made.cert_pem.empty() || made.key_pem.empty()) return std::nullopt;
  return made;
}

}  // namespace ipupod::test_support
