// File: runtime/executable_cache.h
//
// runtime::ExecutableCache: the server's content-addressed store of
// uploaded executables, keyed by their content hash (the .ipx header's
// SHA-256 of the payload, verified on Put). Bounded by total file bytes:
// a Put that would exceed the bound evicts least-recently-used entries
// first. Evicting never breaks a loaded session: Get hands out
// shared_ptrs, so a Program keeps its executable alive. Every Put and Get
// logs one line (spdlog, "executable cache hit|miss|stored|evicted").
//
// Thread safety: every method is safe to call concurrently.
// Errors: Put - INVALID_ARGUMENT for a malformed .ipx (compiler's message),
// RESOURCE_EXHAUSTED if one file is larger than the whole bound (with the
// bound and how to raise it: ipupodd --executable-cache-mb). Get -
// NOT_FOUND naming the hash ("upload it first").
#ifndef IPUPOD_RUNTIME_EXECUTABLE_CACHE_H_
#define IPUPOD_RUNTIME_EXECUTABLE_CACHE_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sync.h"
#include "compiler/executable.h"

namespace ipupod::runtime {

struct CachedExecutable {
  std::shared_ptr<const compiler::Executable> executable;
  int64_t size_bytes = 0;  // of the .ipx file
  bool cache_hit = false;  // Put: it was already there; Get: always true
};

class ExecutableCache {
 public:
  explicit ExecutableCache(int64_t max_bytes);

  // Verifies and stores the .ipx bytes (a hit if the hash is present).
  absl::StatusOr<CachedExecutable> Put(absl::string_view ipx_bytes);
  absl::StatusOr<CachedExecutable> Get(absl::string_view sha256);

  int64_t max_bytes() const { return max_bytes_; }
  int64_t used_bytes() const;
  int64_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const compiler::Executable> executable;
    int64_t size_bytes = 0;
    std::list<std::string>::iterator lru;  // position in lru_
  };
  void EvictFor(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ipupod::runtime

#endif  // IPUPOD_RUNTIME_EXECUTABLE_CACHE_H_
