#include "client/files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ipupod::client {

namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

absl::Status CheckReadableFile(absl::string_view path, absl::string_view what) {
  const std::string p(path);
  struct stat st {};
  if (stat(p.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(what, " '", p, "' does not exist; check the path"));
    }
    return absl::InternalError(
        absl::StrCat("cannot look at ", what, " '", p, "': ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", p, "' is ", KindOf(st.st_mode),
                                                   ", not a regular file; pass a file"));
  }
  if (st.st_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", p, "' is empty (0 bytes); pass the file it should be"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(absl::string_view path, absl::string_view what) {
  if (absl::Status ok = CheckReadableFile(path, what); !ok.ok()) return ok;
  const std::string p(path);
  std::ifstream in(p, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InternalError(
        absl::StrCat("cannot read ", what, " '", p, "': ", std::strerror(errno)));
  }
  return std::move(bytes).str();
}

absl::Status ForEachFileChunk(absl::string_view path, absl::string_view what, uint64_t offset,
                              size_t chunk_bytes,
                              const std::function<bool(absl::string_view)>& on_chunk) {
  if (absl::Status ok = CheckReadableFile(path, what); !ok.ok()) return ok;
  const std::string p(path);
  const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open ", what, " '", p, "': ", std::strerror(errno)));
  }
  std::string buffer(chunk_bytes, '\0');
  absl::Status status;
  off_t position = static_cast<off_t>(offset);
  while (true) {
    const ssize_t n = pread(fd, buffer.data(), buffer.size(), position);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = absl::InternalError(
          absl::StrCat("cannot read ", what, " '", p, "': ", std::strerror(errno)));
      break;
    }
    if (n == 0 || !on_chunk(absl::string_view(buffer.data(), static_cast<size_t>(n)))) break;
    position += n;
  }
  close(fd);
  return status;
}

absl::StatusOr<FileDigest> Sha256OfFile(absl::string_view path, absl::string_view what) {
  Sha256 hash;
  FileDigest digest;
  absl::Status read =
      ForEachFileChunk(path, what, 0, kFileChunkBytes, [&](absl::string_view chunk) {
        hash.Update(chunk);
        digest.size_bytes += chunk.size();
        return true;
      });
  if (!read.ok()) return read;
  digest.sha256 = DigestHex(hash.Finish());
  return digest;
}

absl::Status CheckWritablePath(absl::string_view path, absl::string_view what) {
  const std::string p(path);
  struct stat st {};
  if (stat(p.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", what, " '", p, "': it is ",
                                                   KindOf(st.st_mode), "; name a file to write"));
  }
  const size_t slash = p.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  std::string probe = absl::StrCat(dir, "/.ipupod-write-check-XXXXXX");
  const int fd = mkstemp(probe.data());
  if (fd >= 0) {
    close(fd);
    unlink(probe.c_str());
    return absl::OkStatus();
  }
  const int e = errno;
  const bool missing = e == ENOENT || e == ENOTDIR;
  const std::string message =
      absl::StrCat("cannot write ", what, " '", p, "': directory '", dir, "' ",
                   missing ? "does not exist" : std::strerror(e),
                   "; create it, fix its permissions or choose another path");
  if (missing) return absl::NotFoundError(message);
  if (e == EACCES || e == EPERM || e == EROFS) return absl::PermissionDeniedError(message);
  return absl::FailedPreconditionError(message);
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
