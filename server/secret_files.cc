#include "server/secret_files.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_format.h"
#include <sys/stat.h>

namespace ipupod::server {
namespace {

// The warning for `path` when its group or others may read it; "" otherwise.
std::string Warning(const std::string& path, absl::string_view what, absl::string_view why) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return "";
  if ((st.st_mode & (S_IRGRP | S_IROTH)) == 0) return "";
  return absl::StrFormat(
      "%s '%s' is readable by %s (mode %04o): %s; chmod 600 it (and chown it to the user "
      "ipupodd runs as)",
      what, path, (st.st_mode & S_IROTH) != 0 ? "every user of this machine" : "its group",
      st.st_mode & 07777, why);
}

}  // namespace

std::vector<std::string> SecretFileWarnings(const ServerConfig& config) {
  std::vector<std::string> warnings;
  if (config.tls.enabled()) {
    warnings.push_back(Warning(config.tls.key, "the TLS private key (tls.key, --tls-key)",
                               "whoever reads it can impersonate this server"));
  }
  if (!config.tokens.empty()) {
    warnings.push_back(Warning(config.config_path,
                               "the config file (--config), which holds tokens,",
                               "whoever reads it can act as any user it names, admins included"));
  }
  std::erase(warnings, "");
  return warnings;
}

void WarnAboutSecretFiles(const ServerConfig& config) {
  for (const std::string& warning : SecretFileWarnings(config)) spdlog::warn("{}", warning);
}

}  // namespace ipupod::server
