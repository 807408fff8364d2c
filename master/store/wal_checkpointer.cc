#include "master/store/wal_checkpointer.h"

#include <pthread.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace det {
namespace master {
namespace {

constexpr int kMaxPages = 1000000;
constexpr int kBusyTimeoutMs = 10000;  // as the Store's connection

}  // namespace

absl::StatusOr<std::unique_ptr<WalCheckpointer>> WalCheckpointer::Start(const std::string& path, sqlite3* writer,
                                                                        Options options) {
  if (options.passive_pages < 1 || options.passive_pages > kMaxPages || options.truncate_pages < 1 ||
      options.truncate_pages > kMaxPages || options.truncate_pages < options.passive_pages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WAL checkpointer: passive_pages (", options.passive_pages, ") and truncate_pages (", options.truncate_pages,
        ") must be in [1, ", kMaxPages, "] with truncate_pages >= passive_pages"));
  }
  sqlite3* own = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &own, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = own != nullptr ? sqlite3_errmsg(own) : sqlite3_errstr(rc);
    sqlite3_close_v2(own);
    return absl::UnavailableError(
        absl::StrCat("cannot open SQLite database ", path, " for the WAL checkpointer: ", msg));
  }
  sqlite3_busy_timeout(own, kBusyTimeoutMs);
  // A connection that has read nothing has not opened the WAL yet, and its
  // checkpoints would do nothing (log and done -1): read once.
  rc = sqlite3_exec(own, "SELECT COUNT(*) FROM sqlite_master", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(own);
    sqlite3_close_v2(own);
    return absl::UnavailableError(absl::StrCat("cannot read SQLite database ", path, " for the WAL checkpointer: ", msg));
  }
  std::unique_ptr<WalCheckpointer> c(new WalCheckpointer(own, writer, options));
  c->thread_ = std::thread([p = c.get()] {
    pthread_setname_np(pthread_self(), "det-wal-ckpt");  // for top, perf and gdb
    p->Loop();
  });
  sqlite3_wal_hook(writer, &WalCheckpointer::OnCommit, c.get());
  return c;
}

WalCheckpointer::WalCheckpointer(sqlite3* own, sqlite3* writer, Options options)
    : own_(own), writer_(writer), options_(options) {}

WalCheckpointer::~WalCheckpointer() {
  sqlite3_wal_hook(writer_, nullptr, nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  sqlite3_close_v2(own_);
}

WalCheckpointer::Stats WalCheckpointer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// On the committing thread, after each commit: note and wake, nothing more.
int WalCheckpointer::OnCommit(void* self, sqlite3*, const char*, int pages) {
  auto* c = static_cast<WalCheckpointer*>(self);
  if (pages < c->options_.passive_pages) return SQLITE_OK;
  {
    std::lock_guard<std::mutex> lock(c->mu_);
    c->pending_pages_ = pages;
  }
  c->cv_.notify_one();
  return SQLITE_OK;
}

void WalCheckpointer::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || pending_pages_ > 0; });
    if (stopping_) return;
    pending_pages_ = 0;
    lock.unlock();
    int log = 0, done = 0;
    int rc = sqlite3_wal_checkpoint_v2(own_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    bool truncated = false;
    int trc = SQLITE_OK;
    // Readers that never let go of the WAL keep SQLite from starting it
    // over: past the bound, wait for them and empty it.
    if (rc == SQLITE_OK && log > options_.truncate_pages) {
      trc = sqlite3_wal_checkpoint_v2(own_, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &log, &done);
      truncated = true;
    }
    lock.lock();
    ++stats_.passive;
    if (truncated) ++stats_.truncate;
    for (int code : {rc, trc}) {
      // BUSY: the writer or a reader held a lock it needs; the next wake tries again.
      if ((code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED) {
        ++stats_.busy;
      } else if (code != SQLITE_OK) {
        ++stats_.failed;
      }
    }
    stats_.last_wal_pages = log;
  }
}

}  // namespace master
}  // namespace det
