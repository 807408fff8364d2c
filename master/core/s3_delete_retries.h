// S3DeleteRetries: the master's bounded, in-memory list of S3 checkpoint
// deletes that failed (GC, DeleteCheckpoints, experiment delete; review
// M4a). The background pass retries the due ones outside MasterCore's mutex
// (MasterCore::RetryS3Deletes): at most kMaxPerPass per pass, and the pass
// stops at the first retry that fails. A failure also pauses every retry
// (1 min, doubling with each failure in a row up to 1 h; a success resets
// it), so a store that hangs costs the background thread one request's
// deadline (about 2 min) per pause, at most hourly in the end, however many
// entries are due; each entry
// first 1 min after its failure, then with its backoff doubled up to 1 h,
// read from the master's injected clock. An entry goes when its delete
// succeeds (objects gone, or already gone). The list is lost at a restart.
//
// An entry holds what re-resolves the client at retry time against the
// master's S3Profiles (the experiment's s3 config: bucket, prefix, profile
// name; its workspace), never a credential.
//
// Thread-safe (its own mutex; never held during S3 I/O).
#ifndef DET_MASTER_CORE_S3_DELETE_RETRIES_H_
#define DET_MASTER_CORE_S3_DELETE_RETRIES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/experiment_config.h"
#include "master/store/store.h"

namespace det::master {

struct S3DeleteRetry {
  CheckpointRow row;                // uuid, experiment_id and storage_path only
  CheckpointStorageConfig storage;  // the experiment's checkpoint_storage (type s3)
  std::string workspace;            // the experiment's workspace (for Resolve)
  int64_t due_mono_ms = 0;
  int64_t backoff_ms = 0;
};

class S3DeleteRetries {
 public:
  static constexpr size_t kMaxEntries = 10000;
  static constexpr int kMaxPerPass = 100;
  static constexpr int64_t kFirstBackoffMs = 60'000;
  static constexpr int64_t kMaxBackoffMs = 3'600'000;

  explicit S3DeleteRetries(size_t capacity = kMaxEntries) : capacity_(capacity) {}

  // A first failure: due at now + 1 min. One entry per uuid (a later Add of
  // a listed uuid is ignored). When full, the oldest entry is dropped and
  // its path logged.
  void Add(const CheckpointRow& row, const CheckpointStorageConfig& storage, const std::string& workspace,
           int64_t now_mono_ms);
  // Removes and returns up to `max` entries due at `now_mono_ms`, oldest
  // first; none while retries are paused (see Again).
  std::vector<S3DeleteRetry> TakeDue(int64_t now_mono_ms, int max);
  // A taken entry failed again: its backoff doubles (at most 1 h) and it is
  // due at now + backoff. Every retry pauses until now + the pause (1 min,
  // doubled by each failure since the last success, at most 1 h). Returns
  // the entry's backoff.
  int64_t Again(S3DeleteRetry entry, int64_t now_mono_ms);
  // A retry succeeded: the next failure pauses retries for 1 min again.
  void Succeeded();
  // A taken entry not tried (the pass stopped): back as it was, still due.
  void Restore(S3DeleteRetry entry);
  size_t size() const;

 private:
  void PushLocked(S3DeleteRetry entry);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<S3DeleteRetry> entries_;
  std::set<std::string> uuids_;  // of entries_
  int64_t pause_ms_ = 0;         // the last pause; 0 after a success
  int64_t paused_until_ms_ = 0;  // TakeDue returns nothing before
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_S3_DELETE_RETRIES_H_
