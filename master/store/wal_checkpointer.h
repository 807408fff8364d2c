// WalCheckpointer: WAL checkpoints off the metric writer's path (issue 50).
//
// SQLite's default checkpoints the WAL inside the COMMIT that takes it past
// 1000 pages, on the committing connection: the master's one writer paid for
// every checkpoint while every metric report waited behind it. The Store
// turns that off (PRAGMA wal_autocheckpoint=0) and installs this class's WAL
// hook on its connection: a commit only notes the WAL's page count and, past
// `passive_pages`, wakes this class's thread, which checkpoints on a
// connection of its own:
//   - PASSIVE (never waits for, nor blocks, the writer or readers) when the
//     WAL passes `passive_pages` (4000 by default, 16 MiB);
//   - TRUNCATE (waits, through the busy timeout, for readers on old
//     snapshots, blocking the writer meanwhile) when the WAL holds more than
//     `truncate_pages` frames after that (readers kept SQLite from starting
//     it over): the bound on the -wal file however busy the readers are.
// The Store also sets journal_size_limit, so that the -wal file shrinks back
// when SQLite starts it over.
//
// Thread-safe. The destructor stops the thread and closes its connection;
// it must run before the Store closes its own (the last connection to close
// checkpoints what is left).
#ifndef DET_MASTER_STORE_WAL_CHECKPOINTER_H_
#define DET_MASTER_STORE_WAL_CHECKPOINTER_H_

#include <sqlite3.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace det {
namespace master {

class WalCheckpointer {
 public:
  struct Options {
    // Wake the thread past this many WAL pages (16 MiB of 4 KiB pages; SQLite's
    // default threshold is 1000). Fewer checkpoints copy the pages every commit
    // rewrites (each b-tree's last leaf) fewer times, with one fsync each:
    // ingestion from a trial's report queue 1.1x faster than at 1000
    // (docs/benchmarks.md, control plane).
    int passive_pages = 4000;
    int truncate_pages = 16000;  // TRUNCATE when the WAL holds more than this (64 MiB of 4 KiB pages)
  };
  struct Stats {
    int64_t passive = 0;   // PASSIVE checkpoints run
    int64_t truncate = 0;  // TRUNCATE checkpoints run
    int64_t busy = 0;      // checkpoints that found a lock taken (tried again at the next wake)
    int64_t failed = 0;    // checkpoints that returned another error
    int last_wal_pages = 0;
  };

  // Opens a second connection to `path` (WAL mode already set) and starts the
  // thread; installs the WAL hook on `writer` (the Store's connection, used
  // only by the thread that commits on it). InvalidArgument for options out
  // of [1, 1,000,000] or truncate_pages < passive_pages; Unavailable naming
  // `path` when the connection cannot be opened.
  static absl::StatusOr<std::unique_ptr<WalCheckpointer>> Start(const std::string& path, sqlite3* writer,
                                                                Options options);
  ~WalCheckpointer();
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

  Stats stats() const;

 private:
  WalCheckpointer(sqlite3* own, sqlite3* writer, Options options);
  static int OnCommit(void* self, sqlite3* db, const char* schema, int pages);
  void Loop();

  sqlite3* const own_;     // the thread's connection
  sqlite3* const writer_;  // whose hook this is
  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int pending_pages_ = 0;  // the WAL's pages at the last commit past the threshold; 0: nothing to do
  bool stopping_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_WAL_CHECKPOINTER_H_
