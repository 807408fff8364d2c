#include "master/service/method_access.h"

#include <string_view>

namespace det::master {
namespace {

struct Entry {
  std::string_view method;
  MethodAccess rule;
};

constexpr MethodAccess kPublicRule{Access::kPublic};
constexpr MethodAccess kUserRule{Access::kUser};
constexpr MethodAccess kAdminRule{Access::kAdmin};
constexpr MethodAccess kByExperiment{Access::kExperimentOwner, OwnedBy::kExperimentId, "experiment_id"};
constexpr MethodAccess kByTrial{Access::kExperimentOwner, OwnedBy::kTrialId, "trial_id"};
constexpr MethodAccess kByCheckpoints{Access::kExperimentOwner, OwnedBy::kCheckpointUuids, "checkpoint_uuids"};
constexpr MethodAccess kByJob{Access::kExperimentOwner, OwnedBy::kJobId, "job_id"};

constexpr Entry kTable[] = {
    // ---- master and session
    {"GetMaster", kPublicRule},
    {"Login", kPublicRule},
    {"Logout", kUserRule},
    {"GetMe", kUserRule},
    // ---- users (AuthCore checks the fields: admin for others, admin/active)
    {"GetUsers", kUserRule},
    {"PostUser", kAdminRule},
    {"PatchUser", {Access::kSelfOrAdmin}},
    // ---- experiments: reads and creation open to users, changes to owners
    {"UploadArtifact", kUserRule},
    {"CreateExperiment", kUserRule},
    {"GetExperiments", kUserRule},
    {"GetExperiment", kUserRule},
    {"PreviewSearch", kUserRule},
    {"GetExperimentTrials", kUserRule},
    {"GetExperimentCheckpoints", kUserRule},
    {"GetExperimentValidationHistory", kUserRule},
    {"ActivateExperiment", kByExperiment},
    {"PauseExperiment", kByExperiment},
    {"CancelExperiment", kByExperiment},
    {"KillExperiment", kByExperiment},
    {"ArchiveExperiment", kByExperiment},
    {"UnarchiveExperiment", kByExperiment},
    {"DeleteExperiment", kByExperiment},
    {"PatchExperiment", kByExperiment},
    // ---- trials, metrics, logs, checkpoints
    {"GetTrial", kUserRule},
    {"KillTrial", kByTrial},
    {"PauseTrial", kByTrial},
    {"ActivateTrial", kByTrial},
    {"GetTrialMetrics", kUserRule},
    {"StreamTrialMetrics", kUserRule},
    {"TrialLogs", kUserRule},
    {"GetTrialCheckpoints", kUserRule},
    {"GetCheckpoint", kUserRule},
    {"DeleteCheckpoints", kByCheckpoints},
    {"DownloadCheckpoint", kUserRule},
    {"PatchCheckpoint", {Access::kExperimentOwner, OwnedBy::kCheckpointUuids, "checkpoint_uuid"}},
    // ---- cluster: reads open, operations for admins; a user may reorder
    // their own jobs
    {"GetAgents", kUserRule},
    {"GetAgent", kUserRule},
    {"EnableAgent", kAdminRule},
    {"DisableAgent", kAdminRule},
    {"GetSlots", kUserRule},
    {"EnableSlot", kAdminRule},
    {"DisableSlot", kAdminRule},
    {"GetResourcePools", kUserRule},
    {"GetJobQueue", kUserRule},
    {"UpdateJob", kByJob},
    // ---- metrics and logs (issue 15): the master's own log is for admins
    {"MasterLogs", kAdminRule},
    // ---- backup (issue 47): the whole database, password hashes included
    {"BackupDatabase", kAdminRule},
    // ---- forks and continue (PauseTrial / ActivateTrial are above)
    {"ContinueExperiment", kByExperiment},
    // ---- workspaces and projects (issue 17): any user may create one (and
    // owns it) and read all; the core lets only its owner or an admin
    // archive or unarchive it (core/workspaces.cc)
    {"PostWorkspace", kUserRule},
    {"GetWorkspaces", kUserRule},
    {"GetWorkspace", kUserRule},
    {"GetWorkspaceProjects", kUserRule},
    {"PostProject", kUserRule},
    {"GetProject", kUserRule},
    {"ArchiveWorkspace", kUserRule},
    {"UnarchiveWorkspace", kUserRule},
    {"ArchiveProject", kUserRule},
    {"UnarchiveProject", kUserRule},
};

}  // namespace

MethodAccess AccessOf(absl::string_view method) {
  for (const Entry& e : kTable) {
    if (e.method == std::string_view(method.data(), method.size())) return e.rule;
  }
  return MethodAccess{};
}

}  // namespace det::master
