#include "master/service/trial_log_cursor.h"

#include <utility>

#include "common/status_macros.h"

namespace det::master {

TrialLogCursor::TrialLogCursor(MasterCore* core, ::det::api::v1::TrialLogsRequest request)
    : core_(core), request_(std::move(request)), after_(request_.after_id()), skip_(request_.offset()) {}

absl::StatusOr<TrialLogCursor::Step> TrialLogCursor::Next() {
  const int64_t limit = request_.limit();
  if (!started_) {
    // tail: start just before the last `tail` matching lines.
    DET_ASSIGN_OR_RETURN(after_, core_->TrialLogsStart(request_));
    started_ = true;
  }
  while (true) {
    DET_ASSIGN_OR_RETURN(TrialLogsBatch read, core_->ReadTrialLogs(request_, after_, kBatch));
    Step step;
    bool limit_reached = false, more = false;
    for (auto& log : *read.logs.mutable_logs()) {
      if (skip_ > 0) {
        after_ = log.id();
        --skip_;
        continue;
      }
      if (limit > 0 && sent_ >= limit) {
        limit_reached = more = true;
        break;
      }
      after_ = log.id();
      *step.batch.add_logs() = std::move(log);
      ++sent_;
    }
    if (!limit_reached && limit > 0 && sent_ >= limit) {
      // The limit fell on the last line read: is there more?
      limit_reached = true;
      if (read.logs.logs_size() == kBatch) {
        DET_ASSIGN_OR_RETURN(TrialLogsBatch peek, core_->ReadTrialLogs(request_, after_, 1));
        more = peek.logs.logs_size() > 0;
      }
    }
    if (step.batch.logs_size() > 0) step.batch.set_next_after_id(after_);
    // After this batch, a reached limit ends the stream.
    if (step.batch.logs_size() > 0 || limit_reached) {
      step.done = limit_reached;
      step.batch.set_more(more);
      return step;
    }
    if (read.logs.logs_size() == kBatch) continue;  // all skipped: read on
    step.done = !request_.follow() || read.trial_ended;
    step.wait = !step.done;
    return step;
  }
}

}  // namespace det::master
