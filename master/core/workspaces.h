// Workspaces and projects (Determined's groupings): a workspace groups
// projects, a project groups experiments. The rules for their names, where
// a new experiment goes, and the GetExperiments filters; the RPCs are
// MasterCore's (workspaces.cc). Pure functions of their arguments and the
// Store (thread-safe as the Store is).
#ifndef DET_MASTER_CORE_WORKSPACES_H_
#define DET_MASTER_CORE_WORKSPACES_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/experiment_config.h"
#include "det/api/v1/experiment.pb.h"
#include "master/store/store.h"

namespace det::master {

// Bounds (see workspace.proto).
inline constexpr size_t kMaxWorkspaceNameBytes = 128;
inline constexpr size_t kMaxWorkspaceDescriptionBytes = 4096;
inline constexpr int64_t kMaxWorkspaces = 10000;
inline constexpr int64_t kMaxProjectsPerWorkspace = 10000;
// The default workspace and project "Uncategorized" (store migration 7).
inline constexpr int64_t kDefaultWorkspaceId = 1;
inline constexpr int64_t kDefaultProjectId = 1;

// OK when `name` is 1 to 128 bytes of valid UTF-8 with no control character
// (C0, DEL, C1) and no leading or trailing space; else InvalidArgument
// starting with `field`.
absl::Status ValidateWorkspaceName(const std::string& name, const std::string& field);
// OK when `text` is at most 4096 bytes of valid UTF-8 with no control
// character but newline and tab; else InvalidArgument starting with `field`.
absl::Status ValidateWorkspaceDescription(const std::string& text, const std::string& field);

// The project a new experiment goes to: the config's `workspace` and
// `project` (both or neither; pre-existing, as in Determined), else
// `parent_project_id` when > 0 (a fork keeps its parent's project), else
// the default project. InvalidArgument naming the field (and the name) when
// only one is set, a name is malformed, or no such workspace / project
// exists.
absl::StatusOr<int64_t> ResolveExperimentProject(Store& store, const ExperimentConfig& config,
                                                 int64_t parent_project_id);

// Sets e's project_id, project_name, workspace_id and workspace_name from
// project `project_id` (left unset when it cannot be read).
void SetExperimentPlacement(Store& store, int64_t project_id, ::det::api::v1::Experiment* e);

// The projects GetExperiments' `workspace`, `project` and `project_id`
// select (all that are set must hold), or nullopt when none is set.
// NotFound naming the field and value for an unknown workspace, project
// name or project id.
absl::StatusOr<std::optional<std::set<int64_t>>> ExperimentProjectFilter(
    Store& store, const ::det::api::v1::GetExperimentsRequest& req);

}  // namespace det::master

#endif  // DET_MASTER_CORE_WORKSPACES_H_
