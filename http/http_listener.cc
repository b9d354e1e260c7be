#include "http/http_listener.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "http/credentials.h"
#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

extern "C" {
// http/civetweb_openssl3: referenced so that every program linking this
// library loads them under the names civetweb opens (see the README there).
int ipupod_civetweb_libssl_compat();
int ipupod_civetweb_libcrypto_compat();
}

namespace ipupod::http {
namespace {

// Stop: how often, and how long at most, it wakes civetweb's accept loop.
constexpr absl::Duration kWakeEvery = absl::Milliseconds(20);
constexpr absl::Duration kWakeFor = absl::Seconds(5);

// What civetweb logs while mg_start2 runs on this thread: the reason behind
// its generic "Failed to setup server ports".
thread_local std::string* start_log = nullptr;

absl::Status CheckOptions(const HttpListenerOptions& o) {
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", o.port, " is not from 0 to 65535"));
  }
  if (o.worker_threads < 1 || o.worker_threads > kWorkerThreadsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_threads must be from 1 to ", kWorkerThreadsMax));
  }
  if (o.request_timeout < absl::Milliseconds(100) || o.request_timeout > absl::Minutes(10)) {
    return absl::InvalidArgumentError("request_timeout must be from 100 ms to 10 minutes");
  }
  if (o.max_request_bytes < kMaxRequestBytesMin || o.max_request_bytes > kMaxRequestBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_request_bytes must be from ", kMaxRequestBytesMin, " to ", kMaxRequestBytesMax));
  }
  if (o.cert_pem.empty() != o.key_pem.empty()) {
    return absl::InvalidArgumentError(
        "HTTPS needs both a certificate and its private key; only one was given");
  }
  if (o.routes.size() > static_cast<size_t>(kRoutesMax)) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kRoutesMax, " routes"));
  }
  for (const Route& route : o.routes) {
    if (route.path.empty() || route.path[0] != '/' || !route.handler) {
      return absl::InvalidArgumentError(
          absl::StrCat("route '", route.path, "' needs a path starting with '/' and a handler"));
    }
  }
  return absl::OkStatus();
}

// The IPv4 address civetweb binds for `host`.
absl::StatusOr<std::string> BindAddress(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return std::string("127.0.0.1");
  in_addr v4{};
  const std::string text(host);
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return text;
  return absl::InvalidArgumentError(absl::StrCat(
      "the HTTP listener takes an IPv4 address or localhost (Debian's civetweb is built without "
      "IPv6), not '",
      host.substr(0, 64), "'; e.g. 127.0.0.1:9464 or 0.0.0.0:9464"));
}

bool IsCleanHeaderValue(absl::string_view value) {
  return value.find_first_of("\r\n") == absl::string_view::npos;
}

// Writes the response; `extra_headers` are whole "Name: value\r\n" lines.
int Send(mg_connection* conn, bool head, const HttpResponse& response,
         absl::string_view extra_headers = "") {
  const absl::string_view type = IsCleanHeaderValue(response.content_type)
                                     ? absl::string_view(response.content_type)
                                     : absl::string_view("application/octet-stream");
  const std::string header = absl::StrCat(
      "HTTP/1.1 ", response.status, " ", mg_get_response_code_text(conn, response.status),
      "\r\nContent-Type: ", type, "\r\nContent-Length: ", response.body.size(),
      "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n",
      extra_headers, "\r\n");
  mg_write(conn, header.data(), header.size());
  if (!head && !response.body.empty()) mg_write(conn, response.body.data(), response.body.size());
  return response.status;
}

HttpResponse Text(int status, std::string body) {
  return HttpResponse{status, "text/plain; charset=utf-8", std::move(body)};
}

}  // namespace

HttpListener::HttpListener(HttpListenerOptions options) : options_(std::move(options)) {
  for (const Route& route : options_.routes) routes_.emplace(route.path, &route);
}

HttpListener::~HttpListener() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(HttpListenerOptions options) {
  IPUPOD_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<HttpListener> listener(new HttpListener(std::move(options)));
  if (listener->routes_.size() != listener->options_.routes.size()) {
    return absl::InvalidArgumentError("two routes have the same path");
  }
  IPUPOD_RETURN_IF_ERROR(listener->Open());
  return listener;
}

absl::Status HttpListener::Open() {
  IPUPOD_ASSIGN_OR_RETURN(const std::string address, BindAddress(options_.host));
  if (!options_.cert_pem.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(tls_, TlsCredentials::FromPem(options_.cert_pem, options_.key_pem));
  }
  static std::once_flag library;
  std::call_once(library, [] {
    ipupod_civetweb_libssl_compat();
    ipupod_civetweb_libcrypto_compat();
    mg_init_library(MG_FEATURES_TLS);  // for the process's life
  });
  if (tls_ != nullptr && mg_check_feature(MG_FEATURES_TLS) == 0) {
    return absl::FailedPreconditionError("this civetweb was built without HTTPS");
  }
  const std::string ports = absl::StrCat(address, ":", options_.port, tls_ ? "s" : "");
  const std::string threads = absl::StrCat(options_.worker_threads);
  const std::string timeout = absl::StrCat(absl::ToInt64Milliseconds(options_.request_timeout));
  const std::string request_bytes = absl::StrCat(options_.max_request_bytes);
  // No document_root: civetweb serves no file, lists no directory, runs no CGI.
  std::vector<const char*> config = {"listening_ports",      ports.c_str(),
                                     "num_threads",          threads.c_str(),
                                     "request_timeout_ms",   timeout.c_str(),
                                     "max_request_size",     request_bytes.c_str(),
                                     "enable_keep_alive",    "no",
                                     "ssl_protocol_version", "4"};
  config.push_back(nullptr);
  mg_callbacks callbacks{};
  callbacks.begin_request = &HttpListener::BeginRequest;
  callbacks.log_message = &HttpListener::LogMessage;
  if (tls_ != nullptr) callbacks.init_ssl = &HttpListener::InitSsl;
  mg_init_data init{&callbacks, this, config.data()};
  char text[256] = "";
  unsigned code = 0;
  mg_error_data error{&code, text, sizeof text};
  std::string log;
  start_log = &log;
  mg_context* context = mg_start2(&init, &error);
  start_log = nullptr;
  if (context == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP", tls_ ? "S" : "", " on ",
                                               address, ":", options_.port, ": ",
                                               log.empty() ? text : log));
  }
  mg_server_port bound{};
  if (mg_get_server_ports(context, 1, &bound) != 1 || bound.port <= 0) {
    mg_stop(context);
    return absl::InternalError(
        absl::StrCat("civetweb did not report the port it bound on ", ports));
  }
  port_ = bound.port;
  sync::MutexLock lock(&mu_);
  context_ = context;
  return absl::OkStatus();
}

std::string HttpListener::url() const {
  const std::string host = BindAddress(options_.host).value_or(options_.host);
  return absl::StrCat(tls_ ? "https" : "http", "://", host, ":", port_);
}

void HttpListener::Stop() {
  mg_context* context = nullptr;
  {
    sync::MutexLock lock(&mu_);
    std::swap(context, context_);
  }
  if (context == nullptr) return;
  // mg_stop joins civetweb's threads, but its accept loop polls in 2 s
  // slices and sees the stop only when one ends (every server shutdown, and
  // every test, would wait for it); a connection wakes it at once.
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    mg_stop(context);
    stopped.store(true);
  });
  const absl::Time deadline = absl::Now() + kWakeFor;
  while (!stopped.load() && absl::Now() < deadline) {
    WakeAcceptLoop();
    absl::SleepFor(kWakeEvery);
  }
  stopper.join();
}

void HttpListener::WakeAcceptLoop() const {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port_));
  const std::string host = BindAddress(options_.host).value_or("127.0.0.1");
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1 ||
      address.sin_addr.s_addr == htonl(INADDR_ANY)) {
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  (void)::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  ::close(fd);
}

int HttpListener::BeginRequest(mg_connection* conn) {
  const auto* listener = static_cast<const HttpListener*>(mg_get_user_data(mg_get_context(conn)));
  try {  // nothing may unwind into civetweb's C frames
    return listener->Serve(conn);
  } catch (...) {
    return Send(conn, false, Text(500, "500 internal server error\n"));
  }
}

int HttpListener::InitSsl(void* ssl_ctx, void* user_data) {
  const auto* listener = static_cast<const HttpListener*>(user_data);
  const absl::Status installed = listener->tls_->InstallIn(static_cast<SSL_CTX*>(ssl_ctx));
  if (installed.ok()) return 1;  // civetweb loads no certificate of its own
  if (start_log != nullptr) absl::StrAppend(start_log, installed.message());
  return -1;
}

int HttpListener::LogMessage(const mg_connection* conn, const char* message) {
  if (start_log != nullptr) {
    absl::StrAppend(start_log, start_log->empty() ? "" : "; ", message);
  } else {
    // Mostly what clients did wrong (a TLS handshake with plain HTTP, a
    // request too large): not the operator's concern unless debugging.
    spdlog::debug("http: {}", message);
  }
  return 1;  // civetweb writes nothing to stderr itself
}

std::optional<std::string> HttpListener::Authenticate(mg_connection* conn) const {
  const char* header = mg_get_header(conn, "Authorization");
  if (header == nullptr) return std::nullopt;
  std::optional<std::string> token = PresentedToken(header);
  if (!token) return std::nullopt;
  return options_.check_token(*token);
}

int HttpListener::Serve(mg_connection* conn) const {
  const mg_request_info* info = mg_get_request_info(conn);
  HttpRequest request;
  request.method = info->request_method != nullptr ? info->request_method : "";
  request.path = info->local_uri != nullptr ? info->local_uri : "";
  request.query = info->query_string != nullptr ? info->query_string : "";
  const bool head = request.method == "HEAD";
  const auto route = routes_.find(request.path);
  const bool known = route != routes_.end();
  if (options_.check_token && !(known && route->second->public_route)) {
    std::optional<std::string> user = Authenticate(conn);
    if (!user) {
      return Send(conn, head,
                  Text(401,
                       "401 unauthorized: send `Authorization: Bearer <token>`, or log in "
                       "with any user name and a token of the server's config as the "
                       "password\n"),
                  absl::StrCat("WWW-Authenticate: Basic realm=\"", options_.realm,
                               "\", charset=\"UTF-8\"\r\n"));
    }
    request.user = *std::move(user);
  }
  if (!known) {
    std::vector<absl::string_view> paths;
    for (const Route& r : options_.routes) paths.push_back(r.path);
    return Send(conn, head,
                Text(404, absl::StrCat("404 not found; this server serves ",
                                       absl::StrJoin(paths, ", "), "\n")));
  }
  if (request.method != "GET" && !head) {
    return Send(conn, false, Text(405, "405 method not allowed: only GET and HEAD\n"),
                "Allow: GET, HEAD\r\n");
  }
  HttpResponse response;
  try {
    response = route->second->handler(request);
  } catch (const std::exception& e) {
    spdlog::error("http: the handler of {} threw: {}", request.path, e.what());
    response = Text(500, "500 internal server error\n");
  } catch (...) {
    spdlog::error("http: the handler of {} threw", request.path);
    response = Text(500, "500 internal server error\n");
  }
  return Send(conn, head, response);
}

}  // namespace ipupod::http
