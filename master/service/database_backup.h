// BackupDatabase (api.proto; det-cli master backup): an online, consistent
// snapshot of the master's SQLite database, streamed in chunks.
//
// How: a connection of its own (read-only) runs `VACUUM INTO` a new
// temporary file in the data dir. Under the store's WAL journal that is one
// read transaction: writers keep committing meanwhile (the snapshot holds
// every write committed before it began and none after; the WAL cannot be
// checkpointed past it until it ends, so it grows meanwhile). The file is
// then read back in chunks of at most kBackupChunkBytes, hashed as it goes;
// the last message carries the SHA-256, the size, the schema version and
// the snapshot time.
//
// The temporary file: <data dir>/.det-backup-<32 random hex>.tmp, created
// O_EXCL with mode 0600 (never following a symlink), removed when the
// backup object goes (done, error or cancel); RemoveStaleBackups removes
// those a crashed master left, at start. One backup at a time per process.
#ifndef DET_MASTER_SERVICE_DATABASE_BACKUP_H_
#define DET_MASTER_SERVICE_DATABASE_BACKUP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sha256.h"
#include "det/api/v1/master.pb.h"
#include "master/core/master_core.h"

struct sqlite3;

namespace det::master {

inline constexpr int64_t kBackupChunkBytes = int64_t{1} << 20;
// The temporary files' name prefix (in the data dir).
inline constexpr char kBackupTempPrefix[] = ".det-backup-";

struct BackupOptions {
  // Free bytes of the file system holding `dir` (null: statvfs).
  std::function<absl::StatusOr<int64_t>(const std::string& dir)> free_bytes;
  // Tests: called once from inside the snapshot's read transaction.
  std::function<void()> during_snapshot;
};

// One backup, from Start to destruction. Snapshot and Next are called by
// one thread at a time (in that order); Cancel is thread-safe.
class DatabaseBackup {
 public:
  // Takes the process's one backup slot (ResourceExhausted "a backup of the
  // database is already running ..." when taken), opens `db_path`
  // read-only, and checks that `data_dir`'s free space is at least the
  // database's size (ResourceExhausted naming both sizes, the data dir and
  // the fix otherwise); then creates the temporary file (Internal naming it
  // and the OS error when it cannot).
  static absl::StatusOr<std::unique_ptr<DatabaseBackup>> Start(const std::string& db_path,
                                                              const std::string& data_dir,
                                                              BackupOptions options = {});
  // Discard().
  ~DatabaseBackup();
  DatabaseBackup(const DatabaseBackup&) = delete;
  DatabaseBackup& operator=(const DatabaseBackup&) = delete;

  // Writes the snapshot (VACUUM INTO; blocks for as long as that takes) and
  // opens it for Next. Cancelled when Cancel() was called; Internal naming
  // the SQLite error otherwise.
  absl::Status Snapshot();
  // Ends a running Snapshot soon (SQLite's progress handler); thread-safe.
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
  absl::Status Open(const std::string& db_path, const std::string& data_dir);
  absl::Status ReadFacts();

  BackupOptions options_;
  sqlite3* db_ = nullptr;
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

// The gRPC reactor of one BackupDatabase call: the snapshot is written on a
// thread of its own (no callback thread waits on it; a cancelled call
// cancels it), then one chunk is in flight at a time. Deletes itself.
class BackupDatabaseReactor final : public grpc::ServerWriteReactor<::det::api::v1::BackupDatabaseResponse> {
 public:
  explicit BackupDatabaseReactor(MasterCore* core);
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void Next();
  std::unique_ptr<DatabaseBackup> backup_;
  std::thread snapshot_thread_;
  ::det::api::v1::BackupDatabaseResponse chunk_;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_DATABASE_BACKUP_H_
