// Store: statements, transactions, Open, the key-value table and the
// integrity check. The tables' methods are in store_<table>.cc and the schema
// in store_migrations.cc (see store_internal.h).
#include "master/store/store.h"

#include <sqlite3.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "master/store/data_dir.h"
#include "master/store/store_internal.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColText;

constexpr int kBusyTimeoutMs = 10000;

// A savepoint's statement journal (the page images a ROLLBACK TO restores)
// stays in memory up to this size, then spills to a temp file. SQLite's
// default, 64 KiB, spilled on most grouped metric commits (each call is a
// savepoint, store_metric_ingest.cc): a temp file created, written, unlinked
// and closed per transaction. SQLite allocates the in-memory journal as one
// chunk of this size, so it is kept small: 16 MiB (a fresh mapping, page
// faults and TLB flushes per transaction) ingested no faster than the
// default; 256 KiB holds a 1,000-row call and was 1.12-1.17x the default's
// 1-client ingestion (control_plane). Larger journals still spill.
constexpr int kStatementJournalSpillBytes = 256 << 10;

// SQLite's process-wide settings, before the first connection: they can
// only be set while SQLite is not initialized. In det-master the first
// Store::Open comes before any other SQLite use; where something else came
// first (a tool linking the store, such as bench/control_plane, whose raw
// SQLite runs come first), the default stays and a debug line says so.
void ConfigureSqliteOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int rc = sqlite3_config(SQLITE_CONFIG_STMTJRNL_SPILL, kStatementJournalSpillBytes);
    if (rc != SQLITE_OK) {
      spdlog::debug("SQLite was initialized before the store opened: savepoint journals spill to temp files past "
                   "64 KiB ({})",
                   sqlite3_errstr(rc));
    }
  });
}

// The cache of prepared statements is keyed by these addresses.
constexpr char kBegin[] = "BEGIN IMMEDIATE";
constexpr char kCommit[] = "COMMIT";
constexpr char kRollback[] = "ROLLBACK";
constexpr char kSavepoint[] = "SAVEPOINT det_nested";
constexpr char kRelease[] = "RELEASE det_nested";
constexpr char kRollbackTo[] = "ROLLBACK TO det_nested";

constexpr char kPutValue[] =
    "INSERT INTO kv(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value";
constexpr char kGetValue[] = "SELECT value FROM kv WHERE key = ?";

constexpr char kIntegrityCheck[] = "PRAGMA integrity_check";

}  // namespace

// ---- Helpers shared by the store_*.cc files ----

namespace store_internal {

// "?, ?, ?" for n parameters.
std::string Placeholders(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += i == 0 ? "?" : ", ?";
  return out;
}

// Never throws: invalid UTF-8 is replaced rather than rejected.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<nlohmann::json> ParseJson(const std::string& text, absl::string_view what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat("stored ", what, " is not valid JSON: ", text));
  return j;
}

}  // namespace store_internal

// ---- Store::Txn ----

Store::Txn::~Txn() {
  if (!open_) return;
  store_->pending_events_ = saved_;  // its writes are undone: so are their events
  store_->metric_tail_.RollbackTo(saved_tail_);
  store_->metric_rollups_.RollbackTo(saved_rollups_);
  if (nested_) {
    auto st = store_->Cached(kRollbackTo);
    if (st.ok()) sqlite3_step(st->get());
    auto rel = store_->Cached(kRelease);
    if (rel.ok()) sqlite3_step(rel->get());
  } else {
    auto st = store_->Cached(kRollback);
    if (st.ok()) sqlite3_step(st->get());
  }
}

absl::Status Store::Txn::Begin() {
  nested_ = sqlite3_get_autocommit(store_->db_) == 0;
  // Outside a transaction nothing can be pending: events left over are of a
  // transaction SQLite rolled back whole (SQLITE_FULL, IOERR) under an open
  // Txn, and must not be flushed by this one's commit.
  if (!nested_) {
    store_->pending_events_ = PendingStoreEvents();
    store_->metric_tail_.Abort();
    store_->metric_rollups_.Abort();
  }
  saved_ = store_->pending_events_;
  saved_tail_ = store_->metric_tail_.Mark();
  saved_rollups_ = store_->metric_rollups_.Mark();
  return Run(nested_ ? kSavepoint : kBegin, "begin transaction", true);
}

absl::Status Store::Txn::Commit() {
  DET_RETURN_IF_ERROR(Run(nested_ ? kRelease : kCommit, "commit transaction", false));
  if (!nested_) {  // committed
    store_->pending_events_.Flush(CurrentStoreEvents());
    store_->metric_tail_.Commit();
    store_->metric_rollups_.Commit();
  }
  return absl::OkStatus();
}

absl::Status Store::Txn::Run(const char* sql, absl::string_view what, bool opens) {
  DET_ASSIGN_OR_RETURN(Stmt st, store_->Cached(sql));
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return store_->Error(rc, what);
  open_ = opens;
  return absl::OkStatus();
}

// ---- Store::Transaction ----

// When this thread's outermost Store::Transaction began (store_events.h).
thread_local std::chrono::steady_clock::time_point transaction_began;

Store::Transaction::Transaction(Store* store) : store_(store) {
  store_->mu_.lock();
  if (store_->txn_depth_++ > 0) return;  // joins the outermost
  transaction_began = std::chrono::steady_clock::now();
  absl::Status begin = store_->Exec(kBegin, "begin transaction");
  store_->txn_began_ = begin.ok();
  store_->txn_error_ = begin;
}

Store::Transaction::~Transaction() {
  if (!done_) (void)End(/*commit=*/false);
}

absl::Status Store::Transaction::Commit() {
  if (done_) return result_;
  done_ = true;
  result_ = End(/*commit=*/true);
  return result_;
}

absl::Status Store::Transaction::End(bool commit) {
  Store* s = store_;
  const bool outermost = --s->txn_depth_ == 0;
  if (!commit && !outermost && s->txn_error_.ok()) {
    s->txn_error_ = absl::AbortedError("a nested Store::Transaction ended without Commit()");
  }
  absl::Status result = s->txn_error_;
  if (outermost && s->txn_began_) {
    if (commit && result.ok()) {
      result = s->Exec(kCommit, "commit transaction");
      // A failed COMMIT can leave the transaction open.
      if (!result.ok()) (void)s->Exec(kRollback, "roll back transaction");
    } else {
      // Fails harmlessly when SQLite has already rolled back (after an I/O
      // error, say).
      (void)s->Exec(kRollback, "roll back transaction");
    }
  }
  if (outermost) {
    // Committed: report its events; rolled back: drop them.
    if (s->txn_began_ && commit && result.ok()) {
      s->pending_events_.Flush(CurrentStoreEvents());
      s->metric_tail_.Commit();
      s->metric_rollups_.Commit();
    } else {
      s->pending_events_ = PendingStoreEvents();
      s->metric_tail_.Abort();
      s->metric_rollups_.Abort();
    }
    s->txn_began_ = false;
    s->txn_error_ = absl::OkStatus();
    ReportWriteTransaction(transaction_began);
  }
  s->mu_.unlock();
  return result;
}

// ---- Store ----

Store::Store(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

Store::~Store() {
  StopMetricWriter();
  checkpointer_.reset();  // its connection closes first: db_'s close checkpoints what is left
  std::lock_guard<StoreMutex> lock(mu_);
  for (auto& [sql, stmt] : stmts_) sqlite3_finalize(stmt);
  stmts_.clear();
  for (auto& [sql, stmt] : dynamic_stmts_) sqlite3_finalize(stmt);
  dynamic_stmts_.clear();
  sqlite3_close_v2(db_);
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  return OpenAtVersionForTest(path, LatestSchemaVersion());
}

absl::StatusOr<std::unique_ptr<Store>> Store::OpenAtVersionForTest(const std::string& path, int64_t version) {
  ConfigureSqliteOnce();
  // Before any write: PRAGMA journal_mode=WAL below rewrites the header of a
  // rollback-journal file (a backup) and creates -wal/-shm.
  DET_RETURN_IF_ERROR(store_internal::RefuseNewerSchema(path));
  DET_RETURN_IF_ERROR(MakeDatabaseFilesPrivate(path));  // data_dir.h: 0600 before SQLite creates -wal/-shm
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return absl::UnavailableError(absl::StrCat("cannot open SQLite database ", path, ": ", msg));
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  std::unique_ptr<Store> store(new Store(path, db));
  {
    std::lock_guard<StoreMutex> lock(store->mu_);
    DET_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL", "set journal_mode=WAL"));
    DET_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL", "set synchronous=NORMAL"));
    DET_RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON", "enable foreign keys"));
    DET_RETURN_IF_ERROR(store->Migrate(version));
    // Checkpoints off the writer's path (wal_checkpointer.h); the -wal file
    // shrinks back to 64 MiB when SQLite starts it over.
    DET_RETURN_IF_ERROR(store->Exec("PRAGMA wal_autocheckpoint=0", "set wal_autocheckpoint=0"));
    DET_RETURN_IF_ERROR(store->Exec("PRAGMA journal_size_limit=67108864", "set journal_size_limit"));
    DET_ASSIGN_OR_RETURN(store->checkpointer_, WalCheckpointer::Start(path, db, WalCheckpointer::Options()));
  }
  return store;
}

absl::Status Store::Error(int rc, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", sqlite3_errmsg(db_), " (SQLite database ", path_, ")");
  switch (rc) {
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_UNIQUE:
      return absl::AlreadyExistsError(msg);
    case SQLITE_CONSTRAINT_FOREIGNKEY:
      return absl::FailedPreconditionError(msg);
    default:
      break;
  }
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_TOOBIG:
      return absl::InvalidArgumentError(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status Store::Exec(const char* sql, absl::string_view what) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return absl::OkStatus();
  sqlite3_free(err);  // sqlite3_errmsg still holds the message.
  return Error(rc, what);
}

absl::StatusOr<Store::Stmt> Store::Cached(const char* sql) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) return Stmt(it->second, /*owned=*/false);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("prepare \"", sql, "\""));
  stmts_.emplace(sql, stmt);
  return Stmt(stmt, /*owned=*/false);
}

absl::StatusOr<Store::Stmt> Store::CachedDynamic(const std::string& sql) {
  auto it = dynamic_stmts_.find(sql);
  if (it != dynamic_stmts_.end()) return Stmt(it->second, /*owned=*/false);
  if (dynamic_stmts_.size() >= kMaxDynamicStmts) {
    for (auto& [text, stmt] : dynamic_stmts_) sqlite3_finalize(stmt);
    dynamic_stmts_.clear();
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt,
                              nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("prepare \"", sql.substr(0, 200), "\""));
  dynamic_stmts_.emplace(sql, stmt);
  return Stmt(stmt, /*owned=*/false);
}

absl::StatusOr<Store::Stmt> Store::PrepareOnce(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("prepare \"", sql, "\""));
  return Stmt(stmt, /*owned=*/true);
}

// ---- Key-value ----

absl::Status Store::PutValue(const std::string& key, const std::string& value) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kPutValue));
    Binder b(st.get());
    b.Text(key).Text(value);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind value");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("put value ", key));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::optional<std::string>> Store::GetValue(const std::string& key) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetValue));
  Binder b(st.get());
  b.Text(key);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind key");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get value ", key));
  return std::optional<std::string>(ColText(st.get(), 0));
}

// ---- Maintenance ----

absl::Status Store::WithConnection(const std::function<absl::Status(sqlite3*)>& fn) {
  mu_.lock();
  absl::Status status = fn(db_);
  mu_.UnlockAndHandOff(std::chrono::seconds(1));
  return status;
}

absl::Status Store::IntegrityCheck() {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kIntegrityCheck));
  std::vector<std::string> lines;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) lines.push_back(ColText(st.get(), 0));
  if (rc != SQLITE_DONE) return Error(rc, "integrity check");
  if (lines.size() == 1 && lines[0] == "ok") return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("integrity check of SQLite database ", path_, " failed: ", absl::StrJoin(lines, "; ")));
}

}  // namespace master
}  // namespace det
