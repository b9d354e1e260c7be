#include "device/customop/library_registry.h"

#include <filesystem>
#include <map>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/customop/host.h"
#include "device/customop/remote_custom_op.h"
#include <unistd.h>

namespace ipupod::customop {
namespace {

namespace fs = std::filesystem;

constexpr char kDirsKey[] = "custom_ops.library_dirs";

bool Inside(const std::string& path, const std::string& dir) {
  if (dir == "/") return path.size() > 1 && path[0] == '/';
  return absl::StartsWith(path, dir) && path.size() > dir.size() + 1 && path[dir.size()] == '/';
}

bool InsideAny(const std::string& path, const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    if (Inside(path, dir)) return true;
  }
  return false;
}

std::string Lexical(const std::string& path) {
  std::string out = fs::path(path).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// The entry of `info` that serves domain::op at `version`, or why none does.
absl::StatusOr<uint32_t> FindEntry(const LibraryInfo& info, const std::string& path,
                                   const graph::CustomDomainUse& use, const std::string& op) {
  int best = -1;
  std::vector<std::string> versions;
  for (size_t i = 0; i < info.ops.size(); ++i) {
    const OpInfo& entry = info.ops[i];
    if (entry.domain != use.domain || entry.name != op) continue;
    versions.push_back(absl::StrCat(entry.since_version, "..",
                                    entry.end_version == 0 ? "" : absl::StrCat(entry.end_version)));
    const bool serves = entry.since_version <= use.version &&
                        (entry.end_version == 0 || entry.end_version >= use.version);
    if (serves && (best < 0 || info.ops[best].since_version < entry.since_version)) {
      best = static_cast<int>(i);
    }
  }
  if (best >= 0) return static_cast<uint32_t>(best);
  const std::string name = graph::CustomOpName(use.domain, op);
  if (!versions.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("custom op library '", path, "' has ", name, " for domain versions ",
                     absl::StrJoin(versions, ", "), ", not for the model's version ", use.version));
  }
  std::vector<std::string> has;
  for (const OpInfo& entry : info.ops) has.push_back(graph::CustomOpName(entry.domain, entry.name));
  return absl::InvalidArgumentError(absl::StrCat("custom op library '", path, "' (", info.name,
                                                 ") has no op ", name, "; it has ",
                                                 absl::StrJoin(has, ", ")));
}

}  // namespace

std::string DefaultHostBinary() {
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (error) return "";
  for (const fs::path& candidate :
       {exe.parent_path() / kHostBinaryName,
        exe.parent_path().parent_path() / "libexec" / "ipupod" / kHostBinaryName}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

absl::StatusOr<std::unique_ptr<LibraryRegistry>> LibraryRegistry::Create(RegistryOptions options) {
  std::vector<std::string> dirs;
  for (const std::string& dir : options.library_dirs) {
    std::error_code error;
    if (dir.empty() || dir[0] != '/' || !fs::is_directory(dir, error)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "config key ", kDirsKey, " lists '", dir, "', which is not an absolute path to a ",
          "directory; list the directories custom op libraries are installed in"));
    }
    dirs.push_back(Lexical(dir));
    const std::string canonical = fs::canonical(dir, error).string();
    if (!error && canonical != dirs.back()) dirs.push_back(canonical);
  }
  if (!dirs.empty() && (options.limits.host_binary.empty() ||
                        access(options.limits.host_binary.c_str(), X_OK) != 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "custom op libraries are allowed (", kDirsKey, ") but their helper '",
        options.limits.host_binary.empty() ? kHostBinaryName : options.limits.host_binary,
        "' is not an executable file; install ", kHostBinaryName,
        " beside ipupodd or name it with the config key custom_ops.host"));
  }
  options.library_dirs = std::move(dirs);
  return std::unique_ptr<LibraryRegistry>(new LibraryRegistry(std::move(options)));
}

absl::Status LibraryRegistry::PermissionDenied(const std::string& library,
                                               const std::string& resolved) const {
  if (options_.library_dirs.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "custom op library '", library, "' cannot be used: this ipupodd runs no custom op ",
        "libraries (its config key ", kDirsKey, " lists no directory); ask its admin to ",
        "install the library and list its directory there"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat("custom op library '", library, "'",
                   resolved.empty() ? "" : absl::StrCat(" (which resolves to '", resolved, "')"),
                   " is not in a directory this ipupodd allows (config key ", kDirsKey, ": ",
                   absl::StrJoin(options_.library_dirs, ", "),
                   "); ask the server's admin to install it in one of them"));
}

absl::StatusOr<std::string> LibraryRegistry::CheckLibraryPath(const std::string& library) const {
  if (library.empty() || library[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("custom op library '", library, "' is not an absolute path on the server"));
  }
  if (!InsideAny(Lexical(library), options_.library_dirs)) return PermissionDenied(library);
  std::error_code error;
  const fs::path canonical = fs::canonical(library, error);
  if (error == std::errc::no_such_file_or_directory) {
    return absl::NotFoundError(
        absl::StrCat("custom op library '", library, "' does not exist on the server"));
  }
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat(
        "custom op library '", library, "' cannot be read by ipupodd: ", error.message()));
  }
  if (!InsideAny(canonical.string(), options_.library_dirs)) {
    return PermissionDenied(library, canonical.string());
  }
  if (!fs::is_regular_file(canonical, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("custom op library '", library, "' is not a regular file"));
  }
  return canonical.string();
}

absl::StatusOr<graph::CustomOpMap> LibraryRegistry::Resolve(
    const std::vector<graph::CustomDomainUse>& uses) const {
  graph::CustomOpMap out;
  std::map<std::string, std::shared_ptr<CustomOpLibrary>> started;  // by resolved path
  for (const graph::CustomDomainUse& use : uses) {
    if (use.library.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the model names no library for its custom op domain '", use.domain, "' (ops ",
          absl::StrJoin(use.ops, ", "), "; metadata ", graph::kCustomOpLibrariesMetadataKey,
          "): poptorch.custom_op names the library it finds loaded, or pass library=PATH"));
    }
    IPUPOD_ASSIGN_OR_RETURN(std::string path, CheckLibraryPath(use.library));
    std::shared_ptr<CustomOpLibrary>& library = started[path];
    if (library == nullptr) {
      IPUPOD_ASSIGN_OR_RETURN(library, CustomOpLibrary::Start(path, options_.limits, budget_));
    }
    for (const std::string& op : use.ops) {
      IPUPOD_ASSIGN_OR_RETURN(uint32_t index, FindEntry(library->info(), path, use, op));
      out[graph::CustomOpName(use.domain, op)] = std::make_shared<RemoteCustomOp>(library, index);
    }
  }
  return out;
}

}  // namespace ipupod::customop
