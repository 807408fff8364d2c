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
#include <thread>

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

// Consecutive steps that may find the database locked (10 ms apart).
constexpr int kMaxBusySteps = 3000;

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

// The size of one of the connection's open files (the database or its
// -wal), through the file handle SQLite holds: right even when the path now
// names another file or none. 0 when it is not open.
int64_t OpenFileBytes(sqlite3* db, int op) {
  sqlite3_file* file = nullptr;
  if (sqlite3_file_control(db, "main", op, &file) != SQLITE_OK || file == nullptr || file->pMethods == nullptr) {
    return 0;
  }
  sqlite3_int64 size = 0;
  return file->pMethods->xFileSize(file, &size) == SQLITE_OK ? static_cast<int64_t>(size) : 0;
}

}  // namespace

int64_t BackupRequiredFreeBytes(int64_t db_bytes, int64_t wal_bytes) {
  return db_bytes + wal_bytes + std::max(db_bytes / 10, kBackupMinHeadroomBytes);
}

absl::StatusOr<std::unique_ptr<DatabaseBackup>> DatabaseBackup::Start(Store* store, const std::string& data_dir,
                                                                      BackupOptions options) {
  bool expected = false;
  if (!g_backup_running.compare_exchange_strong(expected, true)) {
    return absl::ResourceExhaustedError(
        "backup: a backup of the database is already running (one at a time); wait for it to finish and retry");
  }
  std::unique_ptr<DatabaseBackup> backup(new DatabaseBackup());
  backup->holds_slot_ = true;
  backup->store_ = store;
  backup->options_ = std::move(options);
  if (!backup->options_.free_bytes) backup->options_.free_bytes = StatvfsFreeBytes;
  backup->options_.pages_per_step = std::max(1, backup->options_.pages_per_step);
  DET_RETURN_IF_ERROR(backup->Open(data_dir));
  return backup;
}

absl::Status DatabaseBackup::Open(const std::string& data_dir) {
  const std::string& db_path = store_->path();
  int64_t db_bytes = 0, wal_bytes = 0;
  int moved = 0;
  DET_RETURN_IF_ERROR(store_->WithConnection([&](sqlite3* db) -> absl::Status {
    DET_ASSIGN_OR_RETURN(int64_t pages, QueryInt(db, "PRAGMA page_count", db_path));
    DET_ASSIGN_OR_RETURN(int64_t page_size, QueryInt(db, "PRAGMA page_size", db_path));
    db_bytes = std::max(pages * page_size, OpenFileBytes(db, SQLITE_FCNTL_FILE_POINTER));
    wal_bytes = OpenFileBytes(db, SQLITE_FCNTL_JOURNAL_POINTER);
    sqlite3_file_control(db, "main", SQLITE_FCNTL_HAS_MOVED, &moved);
    return absl::OkStatus();
  }));
  if (moved != 0) {
    spdlog::warn("backup: {} is no longer the file this master opened (deleted or replaced since); backing up the "
                 "database the master serves, through its open connection", db_path);
  }
  const int64_t required = BackupRequiredFreeBytes(db_bytes, wal_bytes);
  DET_ASSIGN_OR_RETURN(int64_t free_bytes, options_.free_bytes(data_dir));
  if (free_bytes < required) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "backup: the data dir ", data_dir, " has ", free_bytes, " bytes free, less than the ", required,
        " bytes a backup requires there (the database's ", db_bytes, " bytes for the snapshot, its -wal's ",
        wal_bytes, " bytes, and max(10 %, 256 MiB) left for the master's own writes meanwhile); free space on that "
        "file system (or give the master a larger --data-dir) and retry"));
  }
  return CreateTemp(data_dir);
}

absl::Status DatabaseBackup::CreateTemp(const std::string& data_dir) {
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
  // The copy's own connection: no journal (a copy cut short is removed).
  int rc = sqlite3_open_v2(temp_path_.c_str(), &dest_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_exec(dest_, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF", nullptr, nullptr,
                                         nullptr);
  if (rc != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("backup: cannot open ", temp_path_, ": ",
                                            dest_ != nullptr ? sqlite3_errmsg(dest_) : sqlite3_errstr(rc)));
  }
  return absl::OkStatus();
}

DatabaseBackup::~DatabaseBackup() { Discard(); }

void DatabaseBackup::Discard() {
  EndCopy();
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) {
    for (const char* suffix : {"", "-journal", "-wal", "-shm"}) unlink((temp_path_ + suffix).c_str());
    temp_path_.clear();
  }
  if (holds_slot_) g_backup_running.store(false);
  holds_slot_ = false;
}

void DatabaseBackup::EndCopy() {
  if (copy_ != nullptr) {
    // sqlite3_backup_finish detaches from the Store's connection: its lock.
    (void)store_->WithConnection([this](sqlite3*) {
      sqlite3_backup_finish(copy_);
      return absl::OkStatus();
    });
    copy_ = nullptr;
  }
  if (dest_ != nullptr) sqlite3_close_v2(dest_);
  dest_ = nullptr;
}

absl::StatusOr<bool> DatabaseBackup::Step(int* restarts, int64_t* copied) {
  int rc = SQLITE_OK;
  std::string error;
  DET_RETURN_IF_ERROR(store_->WithConnection([&](sqlite3* src) {
    if (copy_ == nullptr) copy_ = sqlite3_backup_init(dest_, "main", src, "main");
    if (copy_ == nullptr) {
      rc = sqlite3_errcode(dest_);
      error = sqlite3_errmsg(dest_);
      return absl::OkStatus();
    }
    rc = sqlite3_backup_step(copy_, options_.pages_per_step);
    // Pages copied so far: a step that copies grows it, unless another
    // connection's write restarted the copy from page 1 (it is then one
    // step's pages again, no more than before).
    const int64_t now_copied = sqlite3_backup_pagecount(copy_) - sqlite3_backup_remaining(copy_);
    if (rc == SQLITE_OK && *copied > 0 && now_copied <= *copied) ++*restarts;
    *copied = now_copied;
    if (rc == SQLITE_DONE) {
      snapshot_ms_ = NowMs();  // the moment the copy is the served database
      rc = sqlite3_backup_finish(copy_);
      copy_ = nullptr;
      if (rc == SQLITE_OK) rc = SQLITE_DONE;
    }
    busy_ = rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
    if (rc != SQLITE_OK && rc != SQLITE_DONE && !busy_) error = sqlite3_errmsg(dest_);
    if (options_.in_step) options_.in_step(++steps_);
    return absl::OkStatus();
  }));
  busy_steps_ = busy_ ? busy_steps_ + 1 : 0;
  if (busy_steps_ > kMaxBusySteps) {
    return absl::UnavailableError(absl::StrCat("backup: ", store_->path(), " stayed locked by another process for ",
                                               kMaxBusySteps / 100, " s; stop it and retry"));
  }
  if (!error.empty()) {
    return absl::InternalError(absl::StrCat("backup: copying ", store_->path(), " into ", temp_path_, ": ", error,
                                            " (", sqlite3_errstr(rc), ")"));
  }
  if (*restarts > kMaxBackupRestarts) {
    return absl::UnavailableError(absl::StrCat(
        "backup: another process keeps writing to ", store_->path(), " (the copy restarted ", *restarts,
        " times); only det-master should write to its database: stop the other writer and retry"));
  }
  return rc == SQLITE_DONE;
}

absl::Status DatabaseBackup::Snapshot() {
  int restarts = 0;
  int steps = 0;
  int64_t copied = 0;
  while (true) {
    if (cancelled_.load()) {
      EndCopy();
      return absl::CancelledError("backup: cancelled");
    }
    DET_ASSIGN_OR_RETURN(bool complete, Step(&restarts, &copied));
    if (complete) break;
    if (options_.during_snapshot) options_.during_snapshot(++steps);
    if (busy_) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a lock held elsewhere: back off
  }
  // A rollback-journal file, like VACUUM INTO's (the pages copied say WAL).
  char* err = nullptr;
  if (sqlite3_exec(dest_, "PRAGMA journal_mode=DELETE", nullptr, nullptr, &err) != SQLITE_OK) {
    std::string error = err != nullptr ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("backup: ", temp_path_, ": PRAGMA journal_mode=DELETE: ", error));
  }
  EndCopy();
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
                       DatabaseBackup::Start(core->store(), core->options().data_dir));
  DET_RETURN_IF_ERROR(backup->Snapshot());
  apiv1::BackupDatabaseResponse chunk;
  while (!cancelled()) {
    DET_ASSIGN_OR_RETURN(bool more, backup->Next(&chunk));
    if (!more || !write(chunk)) return absl::OkStatus();
  }
  return absl::OkStatus();
}

void WatchBackupWrites(const std::shared_ptr<BackupWriteWatch>& watch, std::chrono::milliseconds timeout,
                       const std::function<void()>& cancel) {
  std::unique_lock<std::mutex> lock(watch->mu);
  while (!watch->stopped) {
    if (!watch->pending) {
      watch->cv.wait(lock);
      continue;
    }
    const auto deadline = watch->since + timeout;
    if (std::chrono::steady_clock::now() >= deadline) {
      watch->timed_out = true;
      lock.unlock();  // the call's OnDone joins this thread: the context outlives cancel()
      cancel();
      return;
    }
    watch->cv.wait_until(lock, deadline);
  }
}

BackupDatabaseReactor::BackupDatabaseReactor(MasterCore* core, grpc::CallbackServerContext* ctx) {
  auto backup = DatabaseBackup::Start(core->store(), core->options().data_dir);
  if (!backup.ok()) {
    Finish(ToGrpcStatus(backup.status()));
    return;
  }
  backup_ = *std::move(backup);
  const auto timeout = std::chrono::milliseconds(int64_t{1000} * core->options().backup_write_timeout_s);
  snapshot_thread_ = std::thread([this, watch = watch_, timeout, ctx] {
    absl::Status st = backup_->Snapshot();
    if (!st.ok()) {
      backup_->Discard();
      return Finish(ToGrpcStatus(st));
    }
    Next();  // `this` may be gone once it returns: only `watch` and `ctx` below
    WatchBackupWrites(watch, timeout, [&timeout, ctx] {
      spdlog::warn("backup: the client read nothing for {} s; cancelling its backup (--backup-write-timeout-s)",
                   timeout.count() / 1000);
      ctx->TryCancel();
    });
  });
}

void BackupDatabaseReactor::OnWriteDone(bool ok) {
  {
    std::lock_guard<std::mutex> lock(watch_->mu);
    watch_->pending = false;
  }
  if (!ok) {
    backup_->Discard();
    return Finish(grpc::Status::OK);  // the client went away (or the write timed out)
  }
  Next();
}

void BackupDatabaseReactor::OnCancel() {
  if (backup_) backup_->Cancel();
}

void BackupDatabaseReactor::OnDone() {
  {
    std::lock_guard<std::mutex> lock(watch_->mu);
    watch_->stopped = true;
  }
  watch_->cv.notify_all();
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
  {
    std::lock_guard<std::mutex> lock(watch_->mu);
    watch_->pending = true;
    watch_->since = std::chrono::steady_clock::now();
  }
  watch_->cv.notify_all();
  StartWrite(&chunk_);
}

}  // namespace det::master
