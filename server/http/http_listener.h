// File: server/http/http_listener.h
//
// HttpListener: a small, bounded HTTP(S) server on one address, on Debian's
// GNU libmicrohttpd. Its owner registers the routes (exact paths, GET and
// HEAD only) before it starts; it answers everything else itself (404 for an
// unknown path, 405 with `Allow: GET, HEAD` for another method, 401 without
// valid credentials) and knows nothing of what its routes serve. It never
// touches a file: no document root, no directory listing, nothing executed.
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
// as the password (server/http/credentials.h); a missing or unknown token is 401
// with `WWW-Authenticate: Basic realm="<realm>"` and the same body either
// way, so nothing says which tokens exist. check_token must compare in
// constant time. A public route (liveness) needs nothing.
//
// DNS rebinding. Without `check_token` (open mode, on loopback) a web page
// from anywhere could rebind its own name to this address and read the
// routes from the user's browser. So a request to a route that is not public
// must name an IP address or "localhost" in its Host header (any port; no
// Host at all, HTTP/1.0, is served): any other name is answered 421 saying
// so, and the handler never runs.
//
// TLS. With `cert_pem` and `key_pem` (PEM text, not paths) it serves HTTPS
// only, TLS 1.2 or 1.3 (GnuTLS, through libmicrohttpd), and never
// renegotiates: a client's second handshake on a connection (TLS 1.2) is
// refused (the connection closed), so one connection costs at most one
// handshake (TLS 1.3 has no renegotiation). Start checks both
// with GnuTLS first (server/http/tls_credentials.h), so a bad certificate or key is
// an INVALID_ARGUMENT saying which, never a listener that fails handshakes.
//
// Engine and bounds. libmicrohttpd's own event loop (epoll) on
// `worker_threads` threads: a connection costs a socket and at most
// `max_request_bytes` of memory (with TLS, GnuTLS's session besides), not a
// thread, so clients that send
// nothing, or a byte now and then, delay no one. A connection belongs to the
// thread that accepted it and its handler runs there, so a slow handler
// delays only that thread's connections. Every request is answered once its
// headers are in, before any body (a body is never read), and the
// connection closes after the response: one request per connection.
//   - max_connections: open at once. libmicrohttpd shares it among its
//     threads; a thread at its share stops accepting (the others go on), so
//     once all are full a new connection waits in the kernel's backlog
//     until one closes, and is served then.
//   - max_connections_per_ip: open at once from one client address; one
//     more from it is accepted and closed (reset) at once, unanswered, so
//     one client cannot take them all. Clients behind one proxy or NAT
//     share its allowance.
//   - idle_timeout: a connection with no traffic for this long (sending
//     nothing, or stalled mid-request or mid-handshake) is closed.
//   - request_timeout: a connection that has not sent a whole request
//     (headers; with TLS the handshake too) this long after it was accepted
//     is closed (shut down by a thread of the listener's, checked every
//     250 ms), however it trickles. So every connection frees its slot
//     within request_timeout, and a crowd of slow clients from a few
//     addresses, which the per-address limit does not stop, delays any new
//     connection (a liveness probe of /healthz) by at most about twice
//     request_timeout: one turn of the slots for those ahead of it in the
//     kernel's backlog, and its own request.
//   - max_request_bytes: libmicrohttpd's memory per connection, which holds
//     the request line and headers (and the response's header): a request
//     line over it is answered 414, headers over it 431, and the
//     connection closed.
//
// libmicrohttpd's panic handler (process-wide, installed by the first
// Start; server/http/panic.h says why): on an internal inconsistency it logs and
// parks the thread of libmicrohttpd's that hit it for the rest of the
// process instead of aborting the process; from then on every listener
// answers 503 to every request (so /healthz fails and a supervisor can
// restart the server), and Stop() no longer joins libmicrohttpd's threads.
//
// Errors: Start - INVALID_ARGUMENT (a host that is not an IPv4 or IPv6
// address or "localhost", a bad port, bound, route or TLS credential),
// UNAVAILABLE naming the address and the reason (in use, not an address of
// this host). Never an abort or an exception.
//
// Thread safety: handlers run on libmicrohttpd's threads, concurrently; they
// must be thread-safe and must not throw (an exception is caught and
// answered 500). port(), url() and Stop() are safe from any thread; Stop()
// (and the destructor) closes every connection and waits for the handlers
// in flight, nothing else: libmicrohttpd wakes its threads itself.
#ifndef IPUPOD_HTTP_HTTP_LISTENER_H_
#define IPUPOD_HTTP_HTTP_LISTENER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

struct MHD_Connection;
struct MHD_Daemon;

namespace ipupod::http {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // decoded, without the query: "/metrics"
  std::string query;   // after '?', re-encoded from its parsed arguments; "" without one
  std::string user;    // whose token it presented; "" without check_token or on a public route
  bool admin = false;  // what check_token said of that token
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

// Whom a token belongs to, as its owner's config says.
struct HttpIdentity {
  std::string user;
  bool admin = false;
};

// The identity a token belongs to, or nullopt. Must compare in constant time.
using TokenCheck = std::function<std::optional<HttpIdentity>(absl::string_view token)>;

struct HttpListenerOptions {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 address ("::1", "[::1]") or "localhost"
  int port = 0;                    // 0 = any free port
  std::vector<Route> routes;
  TokenCheck check_token;  // empty = no credentials asked (loopback only, the owner's rule)
  std::string realm = "ipupod";
  std::string cert_pem;  // both set = HTTPS only
  std::string key_pem;
  int worker_threads = 2;                             // libmicrohttpd's thread pool
  int max_connections = 256;                          // open at once, all clients
  int max_connections_per_ip = 64;                    // open at once from one address
  absl::Duration idle_timeout = absl::Seconds(10);    // whole seconds
  int max_request_bytes = 8192;                       // per-connection memory
  absl::Duration request_timeout = absl::Seconds(5);  // accept to whole request; >= 1 s
};

// Bounds Start checks.
inline constexpr int kWorkerThreadsMax = 64;
inline constexpr int kRoutesMax = 64;
inline constexpr int kMaxConnectionsMax = 65536;
inline constexpr int kMaxRequestBytesMin = 2048;
inline constexpr int kMaxRequestBytesMax = 1 << 20;

class HttpListener {
 public:
  static absl::StatusOr<std::unique_ptr<HttpListener>> Start(HttpListenerOptions options);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // The bound port (never 0 once started).
  int port() const { return port_; }
  bool https() const { return !options_.cert_pem.empty(); }
  // "http://127.0.0.1:9464", "http://[::1]:9464" or "https://...".
  std::string url() const;
  // Stops accepting, closes every connection and waits for the handlers in
  // flight. Idempotent.
  void Stop();

 private:
  // libmicrohttpd's callbacks (http_listener.cc): C functions with access to Serve.
  struct Callbacks;

  explicit HttpListener(HttpListenerOptions options);
  absl::Status Open();
  // Answers one request (always on libmicrohttpd's first call for it, before
  // any body is read); false when no response could be queued (the
  // connection is then closed).
  bool Serve(MHD_Connection* connection, const char* url, const char* method) const;
  // The user whose token the request presents; nullopt when it presents none
  // or an unknown one. REQUIRES: check_token is set.
  std::optional<HttpIdentity> Authenticate(MHD_Connection* connection) const;
  // request_timeout: connections still without a whole request, by the time
  // they were accepted; the reaper shuts down those past it.
  void Accepted(MHD_Connection* connection, int fd);
  void RequestIn(MHD_Connection* connection);
  void Reap();

  struct Pending {
    int fd = -1;
    absl::Time accepted;
  };

  const HttpListenerOptions options_;
  absl::flat_hash_map<std::string, const Route*> routes_;  // into options_.routes
  int port_ = 0;
  std::string url_host_;  // "127.0.0.1", "[::1]": the bound address as a URL shows it
  absl::Mutex mu_;
  MHD_Daemon* daemon_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Taken by libmicrohttpd's threads (Accepted, RequestIn, a close) and the
  // reaper. An entry leaves it when its connection closes, before
  // libmicrohttpd closes the socket, so the reaper never touches a reused fd.
  absl::Mutex pending_mu_;
  absl::flat_hash_map<MHD_Connection*, Pending> pending_ ABSL_GUARDED_BY(pending_mu_);
  bool reaper_stopping_ ABSL_GUARDED_BY(pending_mu_) = false;
  absl::CondVar reaper_wake_;
  std::thread reaper_;
};

}  // namespace ipupod::http

#endif  // IPUPOD_HTTP_HTTP_LISTENER_H_
