// File: device/runtime/executable_cache.h
//
// runtime::ExecutableCache: the server's content-addressed store of
// uploaded executables, keyed by their content hash (the .ipx header's
// SHA-256 of the payload, verified on Put). Bounded by bytes: what the
// stored executables hold once parsed (ExecutableHeldBytes) plus the bytes
// of uploads still on their way in (Upload). A Put or
// an upload's growth that would exceed the bound evicts least-recently-used
// entries first. Evicting never breaks a loaded session: Get hands out
// shared_ptrs, so a Program keeps its executable alive. Every Put and Get
// logs one line (spdlog, "executable cache hit|miss|stored|evicted").
//
// Scoping: an executable belongs to the users who uploaded it. Get by
// another user is NOT_FOUND, exactly as for a hash never uploaded, so a
// hash is no capability and a probe learns nothing. A second user who
// uploads the same bytes (proof of possession) gets the cache hit and is
// added to its users: the bytes are stored once.
//
// Uploads: StartUpload checks the declared size before anything is
// allocated; Upload::Append grows the buffer as the bytes arrive (never to
// more than declared) and charges what it holds against the bound.
//
// Thread safety: every method of the cache is safe to call concurrently; an
// Upload is used by one thread and must not outlive its cache.
// Errors: Put - INVALID_ARGUMENT for a malformed .ipx (compiler's message),
// RESOURCE_EXHAUSTED if one file is larger than the whole bound (with the
// bound and how to raise it: ipupodd --executable-cache-mb). Get -
// NOT_FOUND naming the hash ("upload it first"). StartUpload / Append -
// RESOURCE_EXHAUSTED when the size is over what any executable can be, over
// the bound, or over what uploads in progress leave of it.
#ifndef IPUPOD_RUNTIME_EXECUTABLE_CACHE_H_
#define IPUPOD_RUNTIME_EXECUTABLE_CACHE_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sync.h"
#include "device/compiler/executable.h"
#include "device/graph/onnx_import.h"

namespace ipupod::runtime {

// The largest .ipx there can be: its header, 1 GiB of metadata and the
// largest ONNX model, each section with its 8-byte length.
inline constexpr int64_t kExecutableBytesMax =
    static_cast<int64_t>(compiler::kExecutableHeaderBytes) + 16 + (int64_t{1} << 30) +
    graph::kOnnxBytesMax;

// What a parsed executable holds in memory, the part on the heap estimated
// from capacities: the model bytes and the report (most of it), every name,
// shape, placement and training entry (a map node as 48 bytes). This, not
// the .ipx file's size, is what an entry costs against the cache's bound.
int64_t ExecutableHeldBytes(const compiler::Executable& executable);

struct CachedExecutable {
  std::shared_ptr<const compiler::Executable> executable;
  int64_t size_bytes = 0;  // of the .ipx file
  bool cache_hit = false;  // Put: it was already there; Get: always true
};

class ExecutableCache {
 public:
  // The bytes of one upload in progress, counted against the bound until
  // this is destroyed or handed to Put.
  class Upload {
   public:
    ~Upload();
    Upload(const Upload&) = delete;
    Upload& operator=(const Upload&) = delete;

    // REQUIRES: bytes().size() + chunk.size() <= the declared size.
    absl::Status Append(absl::string_view chunk);
    const std::string& bytes() const { return bytes_; }

   private:
    friend class ExecutableCache;
    Upload(ExecutableCache* cache, int64_t declared) : cache_(cache), declared_(declared) {}

    ExecutableCache* const cache_;
    const int64_t declared_;
    std::string bytes_;
    int64_t charged_ = 0;  // bytes_.capacity() once anything arrived
  };

  explicit ExecutableCache(int64_t max_bytes);

  absl::StatusOr<std::unique_ptr<Upload>> StartUpload(int64_t declared_bytes);
  // Verifies and stores the .ipx bytes for `user` (a hit if the hash is
  // present; `user` is then added to its users). `upload`, if given, holds
  // the bytes: its charge is handed over to the stored entry.
  absl::StatusOr<CachedExecutable> Put(absl::string_view ipx_bytes, absl::string_view user,
                                       Upload* upload = nullptr);
  absl::StatusOr<CachedExecutable> Get(absl::string_view sha256, absl::string_view user);

  int64_t max_bytes() const { return max_bytes_; }
  int64_t used_bytes() const;       // stored entries, as parsed
  int64_t in_flight_bytes() const;  // uploads in progress
  int64_t size() const;

  // Everything at one instant, for the metrics. A hit is a Get, or a Put,
  // that found the executable already stored (a Put then adds its user); a
  // miss a Get that did not find it (for that user), or a Put that stored it.
  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t evictions = 0;
    int64_t entries = 0;
    int64_t used_bytes = 0;
    int64_t in_flight_bytes = 0;
    int64_t max_bytes = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::shared_ptr<const compiler::Executable> executable;
    int64_t size_bytes = 0;                    // of the .ipx file
    int64_t charge_bytes = 0;                  // against the bound: ExecutableHeldBytes
    std::set<std::string, std::less<>> users;  // who uploaded it
    std::list<std::string>::iterator lru;      // position in lru_
  };
  // Counts `bytes` more of an upload, evicting to make room.
  absl::Status Charge(int64_t bytes);
  void Uncharge(int64_t bytes);
  absl::Status UploadsHoldTheRest(int64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictFor(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ipupod::runtime

#endif  // IPUPOD_RUNTIME_EXECUTABLE_CACHE_H_
