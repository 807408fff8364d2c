// MasterCore: replacing the trial.so of a PAUSED experiment
// (PatchExperimentRequest.trial_so_sha256, `det-cli experiment set trial-so`).
// After an upgrade whose SDK ABI changed, or a restore whose artifacts were
// lost, the operator rebuilds the trial from the same source against the
// installed SDK and attaches it; the experiment then resumes from its
// checkpoints (docs/operations/upgrade.md).
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/safe_path.h"
#include "common/status_macros.h"
#include "master/core/artifact_store.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"

namespace det::master {

absl::Status MasterCore::CheckTrialSoReplaceableLocked(const ExperimentRuntime& exp) {
  const int64_t id = exp.row.id;
  if (exp.row.state != kPaused) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trial_so_sha256: experiment ", id, " is ", exp.row.state, "; only a PAUSED experiment's trial.so can be "
        "replaced (det-cli experiment pause ", id, ", wait until its trials stopped, then retry)"));
  }
  for (const auto& [alloc_id, alloc] : allocations_) {
    if (alloc->experiment_id != id) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "trial_so_sha256: experiment ", id, " is PAUSED but its trial ", alloc->trial_id, " still runs (allocation ",
        alloc_id, "); wait until it stopped (det-cli experiment describe ", id, ") and retry"));
  }
  return absl::OkStatus();
}

absl::Status MasterCore::CheckTrialSoStoredLocked(const ExperimentRuntime& exp) {
  if (artifacts_.Has(exp.row.trial_so_sha256)) return absl::OkStatus();
  const int64_t id = exp.row.id;
  return absl::FailedPreconditionError(absl::StrCat(
      "experiment ", id, "'s trial.so (sha256 ", exp.row.trial_so_sha256.substr(0, 64),
      ") is not in this master's artifact store (", options_.data_dir, "/artifacts), e.g. after an upgrade or a "
      "restore without the artifacts: rebuild the trial from the same source against this release's SDK and attach "
      "it with `det-cli experiment set trial-so ", id, " TRIAL_SO`, then activate it (docs/operations/upgrade.md)"));
}

absl::StatusOr<std::string> MasterCore::CheckReplacementTrialSo(const apiv1::PatchExperimentRequest& req) {
  const std::string& sha = req.trial_so_sha256();
  DET_RETURN_IF_ERROR(ValidateSha256(sha, "trial_so_sha256"));
  DET_ASSIGN_OR_RETURN(std::string so_name, ValidateTrialSoName(req.trial_so_name()));
  if (!artifacts_.Has(sha)) {
    return absl::NotFoundError(absl::StrCat("trial_so_sha256 ", sha,
                                            " was never uploaded: upload the trial.so with UploadArtifact first "
                                            "(det-cli experiment set trial-so does)"));
  }
  if (req.trial_so_name().empty()) so_name = artifacts_.Name(sha);
  std::string pool;
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(req.experiment_id()));
    DET_RETURN_IF_ERROR(CheckTrialSoReplaceableLocked(*exp));
    pool = exp->config.resources.resource_pool;
  }
  // The create-time ABI check, against the pool's agents.
  absl::StatusOr<std::vector<std::string>> warnings = CheckTrialAbiOnAgents(sha, so_name, pool);
  if (!warnings.ok()) {
    // As StoreTrialSo: an upload no agent can load is not kept unless used.
    std::lock_guard<std::mutex> l(mu_);
    RemoveArtifactIfUnusedLocked(sha);
    return warnings.status();
  }
  for (const auto& w : *warnings) spdlog::warn("experiment {}: trial.so {}: {}", req.experiment_id(), so_name, w);
  return so_name;
}

absl::StatusOr<std::string> MasterCore::ReplaceTrialSoLocked(ExperimentRuntime& exp, const std::string& sha256,
                                                             bool* unshared) {
  // Checked again: the experiment or the artifact may have changed since.
  DET_RETURN_IF_ERROR(CheckTrialSoReplaceableLocked(exp));
  if (!artifacts_.Has(sha256)) {
    return absl::UnavailableError(absl::StrCat("trial_so_sha256 ", sha256, " was deleted meanwhile; upload it again"));
  }
  DET_ASSIGN_OR_RETURN(int64_t others, store_->CountExperimentsWithArtifact(sha256, exp.row.id));
  *unshared = others == 0;
  std::string old = exp.row.trial_so_sha256;
  exp.row.trial_so_sha256 = sha256;
  return old;
}

void MasterCore::FinishTrialSoReplacement(const std::string& sha256, const std::string& so_name, bool unshared,
                                          const std::string& old_sha) {
  // Content-addressed: the name goes with the bytes, so it is only changed
  // when no other experiment's trial.so goes by it.
  if (unshared) {
    absl::Status st = artifacts_.SetName(sha256, so_name);
    if (!st.ok()) spdlog::warn("trial.so {}: not named {}: {}", sha256, so_name, st.ToString());
  }
  if (old_sha.empty() || old_sha == sha256) return;
  // Counted and removed under the lock (as DeletionStep): a CreateExperiment
  // naming these bytes meanwhile is counted or finds them gone.
  std::lock_guard<std::mutex> l(mu_);
  RemoveArtifactIfUnusedLocked(old_sha);
}

void MasterCore::RemoveArtifactIfUnusedLocked(const std::string& sha256) {
  if (sha256.empty() || !artifacts_.Has(sha256)) return;
  absl::StatusOr<int64_t> users = store_->CountExperimentsWithArtifact(sha256, 0);
  if (users.ok() && *users == 0) (void)artifacts_.Remove(sha256);
}

}  // namespace det::master
