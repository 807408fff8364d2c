// Who may change an experiment: its owner (the user who created it) or an
// admin. ApiHandlers enforces it for every owned RPC (method_access.h).
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"

namespace det::master {

absl::Status MasterCore::AuthorizeExperimentChange(const apiv1::User& user, int64_t experiment_id) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(experiment_id));
  if (user.admin() && user.active()) return absl::OkStatus();
  // Owners are matched by id where both are known (a user id is never
  // reused), else by name.
  const bool owner = !exp->row.owner.empty() && user.username() == exp->row.owner &&
                     (exp->owner_id == 0 || user.id() == exp->owner_id);
  if (owner && user.active()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "user '", user.username(), "' may not change experiment ", experiment_id, " (owner '",
      exp->row.owner.empty() ? "(none)" : exp->row.owner, "'); only its owner or an admin may"));
}

absl::StatusOr<int64_t> MasterCore::ExperimentOfTrial(int64_t trial_id) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(TrialRuntime * trial, FindTrial(trial_id));
  return trial->row.experiment_id;
}

absl::StatusOr<int64_t> MasterCore::ExperimentOfCheckpoint(const std::string& uuid) {
  auto row = store_->GetCheckpoint(uuid);
  if (absl::IsNotFound(row.status())) return absl::NotFoundError(absl::StrCat("checkpoint '", uuid, "' not found"));
  if (!row.ok()) return row.status();
  return row->experiment_id;
}

absl::StatusOr<int64_t> MasterCore::ExperimentOfJob(const std::string& job_id) {
  absl::string_view rest = job_id;
  int64_t id = 0;
  if (!absl::ConsumePrefix(&rest, "exp-") || !absl::SimpleAtoi(rest, &id) || id <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("job_id: '", job_id.substr(0, 64), "' is not a job id (exp-<id>)"));
  }
  return id;
}

}  // namespace det::master
