#include "client/files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include <sys/stat.h>

namespace ipupod::client {

absl::StatusOr<std::string> ReadWholeFile(absl::string_view path, absl::string_view what) {
  const std::string p(path);
  struct stat st {};
  if (stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat(what, " '", p, "' ", S_ISDIR(st.st_mode) ? "is a directory" : "does not exist",
                     "; check the path"));
  }
  std::ifstream in(p, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InternalError(
        absl::StrCat("cannot read ", what, " '", p, "': ", std::strerror(errno)));
  }
  return std::move(bytes).str();
}

std::string ReplaceExtension(absl::string_view path, absl::string_view extension) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const bool has_extension = dot != absl::string_view::npos && dot > 0 &&
                             (slash == absl::string_view::npos || dot > slash + 1);
  absl::string_view stem = has_extension ? path.substr(0, dot) : path;
  return absl::StrCat(stem, extension);
}

}  // namespace ipupod::client
