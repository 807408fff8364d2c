// MasterLogRing: the master's own recent log lines in memory, for the
// MasterLogs RPC (det-cli master logs). det-master's main installs an spdlog
// sink (InstallMasterLogSink) that appends every line it logs.
#ifndef DET_MASTER_CORE_MASTER_LOG_RING_H_
#define DET_MASTER_CORE_MASTER_LOG_RING_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "det/api/v1/master.pb.h"

namespace det::master {

// Thread-safe. Keeps the last `max_lines` lines and at most `max_bytes` of
// message text (older lines are dropped first); each message is cut to 64 KiB.
class MasterLogRing {
 public:
  explicit MasterLogRing(size_t max_lines = 10000, size_t max_bytes = 16 << 20)
      : max_lines_(max_lines), max_bytes_(max_bytes) {}

  // The ring the spdlog sink feeds (one per process).
  static MasterLogRing& Global();

  // Appends one line; its id is the previous line's + 1 (from 1).
  void Append(int64_t time_ms, ::det::api::v1::LogLevel level, const std::string& message);

  // The lines with id > after_id that `req` selects (levels, search_text;
  // its tail/after_id/follow are the caller's), in id order, at most
  // `max_lines`.
  std::vector<::det::api::v1::MasterLogEntry> Read(const ::det::api::v1::MasterLogsRequest& req, int64_t after_id,
                                                   size_t max_lines) const;

  // The after_id that reads only the last `tail` (> 0) lines `req` selects
  // among those kept now (0 when fewer match).
  int64_t TailStart(const ::det::api::v1::MasterLogsRequest& req, int64_t tail) const;

 private:
  const size_t max_lines_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::deque<::det::api::v1::MasterLogEntry> lines_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

// Adds a sink to spdlog's default logger that appends every line it logs
// (at the logger's level) to MasterLogRing::Global(). Call once in main.
void InstallMasterLogSink();

}  // namespace det::master

#endif  // DET_MASTER_CORE_MASTER_LOG_RING_H_
