#include "master/service/database_backup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

#include <google/protobuf/util/time_util.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;

// The process's one backup slot.
std::atomic<bool> g_backup_running{false};

absl::StatusOr<int64_t> StatvfsFreeBytes(const std::string& dir) {
  struct statvfs st;
  if (statvfs(dir.c_str(), &st) != 0) {
    return absl::InternalError(absl::StrCat("backup: cannot read the free space of ", dir, ": ", std::strerror(errno)));
  }
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One integer a query on `db` answers (its first column of its first row).
absl::StatusOr<int64_t> QueryInt(sqlite3* db, const char* sql, const std::string& file) {
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  int64_t value = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  std::string error = rc == SQLITE_ROW ? "" : sqlite3_errmsg(db);
  sqlite3_finalize(st);
  if (!error.empty()) return absl::InternalError(absl::StrCat("backup: ", sql, ": ", error, " (", file, ")"));
  return value;
}

// 32 random lower-case hex digits (the temporary file's name).
absl::StatusOr<std::string> RandomHex() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return absl::InternalError("backup: no random bytes for a file name");
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

// What SQLite's progress handler sees during VACUUM INTO.
struct Progress {
  const BackupOptions* options;
  sqlite3* db;
  const std::atomic<bool>* cancelled;
  bool hook_called = false;
};

// The progress handler: runs the test hook once inside the read
// transaction; non-zero (cancelled) ends the VACUUM.
int OnProgress(void* arg) {
  auto* p = static_cast<Progress*>(arg);
  if (p->options->during_snapshot && !p->hook_called && sqlite3_txn_state(p->db, "main") == SQLITE_TXN_READ) {
    p->hook_called = true;
    p->options->during_snapshot();
  }
  return p->cancelled->load() ? 1 : 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DatabaseBackup>> DatabaseBackup::Start(const std::string& db_path,
                                                                      const std::string& data_dir,
                                                                      BackupOptions options) {
  bool expected = false;
  if (!g_backup_running.compare_exchange_strong(expected, true)) {
    return absl::ResourceExhaustedError(
        "backup: a backup of the database is already running (one at a time); wait for it to finish and retry");
  }
  std::unique_ptr<DatabaseBackup> backup(new DatabaseBackup());
  backup->holds_slot_ = true;
  backup->options_ = std::move(options);
  if (!backup->options_.free_bytes) backup->options_.free_bytes = StatvfsFreeBytes;
  DET_RETURN_IF_ERROR(backup->Open(db_path, data_dir));
  return backup;
}

absl::Status DatabaseBackup::Open(const std::string& db_path, const std::string& data_dir) {
  int rc = sqlite3_open_v2(db_path.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("backup: cannot open the database ", db_path, ": ",
                                            db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc)));
  }
  sqlite3_busy_timeout(db_, 10000);
  DET_ASSIGN_OR_RETURN(int64_t pages, QueryInt(db_, "PRAGMA page_count", db_path));
  DET_ASSIGN_OR_RETURN(int64_t page_size, QueryInt(db_, "PRAGMA page_size", db_path));
  const int64_t db_bytes = pages * page_size;
  DET_ASSIGN_OR_RETURN(int64_t free_bytes, options_.free_bytes(data_dir));
  if (free_bytes < db_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "backup: the data dir ", data_dir, " has ", free_bytes, " bytes free, less than the database's size (",
        db_bytes, " bytes) that its snapshot needs there; free space on that file system (or give the master a "
        "larger --data-dir) and retry"));
  }
  DET_ASSIGN_OR_RETURN(std::string name, RandomHex());
  temp_path_ = absl::StrCat(data_dir, "/", kBackupTempPrefix, name, ".tmp");
  int fd = open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::string error = std::strerror(errno);
    temp_path_.clear();  // not ours to remove
    return absl::InternalError(absl::StrCat("backup: cannot create a temporary file in the data dir ", data_dir,
                                            ": ", error));
  }
  fchmod(fd, 0600);  // whatever the umask
  close(fd);
  return absl::OkStatus();
}

DatabaseBackup::~DatabaseBackup() { Discard(); }

void DatabaseBackup::Discard() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (db_ != nullptr) sqlite3_close_v2(db_);
  db_ = nullptr;
  if (!temp_path_.empty()) {
    for (const char* suffix : {"", "-journal", "-wal", "-shm"}) unlink((temp_path_ + suffix).c_str());
    temp_path_.clear();
  }
  if (holds_slot_) g_backup_running.store(false);
  holds_slot_ = false;
}

absl::Status DatabaseBackup::Snapshot() {
  if (cancelled_.load()) return absl::CancelledError("backup: cancelled");
  Progress progress{&options_, db_, &cancelled_};
  sqlite3_progress_handler(db_, options_.during_snapshot ? 10 : 1000, OnProgress, &progress);
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db_, "VACUUM INTO ?1", -1, &st, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 1, temp_path_.c_str(), -1, SQLITE_TRANSIENT);
  snapshot_ms_ = NowMs();
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  std::string error = rc == SQLITE_DONE ? "" : sqlite3_errmsg(db_);
  sqlite3_finalize(st);
  sqlite3_progress_handler(db_, 0, nullptr, nullptr);
  if (cancelled_.load()) return absl::CancelledError("backup: cancelled");
  if (!error.empty()) return absl::InternalError(absl::StrCat("backup: VACUUM INTO ", temp_path_, ": ", error));
  sqlite3_close_v2(db_);
  db_ = nullptr;
  return ReadFacts();
}

absl::Status DatabaseBackup::ReadFacts() {
  sqlite3* snap = nullptr;
  int rc = sqlite3_open_v2(temp_path_.c_str(), &snap, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  absl::StatusOr<int64_t> version =
      rc == SQLITE_OK ? QueryInt(snap, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations", temp_path_)
                      : absl::InternalError(absl::StrCat("backup: cannot open the snapshot ", temp_path_));
  sqlite3_close_v2(snap);
  DET_RETURN_IF_ERROR(version.status());
  schema_version_ = *version;
  fd_ = open(temp_path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd_ < 0 || fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InternalError(
        absl::StrCat("backup: cannot read the snapshot ", temp_path_, ": ", std::strerror(errno)));
  }
  size_ = st.st_size;
  sha_ = std::make_unique<Sha256>();
  return absl::OkStatus();
}

absl::StatusOr<bool> DatabaseBackup::Next(apiv1::BackupDatabaseResponse* chunk) {
  if (done_) return false;
  if (fd_ < 0) return absl::FailedPreconditionError("backup: no snapshot was taken");
  chunk->Clear();
  std::string* data = chunk->mutable_data();
  data->resize(static_cast<size_t>(std::min(kBackupChunkBytes, size_ - offset_)));
  size_t got = 0;
  while (got < data->size()) {
    ssize_t n = pread(fd_, data->data() + got, data->size() - got, offset_ + static_cast<int64_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::DataLossError(absl::StrCat("backup: reading the snapshot ", temp_path_, " failed"));
    got += static_cast<size_t>(n);
  }
  sha_->Update(*data);
  chunk->set_offset(offset_);
  chunk->set_size_bytes(size_);
  offset_ += static_cast<int64_t>(got);
  if (offset_ == size_) {
    done_ = true;
    chunk->set_done(true);
    chunk->set_sha256(sha_->HexDigest());
    chunk->set_schema_version(schema_version_);
    *chunk->mutable_snapshot_time() = google::protobuf::util::TimeUtil::MillisecondsToTimestamp(snapshot_ms_);
    Discard();
  }
  return true;
}

int RemoveStaleBackups(const std::string& data_dir) {
  DIR* dir = opendir(data_dir.c_str());
  if (dir == nullptr) return 0;
  int removed = 0;
  const size_t prefix_len = std::strlen(kBackupTempPrefix);
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, kBackupTempPrefix, prefix_len) != 0) continue;
    struct stat st;
    if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) continue;
    if (unlinkat(dirfd(dir), e->d_name, 0) == 0) {
      spdlog::warn("removed {}/{}, the temporary file of a backup that did not finish", data_dir, e->d_name);
      ++removed;
    }
  }
  closedir(dir);
  return removed;
}

absl::Status StreamDatabaseBackup(MasterCore* core,
                                  const std::function<bool(const apiv1::BackupDatabaseResponse&)>& write,
                                  const std::function<bool()>& cancelled) {
  DET_ASSIGN_OR_RETURN(std::unique_ptr<DatabaseBackup> backup,
                       DatabaseBackup::Start(core->store()->path(), core->options().data_dir));
  DET_RETURN_IF_ERROR(backup->Snapshot());
  apiv1::BackupDatabaseResponse chunk;
  while (!cancelled()) {
    DET_ASSIGN_OR_RETURN(bool more, backup->Next(&chunk));
    if (!more || !write(chunk)) return absl::OkStatus();
  }
  return absl::OkStatus();
}

BackupDatabaseReactor::BackupDatabaseReactor(MasterCore* core) {
  auto backup = DatabaseBackup::Start(core->store()->path(), core->options().data_dir);
  if (!backup.ok()) {
    Finish(ToGrpcStatus(backup.status()));
    return;
  }
  backup_ = *std::move(backup);
  snapshot_thread_ = std::thread([this] {
    absl::Status st = backup_->Snapshot();
    if (!st.ok()) {
      backup_->Discard();
      return Finish(ToGrpcStatus(st));
    }
    Next();
  });
}

void BackupDatabaseReactor::OnWriteDone(bool ok) {
  if (!ok) {
    backup_->Discard();
    return Finish(grpc::Status::OK);  // the client went away
  }
  Next();
}

void BackupDatabaseReactor::OnCancel() {
  if (backup_) backup_->Cancel();
}

void BackupDatabaseReactor::OnDone() {
  if (snapshot_thread_.joinable()) {
    if (snapshot_thread_.get_id() == std::this_thread::get_id()) {
      snapshot_thread_.detach();  // OnDone ran inline on it: it returns next
    } else {
      snapshot_thread_.join();
    }
  }
  delete this;
}

void BackupDatabaseReactor::Next() {
  auto more = backup_->Next(&chunk_);
  if (!more.ok()) {
    backup_->Discard();
    return Finish(ToGrpcStatus(more.status()));
  }
  if (!*more) return Finish(grpc::Status::OK);
  StartWrite(&chunk_);
}

}  // namespace det::master
