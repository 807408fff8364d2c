// det-cli: workspace create|list, project create|list, and the filter of
// experiment list --workspace/--project.
#include "cli/workspace_commands.h"

#include <memory>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "cli/table.h"
#include "cli/terminal_text.h"
#include "common/utf8.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using Stub = Client::Stub;

constexpr int kPageSize = 1000;
// The master holds at most 10,000 of each (workspaces; projects per
// workspace): 10 pages, with a margin.
constexpr int kMaxPages = 20;

// Every page of GetWorkspaces for `req` into `all`.
grpc::Status FetchWorkspaces(Client& client, v1::GetWorkspacesRequest req, v1::GetWorkspacesResponse* all) {
  req.set_limit(kPageSize);
  for (int page = 0; page < kMaxPages; ++page) {
    v1::GetWorkspacesResponse resp;
    grpc::Status status = client.Call(&Stub::GetWorkspaces, req, &resp);
    if (!status.ok()) return status;
    for (auto& w : *resp.mutable_workspaces()) *all->add_workspaces() = std::move(w);
    *all->mutable_pagination() = resp.pagination();
    if (resp.pagination().end_index() >= resp.pagination().total() || resp.workspaces_size() == 0) break;
    req.set_offset(resp.pagination().end_index());
  }
  return grpc::Status::OK;
}

// Every project of workspace `id` appended to `all`.
grpc::Status FetchProjects(Client& client, int32_t id, v1::GetWorkspaceProjectsResponse* all) {
  v1::GetWorkspaceProjectsRequest req;
  req.set_id(id);
  req.set_limit(kPageSize);
  for (int page = 0; page < kMaxPages; ++page) {
    v1::GetWorkspaceProjectsResponse resp;
    grpc::Status status = client.Call(&Stub::GetWorkspaceProjects, req, &resp);
    if (!status.ok()) return status;
    for (auto& p : *resp.mutable_projects()) *all->add_projects() = std::move(p);
    if (resp.pagination().end_index() >= resp.pagination().total() || resp.projects_size() == 0) break;
    req.set_offset(resp.pagination().end_index());
  }
  return grpc::Status::OK;
}

// The workspace named `name`; NOT_FOUND naming it when there is none.
grpc::Status FindWorkspace(Client& client, const std::string& name, v1::Workspace* out) {
  v1::GetWorkspacesRequest req;
  req.set_name(Utf8Sanitized(name));
  v1::GetWorkspacesResponse resp;
  grpc::Status status = client.Call(&Stub::GetWorkspaces, req, &resp);
  if (!status.ok()) return status;
  if (resp.workspaces_size() == 0) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("workspace '", name, "' not found"));
  }
  *out = resp.workspaces(0);
  return grpc::Status::OK;
}

// The project named `name` of workspace `ws`; NOT_FOUND naming both.
grpc::Status FindProject(Client& client, const v1::Workspace& ws, const std::string& name, v1::Project* out) {
  v1::GetWorkspaceProjectsRequest req;
  req.set_id(ws.id());
  req.set_name(Utf8Sanitized(name));
  v1::GetWorkspaceProjectsResponse resp;
  grpc::Status status = client.Call(&Stub::GetWorkspaceProjects, req, &resp);
  if (!status.ok()) return status;
  if (resp.projects_size() == 0) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("workspace '", ws.name(), "' has no project named '", name, "'"));
  }
  *out = resp.projects(0);
  return grpc::Status::OK;
}

void SetPagination(int32_t n, v1::Pagination* p) {
  p->set_offset(0);
  p->set_limit(n);
  p->set_start_index(0);
  p->set_end_index(n);
  p->set_total(n);
}

}  // namespace

int WorkspaceCreate(Client& client, const std::string& name, const std::string& description, const CommandIo& io) {
  v1::PostWorkspaceRequest req;
  req.set_name(Utf8Sanitized(name));
  req.set_description(Utf8Sanitized(description));
  v1::PostWorkspaceResponse resp;
  grpc::Status status = client.Call(&Stub::PostWorkspace, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
  } else {
    io.out << "Created workspace " << resp.workspace().id() << " '" << TerminalText(resp.workspace().name()) << "'\n";
  }
  return 0;
}

int WorkspaceList(Client& client, const CommandIo& io) {
  v1::GetWorkspacesResponse all;
  grpc::Status status = FetchWorkspaces(client, v1::GetWorkspacesRequest(), &all);
  if (!status.ok()) return ReportError(client, status, io.err);
  SetPagination(all.workspaces_size(), all.mutable_pagination());
  if (io.json) {
    PrintJson(all, io.out);
    return 0;
  }
  Table t({"ID", "NAME", "PROJECTS", "EXPERIMENTS", "USER", "CREATED", "DESCRIPTION"});
  for (const auto& w : all.workspaces()) {
    t.AddRow({absl::StrCat(w.id()), w.name(), absl::StrCat(w.num_projects()), absl::StrCat(w.num_experiments()),
              w.username(), FormatTime(w.created_time()), w.description()});
  }
  t.Print(io.out);
  return 0;
}

int ProjectCreate(Client& client, const std::string& workspace, const std::string& name,
                  const std::string& description, const CommandIo& io) {
  v1::Workspace ws;
  grpc::Status status = FindWorkspace(client, workspace, &ws);
  if (!status.ok()) return ReportError(client, status, io.err);
  v1::PostProjectRequest req;
  req.set_workspace_id(ws.id());
  req.set_name(Utf8Sanitized(name));
  req.set_description(Utf8Sanitized(description));
  v1::PostProjectResponse resp;
  status = client.Call(&Stub::PostProject, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
  } else {
    io.out << "Created project " << resp.project().id() << " '" << TerminalText(resp.project().name()) << "' in workspace '"
           << TerminalText(resp.project().workspace_name()) << "'\n";
  }
  return 0;
}

int ProjectList(Client& client, const std::string& workspace, const CommandIo& io) {
  v1::GetWorkspacesResponse workspaces;
  grpc::Status status;
  if (workspace.empty()) {
    status = FetchWorkspaces(client, v1::GetWorkspacesRequest(), &workspaces);
  } else {
    status = FindWorkspace(client, workspace, workspaces.add_workspaces());
  }
  if (!status.ok()) return ReportError(client, status, io.err);
  v1::GetWorkspaceProjectsResponse all;
  for (const auto& w : workspaces.workspaces()) {
    status = FetchProjects(client, w.id(), &all);
    if (!status.ok()) return ReportError(client, status, io.err);
  }
  SetPagination(all.projects_size(), all.mutable_pagination());
  if (io.json) {
    PrintJson(all, io.out);
    return 0;
  }
  Table t({"ID", "WORKSPACE", "NAME", "EXPERIMENTS", "ACTIVE", "USER", "CREATED", "DESCRIPTION"});
  for (const auto& p : all.projects()) {
    t.AddRow({absl::StrCat(p.id()), p.workspace_name(), p.name(), absl::StrCat(p.num_experiments()),
              absl::StrCat(p.num_active_experiments()), p.username(), FormatTime(p.created_time()),
              p.description()});
  }
  t.Print(io.out);
  return 0;
}

int WorkspaceArchive(Client& client, const std::string& name, bool archive, const CommandIo& io) {
  v1::Workspace ws;
  grpc::Status status = FindWorkspace(client, name, &ws);
  if (status.ok() && archive) {
    v1::ArchiveWorkspaceRequest req;
    req.set_id(ws.id());
    v1::ArchiveWorkspaceResponse resp;
    status = client.Call(&Stub::ArchiveWorkspace, req, &resp);
  } else if (status.ok()) {
    v1::UnarchiveWorkspaceRequest req;
    req.set_id(ws.id());
    v1::UnarchiveWorkspaceResponse resp;
    status = client.Call(&Stub::UnarchiveWorkspace, req, &resp);
  }
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << (archive ? "Archived" : "Unarchived") << " workspace '" << TerminalText(ws.name()) << "'\n";
  return 0;
}

int ProjectArchive(Client& client, const std::string& workspace, const std::string& name, bool archive,
                   const CommandIo& io) {
  v1::Workspace ws;
  v1::Project project;
  grpc::Status status = FindWorkspace(client, workspace, &ws);
  if (status.ok()) status = FindProject(client, ws, name, &project);
  if (status.ok() && archive) {
    v1::ArchiveProjectRequest req;
    req.set_id(project.id());
    v1::ArchiveProjectResponse resp;
    status = client.Call(&Stub::ArchiveProject, req, &resp);
  } else if (status.ok()) {
    v1::UnarchiveProjectRequest req;
    req.set_id(project.id());
    v1::UnarchiveProjectResponse resp;
    status = client.Call(&Stub::UnarchiveProject, req, &resp);
  }
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << (archive ? "Archived" : "Unarchived") << " project '" << TerminalText(name) << "' of workspace '" << TerminalText(ws.name()) << "'\n";
  return 0;
}

v1::GetExperimentsRequest ExperimentsIn(const std::string& workspace, const std::string& project) {
  v1::GetExperimentsRequest req;
  req.set_workspace(workspace);
  req.set_project(project);
  return req;
}

void AddWorkspaceCommands(CLI::App& app, const std::function<void(WorkspaceCommand)>& set_run) {
  struct Options {
    std::string workspace;
    std::string name;
    std::string description;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  auto json = [o](const CommandIo& io) { return CommandIo{io.out, io.err, io.json || o->json}; };

  auto* workspace = app.add_subcommand("workspace", "Workspaces: groups of projects")->require_subcommand(1);
  auto* ws_create = workspace->add_subcommand("create", "Create a workspace (you own it)");
  ws_create->add_option("NAME", o->name, "Workspace name (unique, 1 to 128 bytes)")->required();
  ws_create->add_option("--description", o->description, "What it is for");
  ws_create->add_flag("--json", o->json, "Print the response as protobuf JSON");
  ws_create->callback([o, json, set_run] {
    set_run([o, json](Client& c, const CommandIo& io) { return WorkspaceCreate(c, o->name, o->description, json(io)); });
  });
  auto* ws_list = workspace->add_subcommand("list", "List workspaces");
  ws_list->add_flag("--json", o->json, "Print the response as protobuf JSON");
  ws_list->callback([json, set_run] {
    set_run([json](Client& c, const CommandIo& io) { return WorkspaceList(c, json(io)); });
  });

  for (bool archive : {true, false}) {
    auto* sub = workspace->add_subcommand(archive ? "archive" : "unarchive",
                                          archive ? "Archive a workspace (owner or admin): it takes nothing new"
                                                  : "Unarchive a workspace (owner or admin)");
    sub->add_option("NAME", o->name, "Workspace name")->required();
    sub->callback([o, json, set_run, archive] {
      set_run([o, json, archive](Client& c, const CommandIo& io) {
        return WorkspaceArchive(c, o->name, archive, json(io));
      });
    });
  }

  auto* project = app.add_subcommand("project", "Projects: groups of experiments in a workspace")->require_subcommand(1);
  auto* p_create = project->add_subcommand("create", "Create a project in a workspace (you own it)");
  p_create->add_option("WORKSPACE", o->workspace, "Workspace name")->required();
  p_create->add_option("NAME", o->name, "Project name (unique in its workspace, 1 to 128 bytes)")->required();
  p_create->add_option("--description", o->description, "What it is for");
  p_create->add_flag("--json", o->json, "Print the response as protobuf JSON");
  p_create->callback([o, json, set_run] {
    set_run([o, json](Client& c, const CommandIo& io) {
      return ProjectCreate(c, o->workspace, o->name, o->description, json(io));
    });
  });
  auto* p_list = project->add_subcommand("list", "List the projects of a workspace (default: of every workspace)");
  p_list->add_option("WORKSPACE", o->workspace, "Workspace name");
  p_list->add_flag("--json", o->json, "Print the response as protobuf JSON");
  p_list->callback([o, json, set_run] {
    set_run([o, json](Client& c, const CommandIo& io) { return ProjectList(c, o->workspace, json(io)); });
  });
  for (bool archive : {true, false}) {
    auto* sub = project->add_subcommand(archive ? "archive" : "unarchive",
                                        archive ? "Archive a project (owner or admin): it takes no new experiment"
                                                : "Unarchive a project (owner or admin)");
    sub->add_option("WORKSPACE", o->workspace, "Workspace name")->required();
    sub->add_option("NAME", o->name, "Project name")->required();
    sub->callback([o, json, set_run, archive] {
      set_run([o, json, archive](Client& c, const CommandIo& io) {
        return ProjectArchive(c, o->workspace, o->name, archive, json(io));
      });
    });
  }
}

}  // namespace det::cli
