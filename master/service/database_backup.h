// BackupDatabase (api.proto; det-cli master backup): an online, consistent
// snapshot of the database the master serves, streamed in chunks.
//
// How: SQLite's online backup API (sqlite3_backup_*) copies the Store's own
// open connection into a new temporary file in the data dir, a few pages
// per step, each step under the Store's lock (master/store/store.h
// WithConnection); between steps the master keeps serving (a thread that
// waited for that lock during a step takes it before the next step:
// store_mutex.h, so a long backup never starves the master's writes). A write the
// master commits meanwhile goes through that same connection, so SQLite
// copies it into the backup as well: when the last step ends, the file is
// exactly the served database at that moment (the snapshot time). Because
// it reads through the open connection, it backs up what the master serves
// even when det.db was deleted or replaced on disk since the master opened
// it (logged as a warning). A write by another process restarts the copy
// (at most kMaxBackupRestarts times, then Unavailable naming it). The
// file is then converted to a rollback journal (like VACUUM INTO's), read
// back in chunks of at most kBackupChunkBytes and hashed as it goes; the
// last message carries the SHA-256, the size, the schema version and the
// snapshot time.
//
// The temporary file: <data dir>/.det-backup-<32 random hex>.tmp, created
// O_EXCL with mode 0600 (never following a symlink), removed when the
// backup object goes (done, error or cancel); RemoveStaleBackups removes
// those a crashed master left, at start. One backup at a time per process.
#ifndef DET_MASTER_SERVICE_DATABASE_BACKUP_H_
#define DET_MASTER_SERVICE_DATABASE_BACKUP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sha256.h"
#include "det/api/v1/master.pb.h"
#include "master/core/master_core.h"

struct sqlite3;
struct sqlite3_backup;

namespace det::master {

inline constexpr int64_t kBackupChunkBytes = int64_t{1} << 20;
// Pages copied per step (under the Store's lock): 4 MiB of 4 KiB pages.
inline constexpr int kBackupPagesPerStep = 1024;
// How often another process's writes may restart the copy.
inline constexpr int kMaxBackupRestarts = 3;
// Room the data dir must keep beyond the snapshot and the -wal: the larger
// of a tenth of the database and this.
inline constexpr int64_t kBackupMinHeadroomBytes = int64_t{256} << 20;
// The temporary files' name prefix (in the data dir).
inline constexpr char kBackupTempPrefix[] = ".det-backup-";

struct BackupOptions {
  // Free bytes of the file system holding `dir` (null: statvfs).
  std::function<absl::StatusOr<int64_t>(const std::string& dir)> free_bytes;
  // Tests: called after each step of the copy that did not complete it
  // (1, 2, ...; not under the Store's lock).
  std::function<void(int step)> during_snapshot;
  // Tests: called at the end of each step, under the Store's lock (1, 2, ...).
  std::function<void(int step)> in_step;
  int pages_per_step = kBackupPagesPerStep;
};

// The free space a backup requires in the data dir: the database and its
// -wal as they are now, plus max(database / 10, kBackupMinHeadroomBytes)
// left for the master's own writes meanwhile.
int64_t BackupRequiredFreeBytes(int64_t db_bytes, int64_t wal_bytes);

// One backup, from Start to destruction. Snapshot and Next are called by
// one thread at a time (in that order); Cancel is thread-safe.
class DatabaseBackup {
 public:
  // Takes the process's one backup slot (ResourceExhausted "a backup of the
  // database is already running ..." when taken), reads the served
  // database's size and -wal size through `store`'s connection, and checks
  // that `data_dir` has BackupRequiredFreeBytes free (ResourceExhausted
  // naming the sizes, the data dir and the fix otherwise); then creates the
  // temporary file (Internal naming it and the OS error when it cannot).
  // `store` must outlive the backup.
  static absl::StatusOr<std::unique_ptr<DatabaseBackup>> Start(Store* store, const std::string& data_dir,
                                                              BackupOptions options = {});
  // Discard().
  ~DatabaseBackup();
  DatabaseBackup(const DatabaseBackup&) = delete;
  DatabaseBackup& operator=(const DatabaseBackup&) = delete;

  // Copies the served database into the temporary file (blocks for as long
  // as that takes; the master is only held a step at a time) and opens it
  // for Next. Cancelled when Cancel() was called; Unavailable when another
  // process's writes restarted it too often; Internal naming the SQLite
  // error otherwise.
  absl::Status Snapshot();
  // Ends a running Snapshot at its next step; thread-safe.
  void Cancel() { cancelled_.store(true); }
  // Fills `chunk` with the next piece; false when the last one was sent
  // (the one with done set). Requires: Snapshot succeeded. Once it has
  // read the last piece it Discard()s: the file is gone before the client
  // gets the last message.
  absl::StatusOr<bool> Next(::det::api::v1::BackupDatabaseResponse* chunk);
  // Closes and removes the temporary file (with any -journal, -wal or -shm
  // SQLite made beside it) and frees the slot. Idempotent; called before a
  // call is finished, so that neither outlives what the client sees.
  void Discard();

  const std::string& temp_path() const { return temp_path_; }

 private:
  DatabaseBackup() = default;
  absl::Status Open(const std::string& data_dir);
  absl::Status CreateTemp(const std::string& data_dir);
  // One step of the copy under the Store's lock; true when it is complete.
  absl::StatusOr<bool> Step(int* restarts, int64_t* copied);
  // Ends the sqlite3_backup (under the Store's lock) and closes the copy.
  void EndCopy();
  absl::Status ReadFacts();

  BackupOptions options_;
  Store* store_ = nullptr;
  sqlite3* dest_ = nullptr;             // the copy, while it is written
  sqlite3_backup* copy_ = nullptr;
  bool busy_ = false;    // the last step found a lock held
  int busy_steps_ = 0;   // consecutive such steps
  int steps_ = 0;        // steps taken
  std::string temp_path_;
  int fd_ = -1;  // the snapshot, open for reading once written
  int64_t size_ = 0;
  int64_t offset_ = 0;
  bool done_ = false;
  int64_t schema_version_ = 0;
  int64_t snapshot_ms_ = 0;
  std::unique_ptr<Sha256> sha_;
  std::atomic<bool> cancelled_{false};
  bool holds_slot_ = false;
};

// Removes every <data_dir>/.det-backup-* left by a master that stopped
// mid-backup (regular files only, no symlink followed). Returns how many;
// logs each. Called once at start, before serving.
int RemoveStaleBackups(const std::string& data_dir);

// The whole backup for the REST transport: Start, Snapshot, then every
// chunk through `write` until it returns false or `cancelled()` (OK then).
absl::Status StreamDatabaseBackup(MasterCore* core,
                                  const std::function<bool(const ::det::api::v1::BackupDatabaseResponse&)>& write,
                                  const std::function<bool()>& cancelled);

// Waits, on the calling thread, until `watch` is stopped; when one write
// has been pending for `timeout` (the client reads nothing), calls
// `cancel` once and returns. The reactor runs it on its snapshot thread.
struct BackupWriteWatch {
  std::mutex mu;
  std::condition_variable cv;
  bool stopped = false;        // the call is done: never cancel
  bool pending = false;        // a write was started and is not done
  std::chrono::steady_clock::time_point since;
  bool timed_out = false;
};
void WatchBackupWrites(const std::shared_ptr<BackupWriteWatch>& watch, std::chrono::milliseconds timeout,
                       const std::function<void()>& cancel);

// The gRPC reactor of one BackupDatabase call: the snapshot is written on a
// thread of its own (no callback thread waits on it; a cancelled call
// cancels it), then one chunk is in flight at a time; that thread then
// cancels the call when a chunk stays unread for
// MasterOptions::backup_write_timeout_s (a client that stopped reading
// frees the slot and the temporary file). Deletes itself.
class BackupDatabaseReactor final : public grpc::ServerWriteReactor<::det::api::v1::BackupDatabaseResponse> {
 public:
  BackupDatabaseReactor(MasterCore* core, grpc::CallbackServerContext* ctx);
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void Next();
  std::unique_ptr<DatabaseBackup> backup_;
  std::shared_ptr<BackupWriteWatch> watch_ = std::make_shared<BackupWriteWatch>();
  std::thread snapshot_thread_;
  ::det::api::v1::BackupDatabaseResponse chunk_;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_DATABASE_BACKUP_H_
