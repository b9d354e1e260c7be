// libssl.so for civetweb (http/CMakeLists.txt): the libssl.so.3 it depends
// on, plus the one function Debian's civetweb 1.15 looks up that OpenSSL 3
// no longer exports. Exported with C linkage, default visibility.
#include <openssl/ssl.h>

// OpenSSL 3 turned it into a macro for SSL_get1_peer_certificate (the same
// function: a new reference the caller frees, as civetweb does).
#undef SSL_get_peer_certificate

extern "C" {

X509* SSL_get_peer_certificate(const SSL* ssl);
X509* SSL_get_peer_certificate(const SSL* ssl) { return SSL_get1_peer_certificate(ssl); }

// Referenced by ipupod_http, so that a program linking it needs this library.
int ipupod_civetweb_libssl_compat();
int ipupod_civetweb_libssl_compat() { return 3; }

}  // extern "C"
