// Workspaces and projects: the name rules, where a new experiment goes, the
// GetExperiments filters (workspaces.h) and MasterCore's workspace and
// project RPCs.
#include "master/core/workspaces.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"

namespace det::master {
namespace {

// The length of the UTF-8 sequence at s[i] and its code point; 0 when it
// is not a valid (shortest-form, non-surrogate) sequence.
size_t Utf8At(const std::string& s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t v = n == 1 ? c : c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

// OK when `text` is valid UTF-8 without control characters (C0, DEL, C1)
// other than those in `allowed`.
absl::Status CheckText(const std::string& text, const std::string& field, const std::string& allowed) {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    size_t n = Utf8At(text, i, &cp);
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat(field, ": not valid UTF-8 (byte ", i, ")"));
    const bool control = cp < 0x20 || (cp >= 0x7F && cp <= 0x9F);
    if (control && allowed.find(static_cast<char>(cp)) == std::string::npos) {
      char code[8];
      std::snprintf(code, sizeof(code), "%04X", static_cast<unsigned>(cp));
      return absl::InvalidArgumentError(absl::StrCat(field, ": control character U+", code, " at byte ", i));
    }
    i += n;
  }
  return absl::OkStatus();
}

struct ProjectCounts {
  int32_t total = 0;
  int32_t active = 0;
};

// Experiments per project id (DELETING ones included until they are gone).
std::map<int64_t, ProjectCounts> CountByProject(const std::map<int64_t, std::unique_ptr<ExperimentRuntime>>& exps) {
  std::map<int64_t, ProjectCounts> out;
  for (const auto& [id, exp] : exps) {
    ProjectCounts& c = out[exp->row.project_id];
    c.total += 1;
    if (exp->row.state == kActive) c.active += 1;
  }
  return out;
}

apiv1::Project ProjectProto(const ProjectRow& p, const std::map<int64_t, ProjectCounts>& counts) {
  apiv1::Project out;
  out.set_id(static_cast<int32_t>(p.id));
  out.set_name(p.name);
  out.set_workspace_id(static_cast<int32_t>(p.workspace_id));
  out.set_workspace_name(p.workspace_name);
  out.set_description(p.description);
  out.set_archived(p.archived);
  out.set_immutable(p.immutable);
  out.set_user_id(static_cast<int32_t>(p.owner_id));
  out.set_username(p.owner_name);
  SetTime(out.mutable_created_time(), p.created_ms);
  auto it = counts.find(p.id);
  if (it != counts.end()) {
    out.set_num_experiments(it->second.total);
    out.set_num_active_experiments(it->second.active);
  }
  return out;
}

// `workspaces` with their experiment counts (each project with experiments
// looked up once).
absl::StatusOr<std::vector<apiv1::Workspace>> WorkspaceProtos(Store& store, const std::vector<WorkspaceRow>& rows,
                                                              const std::map<int64_t, ProjectCounts>& counts) {
  std::map<int64_t, int32_t> by_workspace;
  for (const auto& [project_id, c] : counts) {
    auto p = store.GetProject(project_id);
    if (p.ok()) by_workspace[p->workspace_id] += c.total;
  }
  std::vector<apiv1::Workspace> out;
  for (const WorkspaceRow& w : rows) {
    apiv1::Workspace& o = out.emplace_back();
    o.set_id(static_cast<int32_t>(w.id));
    o.set_name(w.name);
    o.set_description(w.description);
    o.set_archived(w.archived);
    o.set_immutable(w.immutable);
    o.set_user_id(static_cast<int32_t>(w.owner_id));
    o.set_username(w.owner_name);
    SetTime(o.mutable_created_time(), w.created_ms);
    o.set_num_projects(static_cast<int32_t>(w.num_projects));
    o.set_num_experiments(by_workspace[w.id]);
  }
  return out;
}

// Keeps rows [offset, offset + limit) (limit 0: all) and fills `page`.
template <typename T>
absl::Status Page(int32_t offset, int32_t limit, std::vector<T>* rows, apiv1::Pagination* page) {
  if (offset < 0) return absl::InvalidArgumentError("offset: must be >= 0");
  if (limit < 0) return absl::InvalidArgumentError("limit: must be >= 0");
  const int32_t total = static_cast<int32_t>(rows->size());
  const int32_t start = std::min(offset, total);
  const int32_t end = limit > 0 ? std::min(total, start + limit) : total;
  rows->erase(rows->begin() + end, rows->end());
  rows->erase(rows->begin(), rows->begin() + start);
  page->set_offset(offset);
  page->set_limit(limit);
  page->set_start_index(start);
  page->set_end_index(end);
  page->set_total(total);
  return absl::OkStatus();
}

// OK when `caller` may archive or unarchive `what` (owned by `owner_id`):
// its owner or an active admin; never the immutable defaults.
absl::Status CheckMayArchive(const apiv1::User& caller, int64_t owner_id, bool immutable, const std::string& what) {
  if (immutable) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " is the default one; it cannot be archived or unarchived"));
  }
  if ((caller.admin() && caller.active()) || (owner_id > 0 && caller.id() == owner_id)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("only the owner of ", what, " (user ", owner_id, ") or an admin may archive or unarchive it"));
}

}  // namespace

absl::Status ValidateWorkspaceName(const std::string& name, const std::string& field) {
  if (name.empty() || name.size() > kMaxWorkspaceNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be 1 to ", kMaxWorkspaceNameBytes, " bytes, not ", name.size()));
  }
  if (name.front() == ' ' || name.back() == ' ') {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not start or end with a space"));
  }
  return CheckText(name, field, "");
}

absl::Status ValidateWorkspaceDescription(const std::string& text, const std::string& field) {
  if (text.size() > kMaxWorkspaceDescriptionBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", kMaxWorkspaceDescriptionBytes, " bytes, not ", text.size()));
  }
  return CheckText(text, field, "\n\t");
}

absl::StatusOr<int64_t> ResolveExperimentProject(Store& store, const ExperimentConfig& config,
                                                 int64_t parent_project_id) {
  // As in Determined, an empty name is no name.
  const std::string workspace = config.workspace.value_or("");
  const std::string project = config.project.value_or("");
  if (workspace.empty() && project.empty()) return parent_project_id > 0 ? parent_project_id : kDefaultProjectId;
  if (workspace.empty() || project.empty()) {
    const char* missing = workspace.empty() ? "workspace" : "project";
    const char* given = workspace.empty() ? "project" : "workspace";
    return absl::InvalidArgumentError(absl::StrCat("config: field '", missing, "' is required when '", given,
                                                   "' is set (an experiment is placed by both, or by neither)"));
  }
  DET_RETURN_IF_ERROR(ValidateWorkspaceName(workspace, "config: field 'workspace'"));
  DET_RETURN_IF_ERROR(ValidateWorkspaceName(project, "config: field 'project'"));
  DET_ASSIGN_OR_RETURN(std::optional<WorkspaceRow> ws, store.FindWorkspace(workspace));
  if (!ws) {
    return absl::InvalidArgumentError(absl::StrCat("config: field 'workspace': no workspace named '", workspace,
                                                   "' (create it with det-cli workspace create)"));
  }
  if (ws->archived) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: field 'workspace': workspace '", workspace, "' is archived"));
  }
  DET_ASSIGN_OR_RETURN(std::optional<ProjectRow> p, store.FindProject(ws->id, project));
  if (!p) {
    return absl::InvalidArgumentError(absl::StrCat("config: field 'project': workspace '", workspace,
                                                   "' has no project named '", project,
                                                   "' (create it with det-cli project create)"));
  }
  if (p->archived) {
    return absl::InvalidArgumentError(absl::StrCat("config: field 'project': project '", project,
                                                   "' of workspace '", workspace, "' is archived"));
  }
  return p->id;
}

void SetExperimentPlacement(Store& store, int64_t project_id, apiv1::Experiment* e) {
  auto p = store.GetProject(project_id);
  if (!p.ok()) return;
  e->set_project_id(static_cast<int32_t>(p->id));
  e->set_project_name(p->name);
  e->set_workspace_id(static_cast<int32_t>(p->workspace_id));
  e->set_workspace_name(p->workspace_name);
}

absl::StatusOr<std::optional<std::set<int64_t>>> ExperimentProjectFilter(Store& store,
                                                                         const apiv1::GetExperimentsRequest& req) {
  if (req.workspace().empty() && req.project().empty() && req.project_id() == 0) return std::nullopt;
  std::optional<int64_t> workspace_id;
  if (!req.workspace().empty()) {
    DET_RETURN_IF_ERROR(ValidateWorkspaceName(req.workspace(), "workspace"));
    DET_ASSIGN_OR_RETURN(std::optional<WorkspaceRow> ws, store.FindWorkspace(req.workspace()));
    if (!ws) return absl::NotFoundError(absl::StrCat("workspace: no workspace named '", req.workspace(), "'"));
    workspace_id = ws->id;
  }
  if (!req.project().empty()) DET_RETURN_IF_ERROR(ValidateWorkspaceName(req.project(), "project"));
  std::vector<ProjectRow> projects;
  if (req.project_id() != 0) {
    auto p = store.GetProject(req.project_id());
    if (!p.ok()) return absl::NotFoundError(absl::StrCat("project_id: project ", req.project_id(), " not found"));
    projects.push_back(*p);
  } else {
    DET_ASSIGN_OR_RETURN(projects, store.ListProjects(workspace_id, req.project()));
    if (projects.empty() && !req.project().empty()) {
      return absl::NotFoundError(absl::StrCat("project: no project named '", req.project(), "'",
                                              workspace_id ? absl::StrCat(" in workspace '", req.workspace(), "'") : ""));
    }
  }
  std::set<int64_t> ids;
  for (const ProjectRow& p : projects) {
    if (workspace_id && p.workspace_id != *workspace_id) continue;
    if (!req.project().empty() && p.name != req.project()) continue;
    ids.insert(p.id);
  }
  return std::optional<std::set<int64_t>>(std::move(ids));
}

// ---- MasterCore's RPCs

absl::StatusOr<apiv1::PostWorkspaceResponse> MasterCore::PostWorkspace(const apiv1::PostWorkspaceRequest& req,
                                                                       const apiv1::User& owner) {
  DET_RETURN_IF_ERROR(ValidateWorkspaceName(req.name(), "name"));
  DET_RETURN_IF_ERROR(ValidateWorkspaceDescription(req.description(), "description"));
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(int64_t count, store_->CountWorkspaces());
  if (count >= kMaxWorkspaces) {
    return absl::ResourceExhaustedError(absl::StrCat("at most ", kMaxWorkspaces, " workspaces; none can be added"));
  }
  WorkspaceRow row;
  row.name = req.name();
  row.description = req.description();
  row.owner_id = owner.id();
  row.created_ms = WallMs();
  DET_ASSIGN_OR_RETURN(int64_t id, store_->InsertWorkspace(row));
  DET_ASSIGN_OR_RETURN(WorkspaceRow stored, store_->GetWorkspace(id));
  DET_ASSIGN_OR_RETURN(std::vector<apiv1::Workspace> protos, WorkspaceProtos(*store_, {stored}, {}));
  apiv1::PostWorkspaceResponse resp;
  *resp.mutable_workspace() = std::move(protos[0]);
  return resp;
}

absl::StatusOr<apiv1::GetWorkspacesResponse> MasterCore::GetWorkspaces(const apiv1::GetWorkspacesRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(std::vector<WorkspaceRow> rows, store_->ListWorkspaces());
  rows.erase(std::remove_if(rows.begin(), rows.end(),
                            [&](const WorkspaceRow& w) {
                              return (!req.name().empty() && w.name != req.name()) ||
                                     (req.has_archived() && w.archived != req.archived());
                            }),
             rows.end());
  apiv1::GetWorkspacesResponse resp;
  DET_RETURN_IF_ERROR(Page(req.offset(), req.limit(), &rows, resp.mutable_pagination()));
  DET_ASSIGN_OR_RETURN(std::vector<apiv1::Workspace> protos, WorkspaceProtos(*store_, rows, CountByProject(experiments_)));
  for (auto& w : protos) *resp.add_workspaces() = std::move(w);
  return resp;
}

absl::StatusOr<apiv1::GetWorkspaceResponse> MasterCore::GetWorkspace(const apiv1::GetWorkspaceRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(WorkspaceRow row, store_->GetWorkspace(req.id()));
  DET_ASSIGN_OR_RETURN(std::vector<apiv1::Workspace> protos, WorkspaceProtos(*store_, {row}, CountByProject(experiments_)));
  apiv1::GetWorkspaceResponse resp;
  *resp.mutable_workspace() = std::move(protos[0]);
  return resp;
}

absl::StatusOr<apiv1::GetWorkspaceProjectsResponse> MasterCore::GetWorkspaceProjects(
    const apiv1::GetWorkspaceProjectsRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_RETURN_IF_ERROR(store_->GetWorkspace(req.id()).status());
  DET_ASSIGN_OR_RETURN(std::vector<ProjectRow> rows, store_->ListProjects(req.id(), req.name()));
  rows.erase(std::remove_if(rows.begin(), rows.end(),
                            [&](const ProjectRow& p) { return req.has_archived() && p.archived != req.archived(); }),
             rows.end());
  apiv1::GetWorkspaceProjectsResponse resp;
  DET_RETURN_IF_ERROR(Page(req.offset(), req.limit(), &rows, resp.mutable_pagination()));
  const auto counts = CountByProject(experiments_);
  for (const ProjectRow& p : rows) *resp.add_projects() = ProjectProto(p, counts);
  return resp;
}

absl::StatusOr<apiv1::PostProjectResponse> MasterCore::PostProject(const apiv1::PostProjectRequest& req,
                                                                   const apiv1::User& owner) {
  DET_RETURN_IF_ERROR(ValidateWorkspaceName(req.name(), "name"));
  DET_RETURN_IF_ERROR(ValidateWorkspaceDescription(req.description(), "description"));
  std::lock_guard<std::mutex> l(mu_);
  auto workspace = store_->GetWorkspace(req.workspace_id());
  if (absl::IsNotFound(workspace.status())) {
    return absl::NotFoundError(absl::StrCat("workspace_id: workspace ", req.workspace_id(), " not found"));
  }
  DET_RETURN_IF_ERROR(workspace.status());
  if (workspace->archived) {
    return absl::FailedPreconditionError(absl::StrCat("workspace '", workspace->name, "' is archived"));
  }
  if (workspace->num_projects >= kMaxProjectsPerWorkspace) {
    return absl::ResourceExhaustedError(absl::StrCat("workspace '", workspace->name, "' has ",
                                                     kMaxProjectsPerWorkspace, " projects, the most it may hold"));
  }
  ProjectRow row;
  row.workspace_id = workspace->id;
  row.name = req.name();
  row.description = req.description();
  row.owner_id = owner.id();
  row.created_ms = WallMs();
  auto id = store_->InsertProject(row);
  if (absl::IsAlreadyExists(id.status())) {
    return absl::AlreadyExistsError(
        absl::StrCat("workspace '", workspace->name, "' already has a project named '", req.name(), "'"));
  }
  DET_RETURN_IF_ERROR(id.status());
  DET_ASSIGN_OR_RETURN(ProjectRow stored, store_->GetProject(*id));
  apiv1::PostProjectResponse resp;
  *resp.mutable_project() = ProjectProto(stored, {});
  return resp;
}

absl::StatusOr<apiv1::GetProjectResponse> MasterCore::GetProject(const apiv1::GetProjectRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(ProjectRow row, store_->GetProject(req.id()));
  apiv1::GetProjectResponse resp;
  *resp.mutable_project() = ProjectProto(row, CountByProject(experiments_));
  return resp;
}

absl::StatusOr<apiv1::ArchiveWorkspaceResponse> MasterCore::ArchiveWorkspace(
    const apiv1::ArchiveWorkspaceRequest& req, const apiv1::User& caller) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(WorkspaceRow w, store_->GetWorkspace(req.id()));
  DET_RETURN_IF_ERROR(CheckMayArchive(caller, w.owner_id, w.immutable, absl::StrCat("workspace '", w.name, "'")));
  DET_RETURN_IF_ERROR(store_->SetWorkspaceArchived(w.id, true));
  return apiv1::ArchiveWorkspaceResponse();
}

absl::StatusOr<apiv1::UnarchiveWorkspaceResponse> MasterCore::UnarchiveWorkspace(
    const apiv1::UnarchiveWorkspaceRequest& req, const apiv1::User& caller) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(WorkspaceRow w, store_->GetWorkspace(req.id()));
  DET_RETURN_IF_ERROR(CheckMayArchive(caller, w.owner_id, w.immutable, absl::StrCat("workspace '", w.name, "'")));
  DET_RETURN_IF_ERROR(store_->SetWorkspaceArchived(w.id, false));
  return apiv1::UnarchiveWorkspaceResponse();
}

absl::StatusOr<apiv1::ArchiveProjectResponse> MasterCore::ArchiveProject(const apiv1::ArchiveProjectRequest& req,
                                                                         const apiv1::User& caller) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(ProjectRow p, store_->GetProject(req.id()));
  DET_RETURN_IF_ERROR(CheckMayArchive(caller, p.owner_id, p.immutable, absl::StrCat("project '", p.name, "'")));
  DET_RETURN_IF_ERROR(store_->SetProjectArchived(p.id, true));
  return apiv1::ArchiveProjectResponse();
}

absl::StatusOr<apiv1::UnarchiveProjectResponse> MasterCore::UnarchiveProject(
    const apiv1::UnarchiveProjectRequest& req, const apiv1::User& caller) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(ProjectRow p, store_->GetProject(req.id()));
  DET_RETURN_IF_ERROR(CheckMayArchive(caller, p.owner_id, p.immutable, absl::StrCat("project '", p.name, "'")));
  DET_ASSIGN_OR_RETURN(WorkspaceRow w, store_->GetWorkspace(p.workspace_id));
  if (w.archived) {
    return absl::FailedPreconditionError(absl::StrCat("project '", p.name, "' is in archived workspace '", w.name,
                                                      "'; unarchive the workspace first"));
  }
  DET_RETURN_IF_ERROR(store_->SetProjectArchived(p.id, false));
  return apiv1::UnarchiveProjectResponse();
}

}  // namespace det::master
