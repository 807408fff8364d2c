#include "master/service/trial_log_cursor.h"

#include <utility>

#include "common/status_macros.h"

namespace det::master {

TrialLogCursor::TrialLogCursor(MasterCore* core, ::det::api::v1::TrialLogsRequest request)
    : core_(core), request_(std::move(request)), after_(request_.after_id()), skip_(request_.offset()) {}

absl::StatusOr<TrialLogCursor::Step> TrialLogCursor::Next() {
  while (true) {
    DET_ASSIGN_OR_RETURN(TrialLogsBatch read, core_->ReadTrialLogs(request_, after_, kBatch));
    Step step;
    bool limit_reached = false;
    for (auto& log : *read.logs.mutable_logs()) {
      after_ = log.id();
      if (skip_ > 0) {
        --skip_;
        continue;
      }
      if (request_.limit() > 0 && sent_ >= request_.limit()) {
        limit_reached = true;
        break;
      }
      *step.batch.add_logs() = std::move(log);
      ++sent_;
    }
    // After this batch, a reached limit ends the stream.
    if (step.batch.logs_size() > 0 || limit_reached) {
      step.done = limit_reached;
      return step;
    }
    if (read.logs.logs_size() == kBatch) continue;  // all skipped: read on
    step.done = !request_.follow() || read.trial_ended;
    step.wait = !step.done;
    return step;
  }
}

}  // namespace det::master
