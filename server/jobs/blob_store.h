// File: server/jobs/blob_store.h
//
// BlobStore: the jobs' durable, content-addressed store of executables
// (.ipx), inputs and weights. A blob is named by the SHA-256 of its bytes
// (64 lower-case hex digits, common/sha256.h), stored once and shared by
// every job and user that uses the same bytes.
//
// Ownership (proof of possession): knowing a hash is not a right to the
// bytes. A user owns a blob once they have uploaded its bytes themselves
// (every byte streamed, the hash verified by the store), and only an owner
// may Stat it, get already_stored, or Reference it in a job or a compile.
// To anyone else the blob is answered exactly as a hash nobody stored: Stat
// finds nothing, BeginUpload starts a full upload (a second user's copy of
// the same bytes is received, verified and dropped, then they are recorded
// as an owner), Reference is NOT_FOUND with the same message. No answer
// depends on whether someone else stored it, and no path does less work for
// it. Admins are no exception: ownership is possession, not a permission.
// Ownership lasts as long as the blob; a Sweep that deletes the blob
// deletes its owners too. Rereference (a job recovered at start) asks no
// proof: the job was accepted with it before.
//
// On disk (`dir`, e.g. <state_dir>/blobs):
//   <sha256>                 a stored blob: exactly the bytes that hash to its name
//   <sha256>.<hex>.owner     an empty marker: the user whose name is <hex>
//                            (hex-encoded) owns the blob
//   <sha256>.<n>.upload.tmp  an upload in progress
//   <sha256>.<n>.sweep.tmp   a blob being deleted by Sweep
//   lock                     held with flock(2) while the store is open
// An upload writes its temporary file, checks its size and hash, fsyncs it,
// renames it to <sha256> and fsyncs the directory. Sweep renames a blob to a
// temporary name before unlinking it. So a kill at any moment leaves either
// no file named <sha256> or a complete, verified one; temporary files left
// behind are removed by the next Open. Open indexes every 64-hex-named file
// (its size from the file; the hash is not re-read) and its owner markers,
// removes the markers of blobs that are gone (a kill between a Sweep's
// steps), and lists any other file in ignored_files() for the caller to
// log. A marker is created (under the mutex) and the directory fsynced
// before the upload that earned it is answered. A blob stored by a server
// older than ownership has no marker: nobody owns it until someone uploads
// its bytes again.
//
// Accounting (all in memory; the job manager re-references every live job
// after a restart, so the store needs no database):
//   - A user holds a blob while one of their jobs references it (Reference,
//     until Release) or for `upload_hold` after they uploaded it (or began an
//     upload of it and found it already stored).
//   - Per-user usage: the sizes of the distinct blobs the user holds, plus
//     the declared sizes of their uploads in progress.
//   - Total usage: the sizes of all stored blobs (a blob held by two users
//     counts once) plus the declared sizes of all uploads in progress.
//   - Space is reserved when an upload begins, so concurrent uploads cannot
//     jointly overshoot a bound; a commit never fails on a bound.
//   - Sweep deletes blobs that no job references and no unexpired upload
//     hold keeps. A blob found at Open is kept for `upload_hold` from the
//     Open (it may belong to an upload not yet submitted), charged to nobody.
//     BeginUpload sweeps by itself before refusing on the total bound.
//
// Thread safety: every BlobStore method is safe to call concurrently (one
// mutex, held for the renames that put a blob in place or take it away, so
// that the index and the directory agree; never while blob contents are
// read, written or fsynced). An Upload is used by one thread at a time;
// every Upload must be destroyed before its store. One BlobStore per
// directory (Open locks it).
//
// Errors:
//   INVALID_ARGUMENT    a sha256 that is not 64 lower-case hex digits; more
//                       bytes than declared, fewer at Commit, data for a blob
//                       already stored, a declared size unlike the stored
//                       blob's
//   RESOURCE_EXHAUSTED  a bound (per user, total, per blob, uploads in
//                       progress), naming it with the bytes used and the
//                       limit; nothing is stored or charged then; the disk is
//                       full
//   DATA_LOSS           the uploaded bytes do not hash to the declared sha256
//   NOT_FOUND           Reference of a blob that is not stored or not the
//                       user's (one message for both)
//   FAILED_PRECONDITION the directory cannot be created, written or locked
//                       (another server uses it), an Upload used after it ended
//   INTERNAL            any other file system error (the message names it)
#ifndef IPUPOD_JOBS_BLOB_STORE_H_
#define IPUPOD_JOBS_BLOB_STORE_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/sha256.h"

namespace ipupod::jobs {

struct BlobStoreLimits {
  uint64_t max_total_bytes = uint64_t{64} << 30;  // every stored blob and upload in progress
  uint64_t max_user_bytes = uint64_t{16} << 30;   // the blobs one user holds
  uint64_t max_blob_bytes = uint64_t{8} << 30;    // one blob
  int max_uploads = 64;                           // uploads in progress (open temporary files)
  absl::Duration upload_hold = absl::Hours(1);    // an upload no job references is kept this long
};

// True for 64 lower-case hex digits.
bool IsSha256Hex(absl::string_view text);
// INVALID_ARGUMENT naming `what` ("blob", "executable_sha256") unless IsSha256Hex.
absl::Status CheckSha256Hex(absl::string_view text, absl::string_view what = "blob sha256");

// The bytes of a stored blob's file (BlobStore::PathOf); NOT_FOUND naming
// the blob when it is gone. The caller holds the blob (a reference) so that
// no Sweep takes it away meanwhile.
absl::StatusOr<std::string> ReadBlobFile(const std::filesystem::path& path);

struct BlobUsage {
  uint64_t total_bytes = 0;  // stored blobs + uploads in progress
  uint64_t stored_blobs = 0;
  uint64_t uploads = 0;     // in progress
  uint64_t user_bytes = 0;  // what the user holds + their uploads in progress
  uint64_t user_blobs = 0;  // distinct blobs the user holds
};

class BlobStore {
 public:
  class Upload;

  // Opens (creating) `dir`: locks it, removes leftover temporary files and
  // indexes the stored blobs. `clock` = absl::Now when empty.
  // REQUIRES: every limit > 0 (INVALID_ARGUMENT otherwise).
  static absl::StatusOr<std::unique_ptr<BlobStore>> Open(std::filesystem::path dir,
                                                         BlobStoreLimits limits,
                                                         std::function<absl::Time()> clock = {});
  ~BlobStore();
  BlobStore(const BlobStore&) = delete;
  BlobStore& operator=(const BlobStore&) = delete;

  // The blob's size if it is stored and `user` owns it (nullopt otherwise,
  // whichever of the two it is).
  std::optional<uint64_t> Stat(absl::string_view user, absl::string_view sha256) const;
  // True if `user` owns the stored blob (for tests and the status of a blob).
  bool Owns(absl::string_view user, absl::string_view sha256) const;
  // <dir>/<sha256>; an empty path when `sha256` is not IsSha256Hex (never a
  // path outside dir). Stored or not.
  std::filesystem::path PathOf(absl::string_view sha256) const;

  // Starts an upload by `user` of `size` bytes hashing to `sha256`. If the
  // blob is stored and `user` owns it, the Upload's already_stored() is
  // true, it accepts no data, and the user holds the blob for upload_hold
  // (charged if they did not hold it, bound checked). Otherwise (not stored,
  // or stored but not theirs) `size` is reserved against every bound until
  // the Upload commits or is destroyed, and Commit makes `user` an owner.
  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(absl::string_view user,
                                                      absl::string_view sha256, uint64_t size);

  // Records that job `holder` of `user` uses these blobs (added to what the
  // holder already uses). Each must be stored and owned by `user` (NOT_FOUND
  // naming the first that is not, the same message either way). The user is charged once per
  // distinct blob whatever number of their jobs hold it; over the per-user bound:
  // RESOURCE_EXHAUSTED. A failure changes nothing. A holder belongs to one
  // user (INVALID_ARGUMENT otherwise).
  absl::Status Reference(absl::string_view holder, absl::string_view user,
                         const std::vector<std::string>& sha256s);
  // Reference without asking for ownership: for a job the manager recovers
  // at start, accepted before with these blobs.
  absl::Status Rereference(absl::string_view holder, absl::string_view user,
                           const std::vector<std::string>& sha256s);
  // Drops every reference of `holder` (none: nothing happens).
  void Release(absl::string_view holder);

  // Deletes the blobs no holder references and no unexpired hold keeps;
  // returns the bytes freed.
  uint64_t Sweep();

  BlobUsage UsageOf(absl::string_view user) const;
  const BlobStoreLimits& limits() const { return limits_; }
  const std::filesystem::path& dir() const { return dir_; }
  // Files in dir that Open neither indexed nor removed (names only).
  const std::vector<std::string>& ignored_files() const { return ignored_files_; }

 private:
  struct Blob {
    uint64_t size = 0;
    int references = 0;                            // holders using it, all users
    absl::Time hold_until = absl::InfinitePast();  // the latest hold of any user (or Open's)
    absl::flat_hash_set<std::string> owners;       // users who uploaded its bytes
  };
  struct UserState {
    absl::flat_hash_map<std::string, int> references;    // sha256 -> this user's holders using it
    absl::flat_hash_map<std::string, absl::Time> holds;  // sha256 -> upload hold end
    uint64_t reserved_bytes = 0;                         // uploads in progress
  };
  struct Holder {
    std::string user;
    std::vector<std::string> sha256s;  // distinct
  };
  enum class Bound { kNone, kUser, kTotal, kBlob, kUploads };

  BlobStore(std::filesystem::path dir, BlobStoreLimits limits, std::function<absl::Time()> clock,
            int lock_fd);
  absl::Status Index();
  // Index's second half: the owner markers in `markers` given to the blobs
  // found; those of missing blobs (or unreadable names) removed.
  absl::Status IndexOwners(absl::flat_hash_map<std::string, Blob>& found,
                           const std::vector<std::filesystem::path>& markers);
  std::filesystem::path OwnerMarkerOf(absl::string_view sha256, absl::string_view user) const;
  // Records `user` as an owner of the stored `sha256` (its marker created).
  // Sets *created when the marker is new (the directory then needs a sync).
  absl::Status AddOwnerLocked(absl::string_view sha256, absl::string_view user, bool* created)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool OwnsLocked(absl::string_view user, absl::string_view sha256) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReferenceBlobs(absl::string_view holder, absl::string_view user,
                              const std::vector<std::string>& sha256s, bool owned_only);

  bool HoldsLocked(const UserState& state, absl::string_view sha256, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t UserBytesLocked(absl::string_view user, absl::Time now, uint64_t* blobs) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Which bound `user` needing `user_more` more bytes and the store `total_more`
  // more would break.
  Bound CheckBoundsLocked(absl::string_view user, uint64_t user_more, uint64_t total_more,
                          absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status BoundErrorLocked(Bound bound, absl::string_view user, uint64_t need,
                                absl::string_view what, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK if `user` may also hold `sha256s` (stored, distinct, not yet held by `holder`).
  absl::Status ChargeLocked(absl::string_view holder, absl::string_view user,
                            const std::vector<std::string>& sha256s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HoldLocked(absl::string_view user, absl::string_view sha256, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SweepableLocked(const Blob& blob, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AnySweepableLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropExpiredHoldsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseUserIfEmptyLocked(absl::string_view user) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<std::unique_ptr<Upload>> BeginStored(absl::string_view user,
                                                      absl::string_view sha256, uint64_t size);
  absl::StatusOr<std::unique_ptr<Upload>> BeginNew(absl::string_view user, absl::string_view sha256,
                                                   uint64_t size);
  // Reserves `size` for a new upload by `user` (sweeping once if that makes
  // room); returns the number of its temporary file.
  absl::StatusOr<uint64_t> Reserve(absl::string_view user, uint64_t size);
  // An upload ends: its reservation goes.
  void EndUploadLocked(absl::string_view user, uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndUpload(absl::string_view user, uint64_t size);
  // Commit's last step: moves the verified temporary file into place.
  absl::Status Install(Upload& upload);

  const std::filesystem::path dir_;
  const BlobStoreLimits limits_;
  const std::function<absl::Time()> clock_;
  const int lock_fd_;
  std::vector<std::string> ignored_files_;  // set by Open, then constant

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Blob> blobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, UserState> users_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Holder> holders_ ABSL_GUARDED_BY(mu_);
  uint64_t stored_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int uploads_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_temp_ ABSL_GUARDED_BY(mu_) = 0;
};

// One upload into a BlobStore (BeginUpload). Destroying an Upload that has
// not committed removes its temporary file and returns its reservation.
class BlobStore::Upload {
 public:
  ~Upload();
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  // The blob was stored already: send no data, just Commit (or drop it).
  bool already_stored() const { return already_stored_; }
  const std::string& sha256() const { return sha256_; }
  uint64_t size_bytes() const { return size_; }
  uint64_t bytes_received() const { return received_; }

  // Appends the next bytes. INVALID_ARGUMENT past the declared size (nothing
  // is written) or for an already stored blob; a write error ends the upload.
  absl::Status Append(absl::string_view bytes);
  // Verifies the size (INVALID_ARGUMENT) and hash (DATA_LOSS), fsyncs, and
  // moves the blob into place; the user holds it for upload_hold. Returns
  // the blob's size. Whatever the result, the upload has ended.
  absl::StatusOr<uint64_t> Commit();

 private:
  friend class BlobStore;
  Upload(BlobStore* store, std::string user, std::string sha256, uint64_t size)
      : store_(store), user_(std::move(user)), sha256_(std::move(sha256)), size_(size) {}
  // Removes the temporary file and returns the reservation (once).
  void Discard();
  absl::Status Ended() const;

  BlobStore* const store_;
  const std::string user_;
  const std::string sha256_;
  const uint64_t size_;
  bool already_stored_ = false;
  bool ended_ = false;
  int fd_ = -1;
  std::filesystem::path temp_path_;
  Sha256 hasher_;
  uint64_t received_ = 0;
};

}  // namespace ipupod::jobs

#endif  // IPUPOD_JOBS_BLOB_STORE_H_
