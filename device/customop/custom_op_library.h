// File: device/customop/custom_op_library.h
//
// CustomOpLibrary: one custom op library as one loaded program (or one compile) uses it:
// its own `ipupod-custom-op-host` process (device/customop/host_process.h), so no two programs -
// no two users, no two sessions - share a process, and what one library call could keep
// in memory is never seen by another program's calls. Calls are serialised (one at a
// time per process; a caller waits at most a call's timeout plus a start's for its turn,
// then UNAVAILABLE). A call that fails because the process crashed, hung or misbehaved
// ends the process; the next call starts a new one (reading the table again, which must
// be the same), at most kRestartsMax times in the library's life, then every call is
// FAILED_PRECONDITION: load the program again (after fixing the library).
//
// HostBudget bounds how many libraries run at once server-wide (config
// custom_ops.max_hosts): starting one more is RESOURCE_EXHAUSTED.
//
// Thread safety: every method of both classes may be called from any thread.
// Ownership: shared by the CustomOps bound to a graph's nodes (device/customop/remote_custom_op.h);
// the process ends with the last of them.
// Errors: Start - HostProcess::Start's, RESOURCE_EXHAUSTED over the budget. Call - the
// process's (INTERNAL), what `decode` returns, UNAVAILABLE when the turn does not come,
// FAILED_PRECONDITION after kRestartsMax restarts or when a restarted library's table
// changed.
#ifndef IPUPOD_CUSTOMOP_CUSTOM_OP_LIBRARY_H_
#define IPUPOD_CUSTOMOP_CUSTOM_OP_LIBRARY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/sync.h"
#include "device/customop/host_process.h"
#include "device/customop/protocol.h"

namespace ipupod::customop {

inline constexpr int kRestartsMax = 3;

class HostBudget {
 public:
  explicit HostBudget(int max) : max_(max) {}
  HostBudget(const HostBudget&) = delete;
  HostBudget& operator=(const HostBudget&) = delete;

  // Takes one place for `library`; RESOURCE_EXHAUSTED naming the bound when none is free.
  absl::Status Acquire(absl::string_view library);
  void Release();
  int running() const;
  int max() const { return max_; }

 private:
  const int max_;
  mutable absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

class CustomOpLibrary {
 public:
  // Reads a reply while the process is still held; an INTERNAL status (a malformed reply,
  // a library that misbehaved) ends the process.
  using Decode = std::function<absl::Status(absl::string_view reply)>;

  static absl::StatusOr<std::shared_ptr<CustomOpLibrary>> Start(const std::string& path,
                                                                const HostLimits& limits,
                                                                std::shared_ptr<HostBudget> budget);
  ~CustomOpLibrary();
  CustomOpLibrary(const CustomOpLibrary&) = delete;
  CustomOpLibrary& operator=(const CustomOpLibrary&) = delete;

  const std::string& path() const { return path_; }
  const LibraryInfo& info() const { return info_; }
  const HostLimits& limits() const { return limits_; }

  // One request, its reply passed to `decode`.
  absl::Status Call(absl::string_view request, uint64_t reply_bytes_max, const CallSite& site,
                    const Decode& decode);

  // The running process's pid, or 0 (tests).
  pid_t pid() const;

 private:
  CustomOpLibrary(std::string path, HostLimits limits, std::shared_ptr<HostBudget> budget,
                  std::unique_ptr<HostProcess> process);
  // Evaluated inside libabsl with mu_ held, between a re-acquisition and a release TSan
  // does not see (common/sync.h): both are said here.
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    sync::Acquired(&mu_);
    const bool idle = !busy_;
    sync::Released(&mu_);
    return idle;
  }
  // The process to call: the idle one, or a new one when the last failed.
  absl::StatusOr<std::unique_ptr<HostProcess>> TakeProcess(const CallSite& site);

  const std::string path_;
  const HostLimits limits_;
  const std::shared_ptr<HostBudget> budget_;
  LibraryInfo info_;
  mutable absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  int restarts_ ABSL_GUARDED_BY(mu_) = 0;
  // Held by the caller whose turn it is (busy_) while it calls.
  std::unique_ptr<HostProcess> process_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ipupod::customop

#endif  // IPUPOD_CUSTOMOP_CUSTOM_OP_LIBRARY_H_
