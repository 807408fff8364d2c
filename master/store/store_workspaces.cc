// Store: the workspaces and projects tables (experiments.project_id is
// written by store_experiments.cc).
#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColInt;
using store_internal::ColText;

#define DET_WORKSPACE_SELECT                                                                   \
  "SELECT w.id, w.name, w.description, w.owner_id, COALESCE(u.username, ''), w.archived, "     \
  "w.immutable, w.created_ms, (SELECT COUNT(*) FROM projects p WHERE p.workspace_id = w.id) " \
  "FROM workspaces w LEFT JOIN users u ON u.id = w.owner_id "
#define DET_PROJECT_SELECT                                                                     \
  "SELECT p.id, p.workspace_id, w.name, p.name, p.description, p.owner_id, "                  \
  "COALESCE(u.username, ''), p.archived, p.immutable, p.created_ms "                           \
  "FROM projects p JOIN workspaces w ON w.id = p.workspace_id LEFT JOIN users u ON u.id = p.owner_id "

constexpr char kInsertWorkspace[] =
    "INSERT INTO workspaces(name, description, owner_id, archived, immutable, created_ms) VALUES (?, ?, ?, ?, ?, ?)";
constexpr char kGetWorkspace[] = DET_WORKSPACE_SELECT "WHERE w.id = ?";
constexpr char kFindWorkspace[] = DET_WORKSPACE_SELECT "WHERE w.name = ?";
constexpr char kListWorkspaces[] = DET_WORKSPACE_SELECT "ORDER BY w.id";
constexpr char kCountWorkspaces[] = "SELECT COUNT(*) FROM workspaces";
constexpr char kInsertProject[] =
    "INSERT INTO projects(workspace_id, name, description, owner_id, archived, immutable, created_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)";
constexpr char kGetProject[] = DET_PROJECT_SELECT "WHERE p.id = ?";
constexpr char kFindProject[] = DET_PROJECT_SELECT "WHERE p.workspace_id = ? AND p.name = ?";
// ?1: workspace id or NULL (any); ?2: name or '' (any).
constexpr char kListProjects[] = DET_PROJECT_SELECT
    "WHERE (?1 IS NULL OR p.workspace_id = ?1) AND (?2 = '' OR p.name = ?2) ORDER BY p.id";
constexpr char kCountProjects[] = "SELECT COUNT(*) FROM projects WHERE workspace_id = ?";
constexpr char kArchiveWorkspace[] = "UPDATE workspaces SET archived = ? WHERE id = ?";
constexpr char kArchiveProject[] = "UPDATE projects SET archived = ? WHERE id = ?";

WorkspaceRow ReadWorkspace(sqlite3_stmt* s) {
  WorkspaceRow w;
  w.id = ColInt(s, 0);
  w.name = ColText(s, 1);
  w.description = ColText(s, 2);
  w.owner_id = ColInt(s, 3);
  w.owner_name = ColText(s, 4);
  w.archived = ColInt(s, 5) != 0;
  w.immutable = ColInt(s, 6) != 0;
  w.created_ms = ColInt(s, 7);
  w.num_projects = ColInt(s, 8);
  return w;
}

ProjectRow ReadProject(sqlite3_stmt* s) {
  ProjectRow p;
  p.id = ColInt(s, 0);
  p.workspace_id = ColInt(s, 1);
  p.workspace_name = ColText(s, 2);
  p.name = ColText(s, 3);
  p.description = ColText(s, 4);
  p.owner_id = ColInt(s, 5);
  p.owner_name = ColText(s, 6);
  p.archived = ColInt(s, 7) != 0;
  p.immutable = ColInt(s, 8) != 0;
  p.created_ms = ColInt(s, 9);
  return p;
}

}  // namespace

absl::StatusOr<int64_t> Store::InsertWorkspace(const WorkspaceRow& row) {
  return Write([&]() -> absl::StatusOr<int64_t> {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertWorkspace));
    Binder b(st.get());
    b.Text(row.name).Text(row.description).Int(row.owner_id).Int(row.archived ? 1 : 0).Int(row.immutable ? 1 : 0);
    b.Int(row.created_ms);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind workspace");
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_CONSTRAINT_UNIQUE) {
      return absl::AlreadyExistsError(absl::StrCat("workspace '", row.name, "' already exists"));
    }
    if (rc != SQLITE_DONE) return Error(rc, "insert workspace");
    return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
  });
}

absl::StatusOr<WorkspaceRow> Store::GetWorkspace(int64_t id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetWorkspace));
  Binder b(st.get());
  b.Int(id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind workspace id");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("workspace ", id, " not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get workspace ", id));
  return ReadWorkspace(st.get());
}

absl::StatusOr<std::optional<WorkspaceRow>> Store::FindWorkspace(const std::string& name) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kFindWorkspace));
  Binder b(st.get());
  b.Text(name);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind workspace name");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return std::optional<WorkspaceRow>();
  if (rc != SQLITE_ROW) return Error(rc, "find workspace");
  return std::optional<WorkspaceRow>(ReadWorkspace(st.get()));
}

absl::StatusOr<std::vector<WorkspaceRow>> Store::ListWorkspaces() {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListWorkspaces));
  std::vector<WorkspaceRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadWorkspace(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list workspaces");
  return out;
}

absl::StatusOr<int64_t> Store::CountWorkspaces() {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kCountWorkspaces));
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, "count workspaces");
  return ColInt(st.get(), 0);
}

absl::StatusOr<int64_t> Store::InsertProject(const ProjectRow& row) {
  return Write([&]() -> absl::StatusOr<int64_t> {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertProject));
    Binder b(st.get());
    b.Int(row.workspace_id).Text(row.name).Text(row.description).Int(row.owner_id).Int(row.archived ? 1 : 0);
    b.Int(row.immutable ? 1 : 0).Int(row.created_ms);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind project");
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_CONSTRAINT_UNIQUE) {
      return absl::AlreadyExistsError(
          absl::StrCat("workspace ", row.workspace_id, " already has a project '", row.name, "'"));
    }
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
      return absl::FailedPreconditionError(absl::StrCat("workspace ", row.workspace_id, " not found"));
    }
    if (rc != SQLITE_DONE) return Error(rc, "insert project");
    return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
  });
}

absl::StatusOr<ProjectRow> Store::GetProject(int64_t id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetProject));
  Binder b(st.get());
  b.Int(id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind project id");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("project ", id, " not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get project ", id));
  return ReadProject(st.get());
}

absl::StatusOr<std::optional<ProjectRow>> Store::FindProject(int64_t workspace_id, const std::string& name) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kFindProject));
  Binder b(st.get());
  b.Int(workspace_id).Text(name);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind project name");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return std::optional<ProjectRow>();
  if (rc != SQLITE_ROW) return Error(rc, "find project");
  return std::optional<ProjectRow>(ReadProject(st.get()));
}

absl::StatusOr<std::vector<ProjectRow>> Store::ListProjects(std::optional<int64_t> workspace_id,
                                                            const std::string& name) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListProjects));
  int rc = workspace_id ? sqlite3_bind_int64(st.get(), 1, *workspace_id) : sqlite3_bind_null(st.get(), 1);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text64(st.get(), 2, name.data(), name.size(), SQLITE_STATIC, SQLITE_UTF8);
  if (rc != SQLITE_OK) return Error(rc, "bind project filter");
  std::vector<ProjectRow> out;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadProject(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list projects");
  return out;
}

absl::StatusOr<int64_t> Store::CountProjects(int64_t workspace_id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kCountProjects));
  Binder b(st.get());
  b.Int(workspace_id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind workspace id");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, "count projects");
  return ColInt(st.get(), 0);
}

absl::Status Store::SetWorkspaceArchived(int64_t id, bool archived) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kArchiveWorkspace));
    Binder b(st.get());
    b.Int(archived ? 1 : 0).Int(id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind workspace");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("archive workspace ", id));
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("workspace ", id, " not found"));
    return absl::OkStatus();
  });
}

absl::Status Store::SetProjectArchived(int64_t id, bool archived) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kArchiveProject));
    Binder b(st.get());
    b.Int(archived ? 1 : 0).Int(id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind project");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("archive project ", id));
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("project ", id, " not found"));
    return absl::OkStatus();
  });
}

}  // namespace master
}  // namespace det
