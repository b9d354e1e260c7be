// File: http/http_listener.h
//
// HttpListener: a small, bounded HTTP(S) server on one address, on Debian's
// civetweb. Its owner registers the routes (exact paths, GET and HEAD only)
// before it starts; it answers everything else itself (404 for an unknown
// path, 405 with `Allow: GET, HEAD` for another method, 401 without valid
// credentials) and knows nothing of what its routes serve. It never touches
// a file: no document root, no directory listing, no CGI or Lua.
//
//   HttpListenerOptions options;
//   options.host = "127.0.0.1";  options.port = 9464;       // 0: any free port
//   options.routes.push_back({"/metrics", [&](const HttpRequest&) { return ...; }});
//   options.routes.push_back({"/healthz", Healthz, /*public_route=*/true});
//   IPUPOD_ASSIGN_OR_RETURN(auto listener, HttpListener::Start(std::move(options)));
//   listener->url();   // "http://127.0.0.1:9464"
//
// Identity. Without `check_token` every request is served (the owner keeps
// such a listener on loopback). With it, a request to a route that is not
// public needs `Authorization: Bearer <token>` or HTTP Basic with the token
// as the password (http/credentials.h); a missing or unknown token is 401
// with `WWW-Authenticate: Basic realm="<realm>"` and the same body either
// way, so nothing says which tokens exist. check_token must compare in
// constant time. A public route (liveness) needs nothing.
//
// TLS. With `cert_pem` and `key_pem` (PEM text, not paths) it serves HTTPS
// only (TLS 1.2 or later), the credentials loaded from memory into
// civetweb's SSL_CTX by its init_ssl callback (http/tls_credentials.h);
// http/civetweb_openssl3/README says how civetweb finds OpenSSL 3.
//
// Bounds. `worker_threads` requests are served at once (civetweb's thread per
// connection; keep-alive is off, so a connection is one request); more wait
// in civetweb's queue and the kernel's backlog. A request line and headers
// over `max_request_bytes` are refused (civetweb answers 413 or closes);
// request bodies are never read. A client that sends nothing, or too little
// too slowly, holds its worker at most about `request_timeout`; so with
// S such clients at once a request waits at most about
// ceil(S / worker_threads) x request_timeout.
//
// Errors: Start - INVALID_ARGUMENT (a host that is not an IPv4 address or
// "localhost": Debian's civetweb is built without IPv6; a bad port, bound,
// route or TLS credential), UNAVAILABLE naming the address and the reason
// (in use, not an address of this host). Never an abort or an exception.
//
// Thread safety: handlers run on civetweb's worker threads, concurrently;
// they must be thread-safe and must not throw (an exception is caught and
// answered 500). port(), url() and Stop() are safe from any thread; Stop()
// (and the destructor) waits for the requests in flight.
#ifndef IPUPOD_HTTP_HTTP_LISTENER_H_
#define IPUPOD_HTTP_HTTP_LISTENER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "http/tls_credentials.h"

struct mg_connection;
struct mg_context;

namespace ipupod::http {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // decoded, without the query: "/metrics"
  std::string query;   // after '?', "" without one
  std::string user;    // whose token it presented; "" without check_token or on a public route
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;  // not sent for HEAD (Content-Length still says its size)
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct Route {
  std::string path;  // exact, starting with '/'
  HttpHandler handler;
  bool public_route = false;  // served without credentials
};

// The user a token belongs to, or nullopt. Must compare in constant time.
using TokenCheck = std::function<std::optional<std::string>(absl::string_view token)>;

struct HttpListenerOptions {
  std::string host = "127.0.0.1";  // an IPv4 address or "localhost"
  int port = 0;                    // 0 = any free port
  std::vector<Route> routes;
  TokenCheck check_token;  // empty = no credentials asked (loopback only, the owner's rule)
  std::string realm = "ipupod";
  std::string cert_pem;  // both set = HTTPS only
  std::string key_pem;
  int worker_threads = 4;
  absl::Duration request_timeout = absl::Seconds(5);
  int max_request_bytes = 8192;
};

// Bounds Start checks.
inline constexpr int kWorkerThreadsMax = 64;
inline constexpr int kRoutesMax = 64;
inline constexpr int kMaxRequestBytesMin = 1024;
inline constexpr int kMaxRequestBytesMax = 1 << 20;

class HttpListener {
 public:
  static absl::StatusOr<std::unique_ptr<HttpListener>> Start(HttpListenerOptions options);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // The bound port (never 0 once started).
  int port() const { return port_; }
  bool https() const { return tls_ != nullptr; }
  // "http://127.0.0.1:9464" or "https://...".
  std::string url() const;
  // Stops accepting and waits for the requests in flight. Idempotent.
  void Stop();

 private:
  explicit HttpListener(HttpListenerOptions options);
  absl::Status Open();
  // civetweb's callbacks; `user_data` / the context's user data is the listener.
  static int BeginRequest(mg_connection* conn);
  static int InitSsl(void* ssl_ctx, void* user_data);
  static int LogMessage(const mg_connection* conn, const char* message);
  // Connects to the listening port and hangs up: civetweb's accept loop
  // returns from its poll and sees a stop.
  void WakeAcceptLoop() const;
  // Answers one request; returns the status sent.
  int Serve(mg_connection* conn) const;
  // The user whose token the request presents; nullopt when it presents none
  // or an unknown one. REQUIRES: check_token is set.
  std::optional<std::string> Authenticate(mg_connection* conn) const;

  const HttpListenerOptions options_;
  absl::flat_hash_map<std::string, const Route*> routes_;  // into options_.routes
  std::shared_ptr<const TlsCredentials> tls_;
  int port_ = 0;
  absl::Mutex mu_;
  mg_context* context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace ipupod::http

#endif  // IPUPOD_HTTP_HTTP_LISTENER_H_
