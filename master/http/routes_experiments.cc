// REST routes of experiments (rest_routes.h).
#include "master/http/rest_routes.h"

namespace det::master {

std::vector<RestRoute> ExperimentRoutes() {
  return {
      {"GET", "/api/v1/experiments", "GetExperiments"},
      {"POST", "/api/v1/experiments", "CreateExperiment", RestBody::kJson},
      {"POST", "/api/v1/experiments/preview", "PreviewSearch", RestBody::kJson},
      {"GET", "/api/v1/experiments/{experiment_id}", "GetExperiment"},
      {"PATCH", "/api/v1/experiments/{experiment_id}", "PatchExperiment", RestBody::kJson},
      {"DELETE", "/api/v1/experiments/{experiment_id}", "DeleteExperiment"},
      {"GET", "/api/v1/experiments/{experiment_id}/trials", "GetExperimentTrials"},
      // The best model (issue 45): ?sort_by=searcher_metric&limit=N lists
      // the N best first (smaller_is_better honoured; states=completed for
      // restorable ones). A page holds at most 1000 (also the default);
      // pagination.total says how many there are.
      {"GET", "/api/v1/experiments/{experiment_id}/checkpoints", "GetExperimentCheckpoints", RestBody::kNone, "",
       nullptr, "limit=1000"},
      {"GET", "/api/v1/experiments/{experiment_id}/validation-history", "GetExperimentValidationHistory"},
      {"POST", "/api/v1/experiments/{experiment_id}/activate", "ActivateExperiment"},
      {"POST", "/api/v1/experiments/{experiment_id}/pause", "PauseExperiment"},
      {"POST", "/api/v1/experiments/{experiment_id}/cancel", "CancelExperiment"},
      {"POST", "/api/v1/experiments/{experiment_id}/kill", "KillExperiment"},
      {"POST", "/api/v1/experiments/{experiment_id}/archive", "ArchiveExperiment"},
      {"POST", "/api/v1/experiments/{experiment_id}/unarchive", "UnarchiveExperiment"},
      {"POST", "/api/v1/experiments/{experiment_id}/continue", "ContinueExperiment", RestBody::kJson},
  };
}

}  // namespace det::master
