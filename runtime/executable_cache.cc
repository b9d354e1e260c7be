#include "runtime/executable_cache.h"

#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "compiler/report.h"

namespace ipupod::runtime {

ExecutableCache::ExecutableCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

absl::StatusOr<CachedExecutable> ExecutableCache::Put(absl::string_view ipx_bytes) {
  const int64_t size = static_cast<int64_t>(ipx_bytes.size());
  if (size > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the executable is ", FormatBytesFixed(size),
        " but the executable cache holds at "
        "most ",
        FormatBytesFixed(max_bytes_), "; restart ipupodd with a larger --executable-cache-mb"));
  }
  // Parsing verifies the hash and is the slow part: outside the lock.
  auto parsed = compiler::ReadExecutable(ipx_bytes);
  if (!parsed.ok()) return parsed.status();
  const std::string hash = parsed->content_hash;
  sync::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    spdlog::info("executable cache hit sha256={} bytes={}", hash, size);
    return CachedExecutable{it->second.executable, it->second.size_bytes, true};
  }
  EvictFor(size);
  lru_.push_front(hash);
  Entry entry{std::make_shared<const compiler::Executable>(*std::move(parsed)), size, lru_.begin()};
  auto executable = entry.executable;
  entries_.emplace(hash, std::move(entry));
  used_bytes_ += size;
  spdlog::info("executable cache stored sha256={} bytes={} used_bytes={} entries={}", hash, size,
               used_bytes_, entries_.size());
  return CachedExecutable{std::move(executable), size, false};
}

absl::StatusOr<CachedExecutable> ExecutableCache::Get(absl::string_view sha256) {
  sync::MutexLock lock(&mu_);
  auto it = entries_.find(sha256);
  if (it == entries_.end()) {
    spdlog::info("executable cache miss sha256={}", std::string(sha256));
    return absl::NotFoundError(
        absl::StrCat("no executable with sha256 ", sha256,
                     " is in the server's cache (never uploaded, or evicted); upload it first"));
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  spdlog::info("executable cache hit sha256={} bytes={}", it->first, it->second.size_bytes);
  return CachedExecutable{it->second.executable, it->second.size_bytes, true};
}

int64_t ExecutableCache::used_bytes() const {
  sync::MutexLock lock(&mu_);
  return used_bytes_;
}

int64_t ExecutableCache::size() const {
  sync::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

// Evicts least-recently-used entries until `bytes` more fit. Sessions that
// loaded an evicted executable keep it through their shared_ptr.
void ExecutableCache::EvictFor(int64_t bytes) {
  while (!lru_.empty() && used_bytes_ + bytes > max_bytes_) {
    auto it = entries_.find(lru_.back());
    used_bytes_ -= it->second.size_bytes;
    spdlog::info("executable cache evicted sha256={} bytes={}", it->first, it->second.size_bytes);
    entries_.erase(it);
    lru_.pop_back();
  }
}

}  // namespace ipupod::runtime
