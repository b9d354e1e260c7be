#include "server/jobs/blob_store.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace ipupod::jobs {
namespace {

constexpr const char* kLockFile = "lock";
constexpr absl::string_view kTemporarySuffix = ".tmp";
constexpr absl::string_view kOwnerSuffix = ".owner";

// The blob and the user an owner marker's name (<sha256>.<hex user>.owner)
// names; false for any other name.
bool ParseOwnerMarker(absl::string_view name, std::string* sha256, std::string* user) {
  if (!absl::ConsumeSuffix(&name, kOwnerSuffix) || name.size() < 66 || name[64] != '.') {
    return false;
  }
  const absl::string_view hex = name.substr(65);
  if (hex.size() % 2 != 0 || !std::all_of(hex.begin(), hex.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      })) {
    return false;
  }
  *sha256 = std::string(name.substr(0, 64));
  *user = absl::HexStringToBytes(hex);
  return IsSha256Hex(*sha256) && !user->empty();
}

std::string Bytes(uint64_t bytes) { return FormatBytesTrimmed(bytes); }

// A file system error: the disk being full is RESOURCE_EXHAUSTED (nothing
// free now), a read-only or forbidden directory FAILED_PRECONDITION (fix the
// system first), anything else INTERNAL.
absl::Status FileError(absl::string_view what, const std::filesystem::path& path, int err) {
  const std::string base =
      absl::StrCat("cannot ", what, " '", path.string(), "': ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) {
    return absl::ResourceExhaustedError(absl::StrCat(
        base, "; the disk holding the blob store is full: ask the admin to free space"));
  }
  if (err == EACCES || err == EPERM || err == EROFS || err == ENOTDIR) {
    return absl::FailedPreconditionError(
        absl::StrCat(base, "; give ipupodd a writable --state-dir"));
  }
  return absl::InternalError(absl::StrCat(base, "; report this to the admin"));
}

absl::Status SyncDir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError("open directory", dir, errno);
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  return ok ? absl::OkStatus() : FileError("sync directory", dir, err);
}

absl::Status WriteAll(int fd, absl::string_view bytes, const std::filesystem::path& path) {
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      return FileError("write", path, errno);
    }
    data += written;
    left -= static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

absl::Status CheckLimits(const BlobStoreLimits& limits) {
  const char* zero = limits.max_total_bytes == 0  ? "max_total_bytes"
                     : limits.max_user_bytes == 0 ? "max_user_bytes"
                     : limits.max_blob_bytes == 0 ? "max_blob_bytes"
                     : limits.max_uploads <= 0    ? "max_uploads"
                                                  : nullptr;
  if (zero != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("blob store limit ", zero, " must be greater than 0"));
  }
  if (limits.upload_hold < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("blob store upload_hold must not be negative");
  }
  return absl::OkStatus();
}

// Holds <dir>/lock exclusively; returns the fd to keep open.
absl::StatusOr<int> LockDir(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / kLockFile;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("open", path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("blob store '", dir.string(), "' is in use by another ipupodd (",
                     err == EWOULDBLOCK ? "locked" : std::strerror(err),
                     "); stop it or pass another --state-dir"));
  }
  return fd;
}

}  // namespace

bool IsSha256Hex(absl::string_view text) {
  if (text.size() != 64) return false;
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

absl::Status CheckSha256Hex(absl::string_view text, absl::string_view what) {
  if (IsSha256Hex(text)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " '", EchoName(text),
                   "' is not a SHA-256: give the 64 lower-case hex digits of the content's "
                   "SHA-256 (as sha256sum prints them)"));
}

absl::StatusOr<std::string> ReadBlobFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("blob ", path.filename().string(), " is gone"));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------- opening

absl::StatusOr<std::unique_ptr<BlobStore>> BlobStore::Open(std::filesystem::path dir,
                                                           BlobStoreLimits limits,
                                                           std::function<absl::Time()> clock) {
  IPUPOD_RETURN_IF_ERROR(CheckLimits(limits));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create blob store directory '",
                                                      dir.string(), "': ", ec.message(),
                                                      "; give ipupodd a writable --state-dir"));
  }
  IPUPOD_ASSIGN_OR_RETURN(const int lock_fd, LockDir(dir));
  if (!clock) clock = [] { return absl::Now(); };
  std::unique_ptr<BlobStore> store(
      new BlobStore(std::move(dir), limits, std::move(clock), lock_fd));
  IPUPOD_RETURN_IF_ERROR(store->Index());
  return store;
}

BlobStore::BlobStore(std::filesystem::path dir, BlobStoreLimits limits,
                     std::function<absl::Time()> clock, int lock_fd)
    : dir_(std::move(dir)), limits_(limits), clock_(std::move(clock)), lock_fd_(lock_fd) {}

BlobStore::~BlobStore() { ::close(lock_fd_); }

// Runs in Open, before anyone else sees the store.
absl::Status BlobStore::Index() {
  absl::flat_hash_map<std::string, Blob> found;
  std::vector<std::filesystem::path> temporaries;
  std::vector<std::filesystem::path> markers;
  const absl::Time hold_until = clock_() + limits_.upload_hold;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code file_ec;
    const bool regular = it->is_regular_file(file_ec) && !file_ec;
    if (regular && absl::EndsWith(name, kTemporarySuffix)) {
      temporaries.push_back(it->path());
    } else if (regular && absl::EndsWith(name, kOwnerSuffix)) {
      markers.push_back(it->path());
    } else if (regular && IsSha256Hex(name)) {
      const uintmax_t size = it->file_size(file_ec);
      if (file_ec) return FileError("read the size of", it->path(), file_ec.value());
      found[name] = Blob{static_cast<uint64_t>(size), 0, hold_until, {}};
    } else if (name != kLockFile) {
      ignored_files_.push_back(name);
    }
  }
  if (ec) return FileError("list", dir_, ec.value());
  // Partial uploads and half-done deletions of an earlier run: never blobs.
  for (const std::filesystem::path& path : temporaries) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return FileError("remove", path, errno);
  }
  IPUPOD_RETURN_IF_ERROR(IndexOwners(found, markers));
  std::sort(ignored_files_.begin(), ignored_files_.end());
  sync::MutexLock lock(&mu_);
  for (const auto& [sha256, blob] : found) stored_bytes_ += blob.size;
  blobs_ = std::move(found);
  return absl::OkStatus();
}

absl::Status BlobStore::IndexOwners(absl::flat_hash_map<std::string, Blob>& found,
                                    const std::vector<std::filesystem::path>& markers) {
  for (const std::filesystem::path& path : markers) {
    std::string sha256;
    std::string user;
    const bool parsed = ParseOwnerMarker(path.filename().string(), &sha256, &user);
    auto blob = parsed ? found.find(sha256) : found.end();
    if (blob != found.end()) {
      blob->second.owners.insert(std::move(user));
      continue;
    }
    // The blob went (a Sweep killed between its steps), or not a marker of ours.
    if (!parsed) {
      ignored_files_.push_back(path.filename().string());
    } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return FileError("remove", path, errno);
    }
  }
  return absl::OkStatus();
}

std::filesystem::path BlobStore::OwnerMarkerOf(absl::string_view sha256,
                                               absl::string_view user) const {
  return dir_ / absl::StrCat(sha256, ".", absl::BytesToHexString(user), kOwnerSuffix);
}

// ---------------------------------------------------------------- reading

std::optional<uint64_t> BlobStore::Stat(absl::string_view user, absl::string_view sha256) const {
  sync::MutexLock lock(&mu_);
  auto it = blobs_.find(sha256);
  // One answer for "not stored" and "not yours" (server/jobs/blob_store.h, Ownership).
  if (it == blobs_.end() || !it->second.owners.contains(user)) return std::nullopt;
  return it->second.size;
}

bool BlobStore::Owns(absl::string_view user, absl::string_view sha256) const {
  sync::MutexLock lock(&mu_);
  return OwnsLocked(user, sha256);
}

bool BlobStore::OwnsLocked(absl::string_view user, absl::string_view sha256) const {
  auto it = blobs_.find(sha256);
  return it != blobs_.end() && it->second.owners.contains(user);
}

absl::Status BlobStore::AddOwnerLocked(absl::string_view sha256, absl::string_view user,
                                       bool* created) {
  Blob& blob = blobs_.at(sha256);
  if (blob.owners.contains(user)) return absl::OkStatus();
  // An empty file: its name is the record. Created under the mutex, as the
  // renames are, so that a Sweep never leaves a marker of a blob it deleted.
  const std::filesystem::path marker = OwnerMarkerOf(sha256, user);
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("create", marker, errno);
  ::close(fd);
  blob.owners.insert(std::string(user));
  *created = true;
  return absl::OkStatus();
}

std::filesystem::path BlobStore::PathOf(absl::string_view sha256) const {
  if (!IsSha256Hex(sha256)) return {};
  return dir_ / std::string(sha256);
}

BlobUsage BlobStore::UsageOf(absl::string_view user) const {
  sync::MutexLock lock(&mu_);
  BlobUsage usage;
  usage.total_bytes = stored_bytes_ + reserved_bytes_;
  usage.stored_blobs = blobs_.size();
  usage.uploads = static_cast<uint64_t>(uploads_);
  usage.user_bytes = UserBytesLocked(user, clock_(), &usage.user_blobs);
  return usage;
}

// ---------------------------------------------------------------- accounting

bool BlobStore::HoldsLocked(const UserState& state, absl::string_view sha256,
                            absl::Time now) const {
  if (state.references.contains(sha256)) return true;
  auto hold = state.holds.find(sha256);
  return hold != state.holds.end() && hold->second > now;
}

uint64_t BlobStore::UserBytesLocked(absl::string_view user, absl::Time now, uint64_t* blobs) const {
  uint64_t bytes = 0;
  uint64_t count = 0;
  auto it = users_.find(user);
  if (it != users_.end()) {
    const UserState& state = it->second;
    bytes = state.reserved_bytes;
    // Loops, not a lambda: clang's thread-safety analysis does not see the
    // lock inside a lambda.
    for (const auto& [sha256, holders] : state.references) {
      auto blob = blobs_.find(sha256);
      if (blob == blobs_.end()) continue;
      bytes += blob->second.size;
      ++count;
    }
    for (const auto& [sha256, until] : state.holds) {
      if (until <= now || state.references.contains(sha256)) continue;
      auto blob = blobs_.find(sha256);
      if (blob == blobs_.end()) continue;
      bytes += blob->second.size;
      ++count;
    }
  }
  if (blobs != nullptr) *blobs = count;
  return bytes;
}

BlobStore::Bound BlobStore::CheckBoundsLocked(absl::string_view user, uint64_t user_more,
                                              uint64_t total_more, absl::Time now) const {
  if (user_more > 0) {
    const uint64_t used = UserBytesLocked(user, now, nullptr);
    if (used > limits_.max_user_bytes || user_more > limits_.max_user_bytes - used) {
      return Bound::kUser;
    }
  }
  if (total_more > 0) {
    const uint64_t used = stored_bytes_ + reserved_bytes_;
    if (used > limits_.max_total_bytes || total_more > limits_.max_total_bytes - used) {
      return Bound::kTotal;
    }
  }
  return Bound::kNone;
}

absl::Status BlobStore::BoundErrorLocked(Bound bound, absl::string_view user, uint64_t need,
                                         absl::string_view what, absl::Time now) const {
  switch (bound) {
    case Bound::kUser:
      return absl::ResourceExhaustedError(absl::StrCat(
          "user ", EchoName(user), " holds ", Bytes(UserBytesLocked(user, now, nullptr)),
          " of the ", Bytes(limits_.max_user_bytes), " per-user blob store limit; ", what,
          " needs ", Bytes(need),
          " more: delete finished jobs you no longer need (ipupod job delete) to free their "
          "blobs, or ask the admin to raise the per-user limit"));
    case Bound::kTotal:
      return absl::ResourceExhaustedError(absl::StrCat(
          "the blob store holds ", Bytes(stored_bytes_ + reserved_bytes_), " of its ",
          Bytes(limits_.max_total_bytes),
          " total limit (the blobs of all users and the uploads in progress); ", what, " needs ",
          Bytes(need),
          " more: retry when finished jobs have been deleted (ipupod job delete), or ask the "
          "admin to raise the total limit"));
    case Bound::kBlob:
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " is ", Bytes(need), ", over the blob store's per-blob limit of ",
                       Bytes(limits_.max_blob_bytes),
                       ": use a smaller file, or ask the admin to raise the per-blob limit"));
    case Bound::kUploads:
      return absl::ResourceExhaustedError(
          absl::StrCat(uploads_, " blob uploads are in progress, the blob store's limit of ",
                       limits_.max_uploads, ": retry when one has finished"));
    case Bound::kNone:
      break;
  }
  return absl::OkStatus();
}

void BlobStore::HoldLocked(absl::string_view user, absl::string_view sha256, absl::Time now) {
  const absl::Time until = now + limits_.upload_hold;
  absl::Time& hold = users_[user].holds[sha256];
  hold = std::max(hold, until);
  Blob& blob = blobs_[sha256];
  blob.hold_until = std::max(blob.hold_until, until);
}

void BlobStore::EraseUserIfEmptyLocked(absl::string_view user) {
  auto it = users_.find(user);
  if (it == users_.end()) return;
  const UserState& state = it->second;
  if (state.references.empty() && state.holds.empty() && state.reserved_bytes == 0) {
    users_.erase(it);
  }
}

// ---------------------------------------------------------------- uploads

absl::StatusOr<std::unique_ptr<BlobStore::Upload>> BlobStore::BeginUpload(absl::string_view user,
                                                                          absl::string_view sha256,
                                                                          uint64_t size) {
  IPUPOD_RETURN_IF_ERROR(CheckSha256Hex(sha256));
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<Upload> stored, BeginStored(user, sha256, size));
  if (stored != nullptr) return stored;
  // Not stored, or not the user's (a concurrent upload of the same bytes may
  // win, or the blob is someone else's: then this one's Commit finds the
  // blob in place, discards its copy and records the user as an owner).
  return BeginNew(user, sha256, size);
}

// An Upload with already_stored() if the blob is stored, null if not.
absl::StatusOr<std::unique_ptr<BlobStore::Upload>> BlobStore::BeginStored(absl::string_view user,
                                                                          absl::string_view sha256,
                                                                          uint64_t size) {
  sync::MutexLock lock(&mu_);
  auto it = blobs_.find(sha256);
  // Not the user's: a whole upload, as for a blob nobody stored (only the
  // bytes prove possession; the size check below would tell that it exists).
  if (it == blobs_.end() || !it->second.owners.contains(user)) return std::unique_ptr<Upload>();
  if (it->second.size != size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "blob ", sha256, " is stored with ", it->second.size, " bytes, not the declared ", size,
        ": declare the size of the file whose SHA-256 you sent"));
  }
  const absl::Time now = clock_();
  auto state = users_.find(user);
  if (state == users_.end() || !HoldsLocked(state->second, sha256, now)) {
    const Bound bound = CheckBoundsLocked(user, size, 0, now);
    if (bound != Bound::kNone) return BoundErrorLocked(bound, user, size, "this upload", now);
  }
  HoldLocked(user, sha256, now);
  std::unique_ptr<Upload> upload(new Upload(this, std::string(user), std::string(sha256), size));
  upload->already_stored_ = true;
  return upload;
}

absl::StatusOr<std::unique_ptr<BlobStore::Upload>> BlobStore::BeginNew(absl::string_view user,
                                                                       absl::string_view sha256,
                                                                       uint64_t size) {
  if (size > limits_.max_blob_bytes) {
    sync::MutexLock lock(&mu_);
    return BoundErrorLocked(Bound::kBlob, user, size, absl::StrCat("blob ", sha256), clock_());
  }
  IPUPOD_ASSIGN_OR_RETURN(const uint64_t temp_number, Reserve(user, size));
  // From here the Upload owns the reservation: its destructor returns it.
  std::unique_ptr<Upload> upload(new Upload(this, std::string(user), std::string(sha256), size));
  const std::filesystem::path temp =
      dir_ / absl::StrCat(sha256, ".", temp_number, ".upload", kTemporarySuffix);
  upload->fd_ = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (upload->fd_ < 0) return FileError("create", temp, errno);
  upload->temp_path_ = temp;
  return upload;
}

absl::StatusOr<uint64_t> BlobStore::Reserve(absl::string_view user, uint64_t size) {
  for (int attempt = 0;; ++attempt) {
    {
      sync::MutexLock lock(&mu_);
      const absl::Time now = clock_();
      if (uploads_ >= limits_.max_uploads) {
        return BoundErrorLocked(Bound::kUploads, user, size, "this upload", now);
      }
      const Bound bound = CheckBoundsLocked(user, size, size, now);
      if (bound == Bound::kNone) {
        ++uploads_;
        reserved_bytes_ += size;
        users_[user].reserved_bytes += size;
        return next_temp_++;
      }
      if (bound != Bound::kTotal || attempt > 0 || !AnySweepableLocked(now)) {
        return BoundErrorLocked(bound, user, size, "this upload", now);
      }
    }
    // Blobs nobody holds any more fill the store: delete them, then try once more.
    Sweep();
  }
}

void BlobStore::EndUpload(absl::string_view user, uint64_t size) {
  sync::MutexLock lock(&mu_);
  EndUploadLocked(user, size);
}

void BlobStore::EndUploadLocked(absl::string_view user, uint64_t size) {
  --uploads_;
  reserved_bytes_ -= size;
  users_[user].reserved_bytes -= size;
  EraseUserIfEmptyLocked(user);
}

absl::Status BlobStore::Install(Upload& upload) {
  const std::filesystem::path path = PathOf(upload.sha256_);
  bool renamed = false;
  bool marked = false;
  absl::Status status;
  {
    sync::MutexLock lock(&mu_);
    // Renamed under the lock so that Sweep, which renames blobs away under it,
    // never takes a blob that is being put in place.
    if (!blobs_.contains(upload.sha256_)) {
      if (::rename(upload.temp_path_.c_str(), path.c_str()) == 0) {
        blobs_[upload.sha256_] = Blob{upload.size_, 0, absl::InfinitePast(), {}};
        stored_bytes_ += upload.size_;
        renamed = true;
      } else {
        status = FileError("rename an upload to", path, errno);
      }
    }
    // The bytes were verified: the uploader owns the blob, whoever stored it first.
    if (status.ok()) status = AddOwnerLocked(upload.sha256_, upload.user_, &marked);
    if (status.ok()) HoldLocked(upload.user_, upload.sha256_, clock_());
    EndUploadLocked(upload.user_, upload.size_);
    upload.ended_ = true;
  }
  // Another upload of the same bytes won: this copy is not needed.
  if (!renamed) ::unlink(upload.temp_path_.c_str());
  // The blob and its owner are durable before the upload is answered.
  if (status.ok() && (renamed || marked)) status = SyncDir(dir_);
  return status;
}

BlobStore::Upload::~Upload() { Discard(); }

absl::Status BlobStore::Upload::Ended() const {
  if (!ended_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the upload of blob ", sha256_,
                   " has already ended (committed, failed or refused); begin a new upload"));
}

void BlobStore::Upload::Discard() {
  if (ended_) return;
  ended_ = true;
  if (already_stored_) return;  // nothing reserved, no file
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  store_->EndUpload(user_, size_);
}

absl::Status BlobStore::Upload::Append(absl::string_view bytes) {
  IPUPOD_RETURN_IF_ERROR(Ended());
  if (already_stored_) {
    return absl::InvalidArgumentError(
        absl::StrCat("blob ", sha256_, " is already stored: send no data for it"));
  }
  if (bytes.size() > size_ - received_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the upload of blob ", sha256_, " declared ", size_, " bytes, but ", received_,
                     " + ", bytes.size(), " bytes arrived: declare the whole file's size"));
  }
  absl::Status written = WriteAll(fd_, bytes, temp_path_);
  if (!written.ok()) {
    Discard();
    return written;
  }
  hasher_.Update(bytes);
  received_ += bytes.size();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> BlobStore::Upload::Commit() {
  IPUPOD_RETURN_IF_ERROR(Ended());
  if (already_stored_) {
    ended_ = true;
    return size_;
  }
  if (received_ != size_) {
    Discard();
    return absl::InvalidArgumentError(absl::StrCat("the upload of blob ", sha256_, " ended after ",
                                                   received_, " of its declared ", size_,
                                                   " bytes: send the whole file"));
  }
  const std::string actual = DigestHex(hasher_.Finish());
  if (actual != sha256_) {
    Discard();
    return absl::DataLossError(
        absl::StrCat("the bytes do not hash to ", sha256_, " (they hash to ", actual,
                     "): upload again; if it fails again, the file changed while it was read"));
  }
  if (::fsync(fd_) != 0) {
    absl::Status status = FileError("sync", temp_path_, errno);
    Discard();
    return status;
  }
  ::close(fd_);  // fsync has reported any write error
  fd_ = -1;
  IPUPOD_RETURN_IF_ERROR(store_->Install(*this));
  return size_;
}

// ---------------------------------------------------------------- jobs

absl::Status BlobStore::Reference(absl::string_view holder, absl::string_view user,
                                  const std::vector<std::string>& sha256s) {
  return ReferenceBlobs(holder, user, sha256s, /*owned_only=*/true);
}

absl::Status BlobStore::Rereference(absl::string_view holder, absl::string_view user,
                                    const std::vector<std::string>& sha256s) {
  return ReferenceBlobs(holder, user, sha256s, /*owned_only=*/false);
}

absl::Status BlobStore::ReferenceBlobs(absl::string_view holder, absl::string_view user,
                                       const std::vector<std::string>& sha256s, bool owned_only) {
  for (const std::string& sha256 : sha256s) IPUPOD_RETURN_IF_ERROR(CheckSha256Hex(sha256));
  sync::MutexLock lock(&mu_);
  auto existing = holders_.find(holder);
  if (existing != holders_.end() && existing->second.user != user) {
    return absl::InvalidArgumentError(absl::StrCat("blob holder ", holder, " belongs to user ",
                                                   existing->second.user, ", not ", user));
  }
  std::vector<std::string> added;
  for (const std::string& sha256 : sha256s) {
    if (owned_only ? !OwnsLocked(user, sha256) : !blobs_.contains(sha256)) {
      return absl::NotFoundError(absl::StrCat(
          "blob ", sha256,
          " is not in the blob store: upload it with PutBlob (ipupod submit uploads what a job "
          "needs) and submit again"));
    }
    const bool held =
        existing != holders_.end() && absl::c_linear_search(existing->second.sha256s, sha256);
    if (!held && !absl::c_linear_search(added, sha256)) added.push_back(sha256);
  }
  if (added.empty()) return absl::OkStatus();
  IPUPOD_RETURN_IF_ERROR(ChargeLocked(holder, user, added));
  Holder& entry = holders_[holder];
  entry.user = std::string(user);
  UserState& state = users_[user];
  for (std::string& sha256 : added) {
    ++state.references[sha256];
    ++blobs_[sha256].references;
    entry.sha256s.push_back(std::move(sha256));
  }
  return absl::OkStatus();
}

absl::Status BlobStore::ChargeLocked(absl::string_view holder, absl::string_view user,
                                     const std::vector<std::string>& sha256s) {
  const absl::Time now = clock_();
  auto state = users_.find(user);
  uint64_t more = 0;
  for (const std::string& sha256 : sha256s) {
    if (state == users_.end() || !HoldsLocked(state->second, sha256, now)) {
      more += blobs_.at(sha256).size;
    }
  }
  const Bound bound = CheckBoundsLocked(user, more, 0, now);
  if (bound == Bound::kNone) return absl::OkStatus();
  return BoundErrorLocked(bound, user, more, absl::StrCat("job ", holder), now);
}

void BlobStore::Release(absl::string_view holder) {
  sync::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  if (it == holders_.end()) return;
  const std::string user = it->second.user;
  UserState& state = users_[user];
  for (const std::string& sha256 : it->second.sha256s) {
    auto count = state.references.find(sha256);
    if (count != state.references.end() && --count->second == 0) state.references.erase(count);
    auto blob = blobs_.find(sha256);
    if (blob != blobs_.end()) --blob->second.references;
  }
  holders_.erase(it);
  EraseUserIfEmptyLocked(user);
}

// ---------------------------------------------------------------- sweeping

bool BlobStore::SweepableLocked(const Blob& blob, absl::Time now) const {
  return blob.references == 0 && blob.hold_until <= now;
}

bool BlobStore::AnySweepableLocked(absl::Time now) const {
  for (const auto& [sha256, blob] : blobs_) {
    if (SweepableLocked(blob, now)) return true;
  }
  return false;
}

void BlobStore::DropExpiredHoldsLocked(absl::Time now) {
  std::vector<std::string> emptied;
  for (auto& [user, state] : users_) {
    absl::erase_if(state.holds, [now](const auto& hold) { return hold.second <= now; });
    emptied.push_back(user);
  }
  for (const std::string& user : emptied) EraseUserIfEmptyLocked(user);
}

uint64_t BlobStore::Sweep() {
  std::vector<std::pair<std::filesystem::path, uint64_t>> doomed;
  {
    sync::MutexLock lock(&mu_);
    const absl::Time now = clock_();
    DropExpiredHoldsLocked(now);
    for (auto it = blobs_.begin(); it != blobs_.end();) {
      if (!SweepableLocked(it->second, now)) {
        ++it;
        continue;
      }
      // Renamed away under the lock (a metadata operation), unlinked outside it.
      const std::filesystem::path temp =
          dir_ / absl::StrCat(it->first, ".", next_temp_++, ".sweep", kTemporarySuffix);
      if (::rename(PathOf(it->first).c_str(), temp.c_str()) != 0) {
        if (errno != ENOENT) {  // kept: the next Sweep tries again
          ++it;
          continue;
        }
      } else {
        doomed.emplace_back(temp, it->second.size);
      }
      // Under the mutex: a new upload of the same bytes may mark them again.
      for (const std::string& owner : it->second.owners) {
        ::unlink(OwnerMarkerOf(it->first, owner).c_str());  // left over: the next Open removes it
      }
      stored_bytes_ -= it->second.size;
      blobs_.erase(it++);
    }
  }
  uint64_t freed = 0;
  for (const auto& [path, size] : doomed) {
    // A failed unlink leaves a temporary file that the next Open removes.
    if (::unlink(path.c_str()) == 0) freed += size;
  }
  return freed;
}

}  // namespace ipupod::jobs
