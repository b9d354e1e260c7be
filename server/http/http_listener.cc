#include "server/http/http_listener.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "server/http/credentials.h"
#include "server/http/panic.h"
#include "server/http/tls_credentials.h"
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ipupod::http {
namespace {

// TLS 1.3 and 1.2 only, with GnuTLS's NORMAL ciphers.
constexpr const char* kTlsPriorities = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
// Connections the kernel completes while every worker is at its limit wait
// here until one frees (libmicrohttpd stops accepting at the limit).
constexpr int kListenBacklog = 128;
// After a panic, how long Stop waits for the handlers in flight to leave.
constexpr absl::Duration kPanicDrain = absl::Seconds(5);
// How often the reaper looks for connections past request_timeout.
constexpr absl::Duration kReapEvery = absl::Milliseconds(250);

// What libmicrohttpd logs while MHD_start_daemon runs on this thread: the
// reason behind its NULL.
thread_local std::string* start_log = nullptr;

absl::Status CheckBounds(const HttpListenerOptions& o) {
  if (o.worker_threads < 1 || o.worker_threads > kWorkerThreadsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_threads must be from 1 to ", kWorkerThreadsMax));
  }
  if (o.max_connections < o.worker_threads || o.max_connections > kMaxConnectionsMax) {
    return absl::InvalidArgumentError(absl::StrCat("max_connections must be from worker_threads (",
                                                   o.worker_threads, ") to ", kMaxConnectionsMax,
                                                   " (libmicrohttpd shares it among its threads)"));
  }
  if (o.max_connections_per_ip < 1 || o.max_connections_per_ip > o.max_connections) {
    return absl::InvalidArgumentError("max_connections_per_ip must be from 1 to max_connections");
  }
  if (o.idle_timeout < absl::Seconds(1) || o.idle_timeout > absl::Hours(1) ||
      o.idle_timeout != absl::Seconds(absl::ToInt64Seconds(o.idle_timeout))) {
    return absl::InvalidArgumentError("idle_timeout must be whole seconds from 1 s to 1 hour");
  }
  if (o.request_timeout < absl::Seconds(1) || o.request_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError("request_timeout must be from 1 s to 1 hour");
  }
  if (o.max_request_bytes < kMaxRequestBytesMin || o.max_request_bytes > kMaxRequestBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_request_bytes must be from ", kMaxRequestBytesMin, " to ", kMaxRequestBytesMax));
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const HttpListenerOptions& o) {
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", o.port, " is not from 0 to 65535"));
  }
  IPUPOD_RETURN_IF_ERROR(CheckBounds(o));
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

// The socket address to bind for `host`, and the host as a URL shows it.
struct BindTarget {
  sockaddr_storage address{};
  socklen_t length = 0;
  std::string url_host;  // "127.0.0.1", "[::1]"
};

absl::StatusOr<BindTarget> ResolveHost(absl::string_view host, int port) {
  std::string text(host);
  if (absl::EqualsIgnoreCase(text, "localhost")) text = "127.0.0.1";
  if (text.size() > 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  BindTarget target;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&target.address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&target.address);
  if (inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    target.length = sizeof(sockaddr_in);
    target.url_host = text;
  } else if (inet_pton(AF_INET6, text.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    target.length = sizeof(sockaddr_in6);
    target.url_host = absl::StrCat("[", text, "]");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("the HTTP listener takes an IPv4 or IPv6 address, or localhost, not '",
                     host.substr(0, 64), "'; e.g. 127.0.0.1:9464, [::1]:9464 or 0.0.0.0:9464"));
  }
  return target;
}

// A listening socket on `target` (non-blocking: libmicrohttpd's threads all
// accept from it). UNAVAILABLE naming the address and the reason.
absl::StatusOr<int> Listen(const BindTarget& target, int port) {
  const std::string shown = absl::StrCat(target.url_host, ":", port);
  const int fd = ::socket(target.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", shown, ": ", std::strerror(errno)));
  }
  const int on = 1;
  // A restart binds while the last run's connections linger in TIME_WAIT;
  // a port another socket listens on is still EADDRINUSE.
  bool ok = ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0;
  if (target.address.ss_family == AF_INET6) {
    ok = ok && ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) == 0;
  }
  ok = ok && ::bind(fd, reinterpret_cast<const sockaddr*>(&target.address), target.length) == 0 &&
       ::listen(fd, kListenBacklog) == 0;
  if (!ok) {
    const int error = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", shown, ": ", std::strerror(error)));
  }
  return fd;
}

// The port the kernel gave `fd`.
int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) return 0;
  if (bound.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
}

void Log(void*, const char* format, va_list args) {
  char text[512];
  std::vsnprintf(text, sizeof text, format, args);
  const std::string message(absl::StripTrailingAsciiWhitespace(text));
  if (start_log != nullptr) {
    absl::StrAppend(start_log, start_log->empty() ? "" : "; ", message);
  } else {
    // Mostly what clients did (a request too large, a TLS handshake with
    // plain HTTP, a connection over a limit): not the operator's concern
    // unless debugging.
    spdlog::debug("http: {}", message);
  }
}

MHD_OptionItem Option(MHD_OPTION option, intptr_t value, void* pointer = nullptr) {
  return MHD_OptionItem{option, value, pointer};
}

// libmicrohttpd's options for `o`, serving on the listening socket `fd`,
// telling `notify` (with `listener`) of every connection's start and close.
std::vector<MHD_OptionItem> DaemonOptions(const HttpListenerOptions& o, int fd,
                                          MHD_NotifyConnectionCallback notify, void* listener) {
  std::vector<MHD_OptionItem> items = {
      Option(MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&Log)),
      Option(MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(notify), listener),
      Option(MHD_OPTION_LISTEN_SOCKET, fd),
      Option(MHD_OPTION_THREAD_POOL_SIZE, o.worker_threads),
      Option(MHD_OPTION_CONNECTION_LIMIT, o.max_connections),
      Option(MHD_OPTION_PER_IP_CONNECTION_LIMIT, o.max_connections_per_ip),
      Option(MHD_OPTION_CONNECTION_TIMEOUT, absl::ToInt64Seconds(o.idle_timeout)),
      Option(MHD_OPTION_CONNECTION_MEMORY_LIMIT, o.max_request_bytes)};
  if (!o.cert_pem.empty()) {
    // Read (by GnuTLS, which copies them) while the daemon starts.
    items.push_back(Option(MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(o.cert_pem.c_str())));
    items.push_back(Option(MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(o.key_pem.c_str())));
    items.push_back(Option(MHD_OPTION_HTTPS_PRIORITIES, 0, const_cast<char*>(kTlsPriorities)));
  }
  items.push_back(Option(MHD_OPTION_END, 0));
  return items;
}

// Whether a Host header names an IP address or localhost (with or without
// a port): what a page that rebound its own name to this address cannot send.
bool IsAddressHost(absl::string_view host) {
  std::string name;
  absl::string_view port;
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    name = std::string(host.substr(1, close - 1));
    port = host.substr(close + 1);
    in6_addr v6{};
    if (inet_pton(AF_INET6, name.c_str(), &v6) != 1) return false;
  } else {
    const size_t colon = host.find(':');
    name = std::string(host.substr(0, colon));
    port = colon == absl::string_view::npos ? "" : host.substr(colon);
    in_addr v4{};
    if (inet_pton(AF_INET, name.c_str(), &v4) != 1 && !absl::EqualsIgnoreCase(name, "localhost")) {
      return false;
    }
  }
  if (port.empty()) return true;
  if (port[0] != ':' || port.size() < 2 || port.size() > 6) return false;
  return std::all_of(port.begin() + 1, port.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
}

bool IsCleanHeaderValue(absl::string_view value) {
  return value.find_first_of("\r\n") == absl::string_view::npos;
}

void FreeBody(void* body) { delete static_cast<std::string*>(body); }

using Header = std::pair<const char*, std::string>;

// Queues the response (the body is moved into it and freed with it; for
// HEAD, libmicrohttpd sends its Content-Length and not the body).
bool Send(MHD_Connection* connection, HttpResponse response,
          const std::vector<Header>& extra = {}) {
  if (response.status < 100 || response.status > 599) {
    spdlog::error("http: a handler answered status {}; sent 500", response.status);
    response = HttpResponse{500, "text/plain; charset=utf-8", "500 internal server error\n"};
  }
  auto* body = new std::string(std::move(response.body));
  MHD_Response* sent = MHD_create_response_from_buffer_with_free_callback_cls(
      body->size(), body->data(), &FreeBody, body);
  if (sent == nullptr) {
    delete body;
    return false;
  }
  const std::string type = IsCleanHeaderValue(response.content_type) ? response.content_type
                                                                     : "application/octet-stream";
  bool ok = MHD_add_response_header(sent, MHD_HTTP_HEADER_CONTENT_TYPE, type.c_str()) == MHD_YES &&
            MHD_add_response_header(sent, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store") == MHD_YES &&
            MHD_add_response_header(sent, "X-Content-Type-Options", "nosniff") == MHD_YES;
  for (const auto& [name, value] : extra) {
    ok = ok && MHD_add_response_header(sent, name, value.c_str()) == MHD_YES;
  }
  ok = ok &&
       MHD_queue_response(connection, static_cast<unsigned int>(response.status), sent) == MHD_YES;
  MHD_destroy_response(sent);  // reference-counted: freed once sent
  return ok;
}

HttpResponse Text(int status, std::string body) {
  return HttpResponse{status, "text/plain; charset=utf-8", std::move(body)};
}

// '%'-encodes all but RFC 3986's unreserved characters.
void AppendEncoded(std::string* out, absl::string_view text) {
  for (const char c : text) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out->push_back(c);
    } else {
      absl::StrAppend(out, "%",
                      absl::AsciiStrToUpper(
                          absl::StrCat(absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2))));
    }
  }
}

MHD_Result AppendArgument(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* query = static_cast<std::string*>(cls);
  if (!query->empty()) query->push_back('&');
  AppendEncoded(query, key != nullptr ? key : "");
  if (value != nullptr) {
    query->push_back('=');
    AppendEncoded(query, value);
  }
  return MHD_YES;
}

// Marks a handler in flight for the panic policy (server/http/panic.h).
class DispatchScope {
 public:
  DispatchScope() { internal::EnterDispatch(); }
  ~DispatchScope() { internal::LeaveDispatch(); }
  DispatchScope(const DispatchScope&) = delete;
  DispatchScope& operator=(const DispatchScope&) = delete;
};

}  // namespace

struct HttpListener::Callbacks {
  // Every request is answered on libmicrohttpd's first call for it, once its
  // headers are in: no body is read, and libmicrohttpd closes the connection
  // after the response (one request per connection).
  static MHD_Result Dispatch(void* cls, MHD_Connection* connection, const char* url,
                             const char* method, const char* /*version*/,
                             const char* /*upload_data*/, size_t* /*upload_data_size*/,
                             void** request_state) {
    DispatchScope scope;
    if (internal::Panicked()) {  // before anything of the listener is touched
      return Send(connection, Text(503, "503 the HTTP listener is out of service; see the log\n"))
                 ? MHD_YES
                 : MHD_NO;
    }
    if (*request_state != nullptr) return MHD_NO;  // a body arrives after the answer: close
    *request_state = connection;
    auto* listener = static_cast<HttpListener*>(cls);
    listener->RequestIn(connection);
    try {  // nothing may unwind into libmicrohttpd's C frames
      return listener->Serve(connection, url, method) ? MHD_YES : MHD_NO;
    } catch (...) {
      try {
        return Send(connection, Text(500, "500 internal server error\n")) ? MHD_YES : MHD_NO;
      } catch (...) {
        return MHD_NO;
      }
    }
  }

  // A connection accepted (its socket registered for request_timeout) or
  // closed (forgotten before libmicrohttpd closes its socket).
  static void Notify(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                     MHD_ConnectionNotificationCode code) {
    DispatchScope scope;
    if (internal::Panicked()) return;  // as Dispatch: the listener may be gone
    auto* listener = static_cast<HttpListener*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      listener->RequestIn(connection);
      return;
    }
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info != nullptr) listener->Accepted(connection, info->connect_fd);
  }
};

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
  IPUPOD_ASSIGN_OR_RETURN(BindTarget target, ResolveHost(options_.host, options_.port));
  const bool tls = https();
  if (tls) IPUPOD_RETURN_IF_ERROR(CheckTlsCredentials(options_.cert_pem, options_.key_pem));
  IPUPOD_ASSIGN_OR_RETURN(const int fd, Listen(target, options_.port));
  url_host_ = target.url_host;
  port_ = BoundPort(fd);
  const std::vector<MHD_OptionItem> items = DaemonOptions(options_, fd, &Callbacks::Notify, this);
  const unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
                             MHD_USE_ERROR_LOG | (tls ? MHD_USE_TLS : 0) |
                             (target.address.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
  internal::InstallPanicHandler();
  std::string log;
  MHD_Daemon* daemon = nullptr;
  {
    internal::OwnerCall owner;
    start_log = &log;
    daemon =
        MHD_start_daemon(flags, 0, nullptr, nullptr, &Callbacks::Dispatch, this, MHD_OPTION_ARRAY,
                         const_cast<MHD_OptionItem*>(items.data()), MHD_OPTION_END);
    start_log = nullptr;
  }
  if (daemon == nullptr) {  // it closed `fd` itself (libmicrohttpd 0.9.75)
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP", tls ? "S" : "", " on ", url_host_, ":", port_,
                     ": libmicrohttpd: ", log.empty() ? "it did not say why" : log));
  }
  {
    sync::MutexLock lock(&mu_);
    daemon_ = daemon;
  }
  reaper_ = std::thread([this] { Reap(); });
  return absl::OkStatus();
}

void HttpListener::Accepted(MHD_Connection* connection, int fd) {
  sync::MutexLock lock(&pending_mu_);
  pending_[connection] = Pending{fd, absl::Now()};
}

void HttpListener::RequestIn(MHD_Connection* connection) {
  sync::MutexLock lock(&pending_mu_);
  pending_.erase(connection);
}

// Shuts down (never closes: the descriptor stays libmicrohttpd's) each
// socket past request_timeout; libmicrohttpd's epoll sees it end and closes
// the connection on its own thread.
void HttpListener::Reap() {
  sync::MutexLock lock(&pending_mu_);
  while (!reaper_stopping_) {
    sync::WaitWithTimeout(&reaper_wake_, &pending_mu_, kReapEvery);
    const absl::Time cutoff = absl::Now() - options_.request_timeout;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.accepted > cutoff) {
        ++it;
        continue;
      }
      ::shutdown(it->second.fd, SHUT_RDWR);
      pending_.erase(it++);
    }
  }
}

std::string HttpListener::url() const {
  return absl::StrCat(https() ? "https" : "http", "://", url_host_, ":", port_);
}

void HttpListener::Stop() {
  {
    sync::MutexLock lock(&pending_mu_);
    reaper_stopping_ = true;
    reaper_wake_.SignalAll();
  }
  if (reaper_.joinable()) reaper_.join();  // before any socket it knows can close
  MHD_Daemon* daemon = nullptr;
  {
    sync::MutexLock lock(&mu_);
    std::swap(daemon, daemon_);
  }
  if (daemon == nullptr) return;
  if (internal::Panicked()) {
    // A parked thread would never be joined (server/http/panic.h). Handlers that
    // began before the panic may still read this listener: wait for them;
    // later requests see the panic first and touch nothing of it.
    const bool drained = internal::AwaitNoDispatch(kPanicDrain);
    spdlog::error("http: libmicrohttpd panicked earlier; its threads are left as they are{}",
                  drained ? "" : " (a handler was still in flight after 5 s)");
    return;
  }
  // MHD_stop_daemon wakes its threads through their inter-thread channel
  // (MHD_USE_ITC), closes every connection and joins them: no accept loop to
  // wake, and the wait is for the handlers in flight only.
  internal::OwnerCall owner;
  MHD_stop_daemon(daemon);
}

std::optional<HttpIdentity> HttpListener::Authenticate(MHD_Connection* connection) const {
  const char* header =
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (header == nullptr) return std::nullopt;
  std::optional<std::string> token = PresentedToken(header);
  if (!token) return std::nullopt;
  return options_.check_token(*token);
}

bool HttpListener::Serve(MHD_Connection* connection, const char* url, const char* method) const {
  HttpRequest request;
  request.method = method != nullptr ? method : "";
  request.path = url != nullptr ? url : "";
  MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &AppendArgument, &request.query);
  const auto route = routes_.find(request.path);
  const bool known = route != routes_.end();
  if (!options_.check_token && !(known && route->second->public_route)) {
    const char* host =
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (host != nullptr && !IsAddressHost(host)) {
      return Send(connection,
                  Text(421, absl::StrCat("421 misdirected request: without tokens this server "
                                         "answers only requests addressed to an IP address or "
                                         "localhost, not to a name (DNS rebinding); use ",
                                         this->url(), "\n")));
    }
  }
  if (options_.check_token && !(known && route->second->public_route)) {
    std::optional<HttpIdentity> identity = Authenticate(connection);
    if (!identity) {
      return Send(connection,
                  Text(401,
                       "401 unauthorized: send `Authorization: Bearer <token>`, or log in "
                       "with any user name and a token of the server's config as the "
                       "password\n"),
                  {{MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                    absl::StrCat("Basic realm=\"", options_.realm, "\", charset=\"UTF-8\"")}});
    }
    request.user = std::move(identity->user);
    request.admin = identity->admin;
  }
  if (!known) {
    std::vector<absl::string_view> paths;
    for (const Route& r : options_.routes) paths.push_back(r.path);
    return Send(connection, Text(404, absl::StrCat("404 not found; this server serves ",
                                                   absl::StrJoin(paths, ", "), "\n")));
  }
  if (request.method != "GET" && request.method != "HEAD") {
    return Send(connection, Text(405, "405 method not allowed: only GET and HEAD\n"),
                {{MHD_HTTP_HEADER_ALLOW, "GET, HEAD"}});
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
  return Send(connection, std::move(response));
}

}  // namespace ipupod::http
