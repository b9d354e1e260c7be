// File: device/customop/library_registry.h
//
// LibraryRegistry: ipupodd's graph::CustomOpResolver (device/graph/custom_ops.h). The admin lists
// the directories custom op libraries may come from (config custom_ops.library_dirs); a
// model names the library of each custom domain it uses (its metadata, ipupod.poptorch
// writes it). At every compile and every load, for each library:
//   1. the path is checked before the file system is asked anything: absolute, and
//      lexically inside a listed directory (so nobody can probe what exists elsewhere);
//      then resolved (symlinks, "..") and checked again, and it must be a regular file:
//      PERMISSION_DENIED naming the path and the config key, NOT_FOUND when missing;
//   2. its own host process starts (device/customop/custom_op_library.h: one per library per
//      compile or loaded program, within custom_ops.max_hosts);
//   3. each op the model uses is found in its table for the model's version of the
//      domain (the highest since_version <= the version whose end_version allows it):
//      INVALID_ARGUMENT naming what the library has instead.
//
// Thread safety: Resolve may be called concurrently; the registry is immutable once made
// (the host budget is shared and thread-safe).
// Errors: Create - FAILED_PRECONDITION when a listed directory is not a directory or the
// host binary is not an executable file (naming the config key). Resolve - above, plus
// CustomOpLibrary::Start's.
#ifndef IPUPOD_CUSTOMOP_LIBRARY_REGISTRY_H_
#define IPUPOD_CUSTOMOP_LIBRARY_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device/customop/custom_op_library.h"
#include "device/customop/host_process.h"
#include "device/graph/custom_ops.h"

namespace ipupod::customop {

struct RegistryOptions {
  std::vector<std::string> library_dirs;  // absolute; empty: every custom op is refused
  HostLimits limits;                      // limits.host_binary: the helper to run
  int max_hosts = 64;
};

// The helper beside the running executable (/proc/self/exe): DIR/ipupod-custom-op-host,
// else DIR/../libexec/ipupod/ipupod-custom-op-host (an installed ipupodd), else "".
std::string DefaultHostBinary();

class LibraryRegistry : public graph::CustomOpResolver {
 public:
  static absl::StatusOr<std::unique_ptr<LibraryRegistry>> Create(RegistryOptions options);
  LibraryRegistry(const LibraryRegistry&) = delete;
  LibraryRegistry& operator=(const LibraryRegistry&) = delete;

  absl::StatusOr<graph::CustomOpMap> Resolve(
      const std::vector<graph::CustomDomainUse>& uses) const override;

  // The resolved path of `library` when the model may use it (step 1 above).
  absl::StatusOr<std::string> CheckLibraryPath(const std::string& library) const;

  const RegistryOptions& options() const { return options_; }
  // Host processes running now (loaded programs and compiles that use custom ops).
  int running_hosts() const { return budget_->running(); }

 private:
  explicit LibraryRegistry(RegistryOptions options)
      : options_(std::move(options)), budget_(std::make_shared<HostBudget>(options_.max_hosts)) {}
  absl::Status PermissionDenied(const std::string& library, const std::string& resolved = "") const;

  const RegistryOptions options_;  // library_dirs resolved
  const std::shared_ptr<HostBudget> budget_;
};

}  // namespace ipupod::customop

#endif  // IPUPOD_CUSTOMOP_LIBRARY_REGISTRY_H_
