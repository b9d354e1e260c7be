#include "server/store/sqlite_state_store.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <system_error>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "server/store/sqlite_audit.h"
#include "server/store/sqlite_ledger.h"
#include "server/store/sqlite_util.h"
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace ipupod::store {
namespace {

using scheduler::StoredFailure;
using scheduler::StoredPartition;
using scheduler::StoredState;

constexpr int kBusyTimeoutMs = 5000;  // bounded wait on another connection's lock

// Version 1. CHECKs keep impossible rows out even if a caller slips.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE partitions (
  name TEXT PRIMARY KEY NOT NULL CHECK (length(name) > 0),
  start INTEGER NOT NULL CHECK (start >= 0),
  size INTEGER NOT NULL CHECK (size >= 1),
  owner TEXT NOT NULL,
  created_unix_ms INTEGER NOT NULL
);
CREATE TABLE failures (
  ipu INTEGER PRIMARY KEY NOT NULL CHECK (ipu >= 0),
  reason TEXT NOT NULL
);
CREATE TABLE meta (
  key TEXT PRIMARY KEY NOT NULL,
  value NOT NULL
);
PRAGMA user_version = 1;
)sql";

// Version 2: batch jobs (server/jobs/job_store.h). A record is its JSON
// (jobs::ToJson); id, user and state are columns for queries and checks.
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT UNIQUE NOT NULL CHECK (length(id) > 0),
  user TEXT NOT NULL,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
PRAGMA user_version = 2;
)sql";

absl::Status CreateStateDir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state dir '", dir.string(), "' exists and is not a directory; pass another --state-dir"));
  }
  std::filesystem::create_directories(dir, ec);
  if (!ec) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("cannot create state dir '", dir.string(),
                                                    "': ", ec.message(),
                                                    "; pass a writable --state-dir"));
}

// Holds <dir>/lock exclusively; returns the fd to keep open.
absl::StatusOr<int> LockStateDir(const std::filesystem::path& dir) {
  std::string path = (dir / "lock").string();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open '", path, "': ", std::strerror(errno), "; pass a writable --state-dir"));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("state dir '", dir.string(), "' is in use by another ipupodd (",
                     err == EWOULDBLOCK ? "locked" : std::strerror(err),
                     "); stop it or pass another --state-dir"));
  }
  return fd;
}

absl::Status Configure(sqlite3* db) {
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  IPUPOD_ASSIGN_OR_RETURN(Statement wal, Statement::Prepare(db, "PRAGMA journal_mode=WAL"));
  IPUPOD_ASSIGN_OR_RETURN(bool row, wal.Step());
  if (!row || wal.Text(0) != "wal") {
    return absl::FailedPreconditionError(absl::StrCat(
        "state store ", sqlite3_db_filename(db, "main"), ": cannot enable WAL journal mode (got '",
        row ? wal.Text(0) : "", "'); put --state-dir on a local filesystem"));
  }
  return Exec(db, "PRAGMA synchronous=FULL");
}

absl::Status Migrate(sqlite3* db) {
  IPUPOD_ASSIGN_OR_RETURN(int64_t version, QueryInt(db, "PRAGMA user_version"));
  if (version > SqliteStateStore::kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state store ", sqlite3_db_filename(db, "main"), " has schema version ", version,
        ", newer than this ipupodd supports (", SqliteStateStore::kSchemaVersion,
        "); run a newer ipupodd or pass another --state-dir"));
  }
  if (version == SqliteStateStore::kSchemaVersion) return absl::OkStatus();
  WriteFaultInjector no_faults(std::nullopt);  // the schema alone is no pod yet
  return WriteTransaction(db, WritePoint::kInitialise, no_faults, [db, version]() -> absl::Status {
    if (version < 1) IPUPOD_RETURN_IF_ERROR(Exec(db, kSchemaV1));
    if (version < 2) IPUPOD_RETURN_IF_ERROR(Exec(db, kSchemaV2));
    if (version < 3) IPUPOD_RETURN_IF_ERROR(Exec(db, kSchemaV3));
    if (version < 4) IPUPOD_RETURN_IF_ERROR(Exec(db, kSchemaV4));
    return Exec(db, kSchemaV5);
  });
}

// ------------------------------------------------------------ lost-store checks

constexpr const char* kWhatToDo =
    "restore state.db (with state.db-wal) from a backup, or start a new, empty pod deliberately "
    "with ipupodd --reinitialise";

// What the state dir held before the database was opened (opening creates a
// missing database and replays the WAL).
struct DirView {
  std::optional<StateMarker> marker;
  bool db_exists = false;
  uintmax_t db_bytes = 0;
  uintmax_t wal_bytes = 0;  // 0 when absent
};

uintmax_t FileBytes(const std::filesystem::path& path, bool* exists = nullptr) {
  std::error_code ec;
  uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (exists != nullptr) *exists = !ec || std::filesystem::exists(path);
  return ec ? 0 : bytes;
}

absl::StatusOr<DirView> InspectStateDir(const std::filesystem::path& dir) {
  DirView view;
  IPUPOD_ASSIGN_OR_RETURN(view.marker, ReadStateMarker(dir));
  view.db_bytes = FileBytes(dir / "state.db", &view.db_exists);
  view.wal_bytes = FileBytes(dir / "state.db-wal");
  return view;
}

std::string HeldPod(const std::filesystem::path& dir, const StateMarker& marker) {
  return absl::StrCat("state dir '", dir.string(), "' has held pod ", marker.pod_id, " (",
                      kStateMarkerFile, ", last boot ", marker.boot, ")");
}

// Before opening: a marker says state was here, so the database must be too.
absl::Status CheckDatabaseFilePresent(const std::filesystem::path& dir, const DirView& view) {
  if (!view.marker || (view.db_exists && view.db_bytes > 0)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(HeldPod(dir, *view.marker), " but state.db is ",
                                          view.db_exists ? "empty (0 bytes)" : "missing",
                                          ": the partitions and failed IPUs it recorded are gone; ",
                                          kWhatToDo));
}

// The meta rows, validated: a boot counter that is not a positive integer
// is corruption, never a reason to start again at 1.
struct Meta {
  std::string pod_id;
  int64_t boot = 0;        // 0: never booted
  int64_t clean_stop = 0;  // the boot that last shut down in order
};

absl::StatusOr<int64_t> MetaCount(sqlite3* db, const Statement& row, absl::string_view key) {
  if (row.Text(2) == "integer" && row.Int64(1) >= 1) return row.Int64(1);
  return absl::DataLossError(
      absl::StrCat("state store ", sqlite3_db_filename(db, "main"), ": the ", key, " is '",
                   row.Text(1).substr(0, 40), "' (", row.Text(2),
                   "), not a positive integer: the database is corrupt; ", kWhatToDo));
}

absl::StatusOr<Meta> ReadMeta(sqlite3* db) {
  IPUPOD_ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db,
                                                             "SELECT key, value, typeof(value) "
                                                             "FROM meta ORDER BY key"));
  Meta meta;
  while (true) {
    IPUPOD_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return meta;
    const std::string key = stmt.Text(0);
    if (key == "pod_id") meta.pod_id = stmt.Text(1);
    if (key == "boot_count") {
      IPUPOD_ASSIGN_OR_RETURN(meta.boot, MetaCount(db, stmt, "boot counter"));
    }
    if (key == "clean_stop") {
      IPUPOD_ASSIGN_OR_RETURN(meta.clean_stop, MetaCount(db, stmt, "clean-stop record"));
    }
  }
}

// After opening: the database must be the marker's pod, as new as the
// marker, and complete.
absl::Status CheckAgainstMarker(const std::filesystem::path& dir, const DirView& view,
                                const Meta& meta) {
  const StateMarker& marker = *view.marker;
  const std::string held = HeldPod(dir, marker);
  if (meta.pod_id.empty()) {
    return absl::DataLossError(absl::StrCat(
        held,
        " but state.db holds no pod (a new database is in its place): the partitions and "
        "failed IPUs it recorded are gone; ",
        kWhatToDo));
  }
  if (meta.pod_id != marker.pod_id) {
    return absl::DataLossError(absl::StrCat(held, " but state.db belongs to pod ", meta.pod_id,
                                            ": put back this pod's state.db; or ", kWhatToDo));
  }
  if (meta.boot < marker.boot) {
    return absl::DataLossError(absl::StrCat(
        held, " but state.db has only reached boot ", meta.boot,
        ": it is an older copy, or its write-ahead log (state.db-wal) was lost, and changes "
        "acknowledged since are gone; ",
        kWhatToDo));
  }
  if (meta.boot > 0 && meta.clean_stop != meta.boot && view.wal_bytes == 0) {
    return absl::DataLossError(absl::StrCat(
        held, ": boot ", meta.boot,
        " did not shut down in order and its write-ahead log "
        "state.db-wal is missing or empty, so changes it acknowledged since the last checkpoint "
        "are gone; ",
        kWhatToDo));
  }
  return absl::OkStatus();
}

// --reinitialise: the database, its WAL and shared memory, and the marker go.
absl::Status RemoveState(const std::filesystem::path& dir) {
  std::vector<std::string> removed;
  for (const char* name :
       {"state.db-wal", "state.db-shm", "state.db", "state.marker.tmp", kStateMarkerFile}) {
    std::error_code ec;
    const uintmax_t bytes = FileBytes(dir / name);
    if (std::filesystem::remove(dir / name, ec))
      removed.push_back(absl::StrCat(name, " (", bytes, " bytes)"));
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--reinitialise: cannot remove '", (dir / name).string(), "': ", ec.message()));
    }
  }
  spdlog::warn("state store: --reinitialise: starting a NEW, EMPTY pod in '{}'; removed {}",
               dir.string(),
               removed.empty() ? "nothing (it held no state)" : absl::StrJoin(removed, ", "));
  return absl::OkStatus();
}

// Opens (creating if needed), configures and migrates state.db; on error
// nothing stays open.
absl::StatusOr<sqlite3*> OpenDatabase(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  absl::Status status =
      rc == SQLITE_OK
          ? absl::OkStatus()
          : absl::Status(CodeOf(rc), absl::StrCat("cannot open state store '", path, "': ",
                                                  db ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
                                                  "; pass a writable --state-dir"));
  if (status.ok()) status = Configure(db);
  if (status.ok()) status = Migrate(db);
  if (!status.ok()) {
    sqlite3_close(db);  // null-safe
    return status;
  }
  return db;
}

}  // namespace

struct SqliteStateStore::DirFacts : DirView {};

absl::StatusOr<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(
    absl::string_view state_dir, StoreOptions options) {
  std::filesystem::path dir{std::string(state_dir)};
  IPUPOD_RETURN_IF_ERROR(CreateStateDir(dir));
  IPUPOD_ASSIGN_OR_RETURN(int lock_fd, LockStateDir(dir));
  absl::Status status = options.reinitialise ? RemoveState(dir) : absl::OkStatus();
  DirFacts facts;
  if (status.ok()) {
    absl::StatusOr<DirView> view = InspectStateDir(dir);
    status = view.ok() ? CheckDatabaseFilePresent(dir, *view) : view.status();
    if (status.ok()) static_cast<DirView&>(facts) = *std::move(view);
  }
  absl::StatusOr<sqlite3*> db =
      status.ok() ? OpenDatabase((dir / "state.db").string()) : absl::StatusOr<sqlite3*>(status);
  if (!db.ok()) {
    ::close(lock_fd);
    return db.status();
  }
  std::unique_ptr<SqliteStateStore> store(
      new SqliteStateStore(*db, lock_fd, std::move(dir), options.fault));
  IPUPOD_RETURN_IF_ERROR(store->Reconcile(facts));  // on error the store closes both
  IPUPOD_RETURN_IF_ERROR(store->OpenReader());
  return store;
}

SqliteStateStore::SqliteStateStore(sqlite3* db, int lock_fd, std::filesystem::path dir,
                                   std::optional<WriteFault> fault)
    : db_(db),
      lock_fd_(lock_fd),
      dir_(std::move(dir)),
      path_((dir_ / "state.db").string()),
      faults_(fault) {}

absl::Status SqliteStateStore::OpenReader() {
  sync::MutexLock lock(&read_mu_);
  // Read-write only so that it may map the WAL index; it runs SELECTs alone.
  int rc = sqlite3_open_v2(path_.c_str(), &read_db_, SQLITE_OPEN_READWRITE, nullptr);
  if (rc == SQLITE_OK) {
    sqlite3_extended_result_codes(read_db_, 1);
    sqlite3_busy_timeout(read_db_, kBusyTimeoutMs);
    return absl::OkStatus();
  }
  absl::Status status = SqliteError(read_db_, rc, "open the ledger's reading connection");
  sqlite3_close(read_db_);
  read_db_ = nullptr;
  return status;
}

SqliteStateStore::~SqliteStateStore() {
  {
    // First, so that the writer is the last connection: its close merges
    // the WAL (or keeps it, below).
    sync::MutexLock lock(&read_mu_);
    sqlite3_close(read_db_);  // null-safe
    read_db_ = nullptr;
  }
  {
    sync::MutexLock lock(&mu_);
    absl::Status status = MarkCleanStopLocked();
    if (!status.ok()) {
      // Without its record the stop looks unclean at the next Open, which
      // then needs the WAL: keep it rather than checkpoint it away.
      spdlog::warn("state store: cannot record a clean stop ({}); keeping state.db-wal",
                   std::string(status.message()));
      sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    }
  }
  sqlite3_close(db_);  // checkpoints the WAL into state.db and removes state.db-wal
  ::close(lock_fd_);
}

std::string SqliteStateStore::pod_id() const {
  sync::MutexLock lock(&mu_);
  return pod_id_;
}

absl::Status SqliteStateStore::Reconcile(const DirFacts& facts) {
  sync::MutexLock lock(&mu_);
  IPUPOD_ASSIGN_OR_RETURN(const Meta meta, ReadMeta(db_));
  if (!facts.marker) {
    IPUPOD_RETURN_IF_ERROR(AdoptLocked(meta.pod_id, meta.boot));
  } else {
    IPUPOD_RETURN_IF_ERROR(CheckAgainstMarker(dir_, facts, meta));
    pod_id_ = meta.pod_id;
  }
  opened_ = true;
  return absl::OkStatus();
}

// No marker: a new directory, one made before markers existed, or a marker
// lost (or not yet written) beside a database that names its pod.
absl::Status SqliteStateStore::AdoptLocked(const std::string& pod_id, int64_t boot) {
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  pod_id_ = pod_id;
  if (pod_id_.empty()) {
    pod_id_ = NewPodId();
    const std::string id = pod_id_;
    IPUPOD_RETURN_IF_ERROR(WriteTransaction(db, WritePoint::kInitialise, faults_,
                                            [&] { return PutMeta(db, "pod_id", id); }));
    if (boot > 0) spdlog::info("state store: {} gets pod id {} and a marker", path_, pod_id_);
  } else {
    spdlog::warn("state store: {} was missing in '{}'; written again from state.db (pod {})",
                 kStateMarkerFile, dir_.string(), pod_id_);
  }
  return WriteMarkerLocked(boot);
}

absl::Status SqliteStateStore::WriteMarkerLocked(int64_t boot) {
  IPUPOD_RETURN_IF_ERROR(faults_.BeforeCommit(WritePoint::kMarker));
  IPUPOD_RETURN_IF_ERROR(WriteStateMarker(dir_, StateMarker{pod_id_, boot}));
  faults_.AfterCommit(WritePoint::kMarker);
  return absl::OkStatus();
}

absl::Status SqliteStateStore::MarkCleanStopLocked() {
  if (!opened_) return absl::OkStatus();  // a refused store vouches for nothing
  sqlite3* db = db_;                      // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kCleanStop, faults_, [db]() -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(const Meta meta, ReadMeta(db));
    if (meta.boot == 0) return absl::OkStatus();  // never booted: no boot to vouch for
    return PutMeta(db, "clean_stop", meta.boot);
  });
}

absl::StatusOr<StoredState> SqliteStateStore::Load() {
  sync::MutexLock lock(&mu_);
  StoredState state;
  IPUPOD_RETURN_IF_ERROR(LoadPartitionsLocked(state));
  IPUPOD_RETURN_IF_ERROR(LoadFailuresLocked(state));
  return state;
}

absl::Status SqliteStateStore::LoadPartitionsLocked(StoredState& state) {
  IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                          Statement::Prepare(db_,
                                             "SELECT name, start, size, owner, created_unix_ms "
                                             "FROM partitions ORDER BY start, name"));
  while (true) {
    IPUPOD_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    StoredPartition p;
    p.name = stmt.Text(0);
    IPUPOD_ASSIGN_OR_RETURN(p.start, ToInt(stmt.Int64(1), "partition start"));
    IPUPOD_ASSIGN_OR_RETURN(p.size, ToInt(stmt.Int64(2), "partition size"));
    p.owner = stmt.Text(3);
    p.created_unix_ms = stmt.Int64(4);
    state.partitions.push_back(std::move(p));
  }
}

absl::Status SqliteStateStore::LoadFailuresLocked(StoredState& state) {
  IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                          Statement::Prepare(db_, "SELECT ipu, reason FROM failures ORDER BY ipu"));
  while (true) {
    IPUPOD_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    StoredFailure f;
    IPUPOD_ASSIGN_OR_RETURN(f.ipu, ToInt(stmt.Int64(0), "failed ipu"));
    f.reason = stmt.Text(1);
    state.failures.push_back(std::move(f));
  }
}

absl::StatusOr<uint64_t> SqliteStateStore::NextBootId() {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  int64_t boot = 0;
  IPUPOD_RETURN_IF_ERROR(
      WriteTransaction(db, WritePoint::kBootCount, faults_, [&]() -> absl::Status {
        IPUPOD_ASSIGN_OR_RETURN(const Meta meta, ReadMeta(db));  // a corrupt counter stops here
        boot = meta.boot + 1;
        return PutMeta(db, "boot_count", boot);
      }));
  IPUPOD_RETURN_IF_ERROR(WriteMarkerLocked(boot));
  return static_cast<uint64_t>(boot);
}

absl::Status SqliteStateStore::PutPartition(const StoredPartition& partition) {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kPutPartition, faults_, [&]() -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                            Statement::Prepare(db,
                                               "INSERT OR REPLACE INTO partitions"
                                               "(name, start, size, owner, created_unix_ms) "
                                               "VALUES(?1, ?2, ?3, ?4, ?5)"));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, partition.name));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(2, int64_t{partition.start}));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(3, int64_t{partition.size}));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(4, partition.owner));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(5, partition.created_unix_ms));
    return stmt.Run();
  });
}

absl::Status SqliteStateStore::DeletePartition(absl::string_view name) {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kDeletePartition, faults_, [&]() -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                            Statement::Prepare(db, "DELETE FROM partitions WHERE name = ?1"));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, name));
    return stmt.Run();
  });
}

absl::Status SqliteStateStore::PutFailure(const StoredFailure& failure) {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kPutFailure, faults_, [&]() -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(
        Statement stmt,
        Statement::Prepare(db, "INSERT OR REPLACE INTO failures(ipu, reason) VALUES(?1, ?2)"));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, int64_t{failure.ipu}));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(2, failure.reason));
    return stmt.Run();
  });
}

absl::Status SqliteStateStore::DeleteFailure(int ipu) {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kDeleteFailure, faults_, [&]() -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                            Statement::Prepare(db, "DELETE FROM failures WHERE ipu = ?1"));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, int64_t{ipu}));
    return stmt.Run();
  });
}

// ---------------------------------------------------------------- jobs

absl::StatusOr<std::vector<jobs::JobRecord>> SqliteStateStore::LoadJobs() {
  sync::MutexLock lock(&mu_);
  IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                          Statement::Prepare(db_, "SELECT id, record FROM jobs ORDER BY seq"));
  std::vector<jobs::JobRecord> out;
  while (true) {
    IPUPOD_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    absl::StatusOr<jobs::JobRecord> job = jobs::JobRecordFromJson(stmt.Text(1));
    if (!job.ok() || job->id != stmt.Text(0)) {
      return absl::DataLossError(
          absl::StrCat("state store ", path_, ": the record of job ", stmt.Text(0),
                       " is corrupt: ", job.ok() ? "its id differs" : job.status().message()));
    }
    out.push_back(*std::move(job));
  }
}

absl::StatusOr<int64_t> SqliteStateStore::NextJobNumber() {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  int64_t number = 0;
  IPUPOD_RETURN_IF_ERROR(
      WriteTransaction(db, WritePoint::kJobNumber, faults_, [&]() -> absl::Status {
        IPUPOD_ASSIGN_OR_RETURN(number,
                                QueryInt(db,
                                         "SELECT coalesce((SELECT value FROM meta WHERE key = "
                                         "'job_count'), 0) + 1"));
        return PutMeta(db, "job_count", number);
      }));
  return number;
}

absl::Status SqliteStateStore::PutJobs(absl::Span<const jobs::JobRecord> records) {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kPutJobs, faults_, [&]() -> absl::Status {
    for (const jobs::JobRecord& job : records) {
      // An UPSERT keeps the row (and its seq: the submission order).
      IPUPOD_ASSIGN_OR_RETURN(
          Statement stmt,
          Statement::Prepare(db,
                             "INSERT INTO jobs(id, user, state, record) VALUES(?1, ?2, ?3, ?4) "
                             "ON CONFLICT(id) DO UPDATE SET user = excluded.user, "
                             "state = excluded.state, record = excluded.record"));
      IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, job.id));
      IPUPOD_RETURN_IF_ERROR(stmt.Bind(2, job.user));
      IPUPOD_RETURN_IF_ERROR(stmt.Bind(3, jobs::JobStateName(job.state)));
      IPUPOD_RETURN_IF_ERROR(stmt.Bind(4, jobs::ToJson(job)));
      IPUPOD_RETURN_IF_ERROR(stmt.Run());
    }
    return absl::OkStatus();
  });
}

absl::Status SqliteStateStore::DeleteJob(absl::string_view id) {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kDeleteJob, faults_, [&]() -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                            Statement::Prepare(db, "DELETE FROM jobs WHERE id = ?1"));
    IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, id));
    return stmt.Run();
  });
}

}  // namespace ipupod::store
