// TrialLogCursor: walks the lines a det.api.v1 TrialLogs request selects
// (after_id, offset, limit, tail, follow, and the filters) one batch at a time, for the gRPC stream
// (an alarm between waits) and the REST NDJSON stream (a blocking wait) alike.
#ifndef DET_MASTER_SERVICE_TRIAL_LOG_CURSOR_H_
#define DET_MASTER_SERVICE_TRIAL_LOG_CURSOR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "det/api/v1/log.pb.h"
#include "master/core/master_core.h"

namespace det::master {

// Not thread-safe: one caller at a time (a stream's own sequence of calls).
class TrialLogCursor {
 public:
  static constexpr int64_t kBatch = 1000;  // lines per message at most

  struct Step {
    // To send now (may be empty). A non-empty batch has next_after_id (its
    // last line's id); the last batch of a stream that `limit` ended has
    // `more` when lines remain after it.
    ::det::api::v1::TrialLogsResponse batch;
    bool done = false;  // nothing follows `batch`: the stream ends after it
    bool wait = false;  // nothing now (following): call Next again a bit later
  };

  // `core` is not owned and must outlive the cursor.
  TrialLogCursor(MasterCore* core, ::det::api::v1::TrialLogsRequest request);

  // The next step. Errors: those of MasterCore::ReadTrialLogs (NotFound for
  // an unknown trial).
  absl::StatusOr<Step> Next();

 private:
  MasterCore* const core_;
  const ::det::api::v1::TrialLogsRequest request_;
  int64_t after_;
  int64_t skip_;
  int64_t sent_ = 0;
  bool started_ = false;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_TRIAL_LOG_CURSOR_H_
