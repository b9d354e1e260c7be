#include "server/store/state_marker.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include <fcntl.h>
#include <unistd.h>

namespace ipupod::store {
namespace {

constexpr const char* kHeader = "ipupod-state-marker 1";
constexpr size_t kMarkerBytesMax = 4096;  // a real marker is under 100 bytes

absl::Status Corrupt(const std::filesystem::path& path, absl::string_view why) {
  return absl::DataLossError(absl::StrCat(
      "state marker '", path.string(), "' is corrupt (", why,
      "): it records which pod this state dir holds; restore it from a backup with state.db, "
      "or start a new, empty pod deliberately with ipupodd --reinitialise"));
}

bool IsPodId(absl::string_view id) {
  if (id.size() != 32) return false;
  for (char c : id) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::StatusOr<StateMarker> ParseMarker(const std::filesystem::path& path,
                                        const std::string& text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.size() != 3 || lines[0] != kHeader) return Corrupt(path, "not three marker lines");
  StateMarker marker;
  std::vector<absl::string_view> id = absl::StrSplit(lines[1], ' ');
  if (id.size() != 2 || id[0] != "pod_id" || !IsPodId(id[1])) return Corrupt(path, "bad pod_id");
  marker.pod_id = std::string(id[1]);
  std::vector<absl::string_view> boot = absl::StrSplit(lines[2], ' ');
  if (boot.size() != 2 || boot[0] != "boot" || !absl::SimpleAtoi(boot[1], &marker.boot) ||
      marker.boot < 0) {
    return Corrupt(path, "bad boot number");
  }
  return marker;
}

absl::Status WriteError(const std::string& path, absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat("cannot ", what, " '", path,
                                                    "': ", std::strerror(errno),
                                                    "; give ipupodd a writable --state-dir"));
}

// Writes `text` to `path` and fsyncs it.
absl::Status WriteSynced(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return WriteError(path, "create");
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ok && ::fsync(fd) == 0;
  absl::Status status = ok ? absl::OkStatus() : WriteError(path, "write");
  ::close(fd);
  return status;
}

absl::Status SyncDir(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return WriteError(dir.string(), "open directory");
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok ? absl::OkStatus() : WriteError(dir.string(), "sync directory");
}

}  // namespace

absl::StatusOr<std::optional<StateMarker>> ReadStateMarker(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / kStateMarkerFile;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<StateMarker>();
  std::ifstream in(path, std::ios::binary);
  std::string text(kMarkerBytesMax + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return Corrupt(path, "cannot be read");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMarkerBytesMax) return Corrupt(path, "too large");
  absl::StatusOr<StateMarker> marker = ParseMarker(path, text);
  if (!marker.ok()) return marker.status();
  return std::optional<StateMarker>(*std::move(marker));
}

absl::Status WriteStateMarker(const std::filesystem::path& dir, const StateMarker& marker) {
  const std::string path = (dir / kStateMarkerFile).string();
  const std::string tmp = path + ".tmp";
  const std::string text =
      absl::StrCat(kHeader, "\npod_id ", marker.pod_id, "\nboot ", marker.boot, "\n");
  absl::Status status = WriteSynced(tmp, text);
  if (!status.ok()) return status;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return WriteError(path, "rename a marker to");
  return SyncDir(dir);
}

std::string NewPodId() {
  std::random_device device;  // /dev/urandom on Linux
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::StrFormat("%08x", device()));
  return id;
}

}  // namespace ipupod::store
