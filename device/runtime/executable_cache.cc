#include "device/runtime/executable_cache.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "device/compiler/report.h"

namespace ipupod::runtime {
namespace {

absl::Status LargerThanTheCache(int64_t size, int64_t max_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the executable is ", FormatBytesFixed(size), " but the executable cache holds at most ",
      FormatBytesFixed(max_bytes), "; restart ipupodd with a larger --executable-cache-mb"));
}

constexpr int64_t kMapNodeBytes = 48;  // a std::map node's links and colour

int64_t HeapBytes(const std::string& s) {
  return s.capacity() > 15 ? static_cast<int64_t>(s.capacity()) + 1 : 0;  // past SSO
}
int64_t HeapBytes(const std::vector<std::string>& v) {
  int64_t bytes = static_cast<int64_t>(v.capacity() * sizeof(std::string));
  for (const std::string& s : v) bytes += HeapBytes(s);
  return bytes;
}
template <typename T>
int64_t HeapBytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}
template <typename V>
int64_t HeapBytes(const std::map<std::string, V>& m) {
  int64_t bytes = 0;
  for (const auto& [key, value] : m) {
    bytes += kMapNodeBytes + static_cast<int64_t>(sizeof(key) + sizeof(value)) + HeapBytes(key);
  }
  return bytes;
}
int64_t HeapBytes(const std::vector<compiler::TensorSpec>& specs) {
  int64_t bytes = static_cast<int64_t>(specs.capacity() * sizeof(compiler::TensorSpec));
  for (const auto& spec : specs) bytes += HeapBytes(spec.name) + HeapBytes(spec.shape);
  return bytes;
}

}  // namespace

int64_t ExecutableHeldBytes(const compiler::Executable& e) {
  const compiler::Placement& p = e.placement;
  const compiler::TrainingSpec& t = e.training;
  int64_t bytes = static_cast<int64_t>(sizeof(e));
  bytes += HeapBytes(e.model_bytes) + HeapBytes(e.report_json) + HeapBytes(e.producer) +
           HeapBytes(e.content_hash) + HeapBytes(e.warnings);
  bytes += HeapBytes(e.inputs) + HeapBytes(e.outputs);
  bytes += HeapBytes(p.node_names) + HeapBytes(p.node_stage) + HeapBytes(p.stage_ipu) +
           HeapBytes(p.notes);
  bytes += HeapBytes(t.loss) + HeapBytes(t.weights) + HeapBytes(t.optimizer) +
           HeapBytes(t.variables) + HeapBytes(t.constants) + HeapBytes(t.buffers);
  for (const auto& [key, value] : t.buffers) bytes += HeapBytes(value);
  bytes += HeapBytes(e.config.layers_per_ipu) + HeapBytes(e.config.output_mode) +
           HeapBytes(e.config.executable_cache_dir);
  return bytes;
}

ExecutableCache::ExecutableCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

// ---------------------------------------------------------------- uploads

ExecutableCache::Upload::~Upload() { cache_->Uncharge(charged_); }

// Grows by doubling (never past the declared size), so an upload holds at
// most twice what arrived and never what was only promised.
absl::Status ExecutableCache::Upload::Append(absl::string_view chunk) {
  const int64_t need = static_cast<int64_t>(bytes_.size() + chunk.size());
  if (need > charged_) {
    const int64_t grown = std::max(need, std::min(2 * charged_, declared_));
    IPUPOD_RETURN_IF_ERROR(cache_->Charge(grown - charged_));
    charged_ = grown;
    bytes_.reserve(static_cast<size_t>(grown));
  }
  bytes_.append(chunk.data(), chunk.size());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ExecutableCache::Upload>> ExecutableCache::StartUpload(
    int64_t declared_bytes) {
  if (declared_bytes > kExecutableBytesMax) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the upload declares ", FormatBytesFixed(declared_bytes),
        ", more than any executable can be (at most ", FormatBytesFixed(kExecutableBytesMax),
        ": a 2 GiB model and 1 GiB of metadata); declare the .ipx file's real size"));
  }
  if (declared_bytes > max_bytes_) return LargerThanTheCache(declared_bytes, max_bytes_);
  sync::MutexLock lock(&mu_);
  if (in_flight_bytes_ + declared_bytes > max_bytes_) return UploadsHoldTheRest(declared_bytes);
  return std::unique_ptr<Upload>(new Upload(this, declared_bytes));
}

absl::Status ExecutableCache::Charge(int64_t bytes) {
  sync::MutexLock lock(&mu_);
  EvictFor(bytes);
  if (used_bytes_ + in_flight_bytes_ + bytes > max_bytes_) return UploadsHoldTheRest(bytes);
  in_flight_bytes_ += bytes;
  return absl::OkStatus();
}

void ExecutableCache::Uncharge(int64_t bytes) {
  sync::MutexLock lock(&mu_);
  in_flight_bytes_ -= bytes;
}

absl::Status ExecutableCache::UploadsHoldTheRest(int64_t bytes) const {
  spdlog::warn("executable cache refused an upload of {} bytes: uploads in progress hold {}", bytes,
               in_flight_bytes_);
  return absl::ResourceExhaustedError(absl::StrCat(
      "uploads in progress hold ", FormatBytesFixed(in_flight_bytes_),
      " of the executable cache's ", FormatBytesFixed(max_bytes_), ", so ", FormatBytesFixed(bytes),
      " more do not fit; retry when they have finished, or ask the admin to raise ipupodd "
      "--executable-cache-mb"));
}

// ---------------------------------------------------------------- entries

absl::StatusOr<CachedExecutable> ExecutableCache::Put(absl::string_view ipx_bytes,
                                                      absl::string_view user, Upload* upload) {
  const int64_t size = static_cast<int64_t>(ipx_bytes.size());
  if (size > max_bytes_) return LargerThanTheCache(size, max_bytes_);
  // Parsing verifies the hash and is the slow part: outside the lock.
  auto parsed = compiler::ReadExecutable(ipx_bytes);
  if (!parsed.ok()) return parsed.status();
  const std::string hash = parsed->content_hash;
  sync::MutexLock lock(&mu_);
  if (upload != nullptr) {  // the entry's charge replaces the upload's
    in_flight_bytes_ -= upload->charged_;
    upload->charged_ = 0;
  }
  auto it = entries_.find(hash);
  if (it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    it->second.users.emplace(user);
    ++hits_;
    spdlog::info("executable cache hit sha256={} bytes={} user={}", hash, size, std::string(user));
    return CachedExecutable{it->second.executable, it->second.size_bytes, true};
  }
  auto executable = std::make_shared<const compiler::Executable>(*std::move(parsed));
  const int64_t charge = ExecutableHeldBytes(*executable);
  if (charge > max_bytes_) return LargerThanTheCache(charge, max_bytes_);
  EvictFor(charge);
  lru_.push_front(hash);
  entries_.emplace(hash, Entry{executable, size, charge, {std::string(user)}, lru_.begin()});
  used_bytes_ += charge;
  ++misses_;
  spdlog::info(
      "executable cache stored sha256={} bytes={} held_bytes={} user={} used_bytes={} entries={}",
      hash, size, charge, std::string(user), used_bytes_, entries_.size());
  return CachedExecutable{std::move(executable), size, false};
}

absl::StatusOr<CachedExecutable> ExecutableCache::Get(absl::string_view sha256,
                                                      absl::string_view user) {
  sync::MutexLock lock(&mu_);
  auto it = entries_.find(sha256);
  // Another user's executable is exactly as absent as one never uploaded.
  if (it == entries_.end() || !it->second.users.contains(user)) {
    ++misses_;
    spdlog::info("executable cache miss sha256={} user={}", std::string(sha256), std::string(user));
    return absl::NotFoundError(
        absl::StrCat("no executable with sha256 ", sha256,
                     " is in the server's cache for you (never uploaded by you, or evicted); "
                     "upload it first"));
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++hits_;
  spdlog::info("executable cache hit sha256={} bytes={}", it->first, it->second.size_bytes);
  return CachedExecutable{it->second.executable, it->second.size_bytes, true};
}

int64_t ExecutableCache::used_bytes() const {
  sync::MutexLock lock(&mu_);
  return used_bytes_;
}

int64_t ExecutableCache::in_flight_bytes() const {
  sync::MutexLock lock(&mu_);
  return in_flight_bytes_;
}

ExecutableCache::Stats ExecutableCache::stats() const {
  sync::MutexLock lock(&mu_);
  return Stats{hits_,       misses_,          evictions_, static_cast<int64_t>(entries_.size()),
               used_bytes_, in_flight_bytes_, max_bytes_};
}

int64_t ExecutableCache::size() const {
  sync::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

// Evicts least-recently-used entries until `bytes` more fit. Sessions that
// loaded an evicted executable keep it through their shared_ptr.
void ExecutableCache::EvictFor(int64_t bytes) {
  while (!lru_.empty() && used_bytes_ + in_flight_bytes_ + bytes > max_bytes_) {
    auto it = entries_.find(lru_.back());
    used_bytes_ -= it->second.charge_bytes;
    ++evictions_;
    spdlog::info("executable cache evicted sha256={} held_bytes={}", it->first,
                 it->second.charge_bytes);
    entries_.erase(it);
    lru_.pop_back();
  }
}

}  // namespace ipupod::runtime
