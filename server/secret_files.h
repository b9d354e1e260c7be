// File: server/secret_files.h
//
// What ipupodd says at start about the files that hold its secrets: the TLS
// private key (tls.key, --tls-key) and the config file when it holds tokens
// (--config; a token is a password). A file that users other than its owner
// can read (group or other read bits, as ssh judges private keys) is named
// in a warning with its mode and what to do (chmod 600). It is a warning,
// not a refusal: a deployment may rely on a group it trusts, and refusing
// would stop a server that runs today.
//
// Thread safety: pure functions (they stat files).
// Errors: none; a file that cannot be stat'ed gets no warning (reading it
// fails elsewhere, with its own message).
#ifndef IPUPOD_SERVER_SECRET_FILES_H_
#define IPUPOD_SERVER_SECRET_FILES_H_

#include <string>
#include <vector>

#include "server/config.h"

namespace ipupod::server {

// One line per secret file others can read, e.g. "the TLS private key
// '/etc/ipupod/key.pem' (tls.key, --tls-key) is readable by other users
// (mode 0644): anyone on this machine can impersonate the server; chmod 600
// it (and chown it to the user ipupodd runs as)".
std::vector<std::string> SecretFileWarnings(const ServerConfig& config);

// Logs each of SecretFileWarnings as a warning.
void WarnAboutSecretFiles(const ServerConfig& config);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_SECRET_FILES_H_
