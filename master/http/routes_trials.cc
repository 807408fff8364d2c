// REST routes of trials, their metrics, logs and checkpoints (rest_routes.h).
#include "master/http/rest_routes.h"
#include "master/http/rest_tar.h"

namespace det::master {

std::vector<RestRoute> TrialRoutes() {
  return {
      {"GET", "/api/v1/trials/{trial_id}", "GetTrial"},
      {"POST", "/api/v1/trials/{trial_id}/kill", "KillTrial"},
      {"POST", "/api/v1/trials/{trial_id}/pause", "PauseTrial"},
      {"POST", "/api/v1/trials/{trial_id}/activate", "ActivateTrial"},
      {"GET", "/api/v1/trials/{trial_id}/metrics", "GetTrialMetrics"},
      {"GET", "/api/v1/trials/{trial_id}/checkpoints", "GetTrialCheckpoints"},
      // One page of existing lines (after_id, offset, limit: at most 1000,
      // also its default) in one TrialLogsResponse, whose next_after_id and
      // `more` say where the next page starts; POST /api/v1/TrialLogs
      // streams and follows.
      {"GET", "/api/v1/trials/{trial_id}/logs", "TrialLogs", RestBody::kNone, "follow=false", nullptr, "limit=1000"},
      {"GET", "/api/v1/checkpoints/{checkpoint_uuid}", "GetCheckpoint"},
      // Metrics and logs (issue 15): a trial's metric reports as
      // newline-delimited JSON as they are stored (follow=true to keep
      // going; after_id to resume).
      {"GET", "/api/v1/trials/{trial_id}/metrics/stream", "StreamTrialMetrics", RestBody::kNone, "", nullptr, "", true},
      // The checkpoint's files as a tar (rest_tar.h), streamed.
      {"GET", "/api/v1/checkpoints/{checkpoint_uuid}/download", "DownloadCheckpoint", RestBody::kNone, "", nullptr, "",
       false, ServeTar},
      {"PATCH", "/api/v1/checkpoints/{checkpoint_uuid}", "PatchCheckpoint", RestBody::kJson},
      {"DELETE", "/api/v1/checkpoints", "DeleteCheckpoints", RestBody::kJson},
  };
}

}  // namespace det::master
