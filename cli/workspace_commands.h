// det-cli's workspace and project commands (see cli/commands.h for the
// conventions every command follows: exit 0 success, 1 a failed RPC, 2 a
// usage error):
//
//   det-cli workspace create NAME [--description TEXT] [--json]
//   det-cli workspace list [--json]
//   det-cli project create WORKSPACE NAME [--description TEXT] [--json]
//   det-cli project list [WORKSPACE] [--json]
//   det-cli workspace archive|unarchive NAME
//   det-cli project archive|unarchive WORKSPACE NAME
//   det-cli experiment list [--workspace W] [--project P]   (ExperimentsIn)
//
// Workspaces are named by their names (unique); a project by its workspace
// and its name. Not thread-safe: run one command at a time per Client.
#ifndef DET_CLI_WORKSPACE_COMMANDS_H_
#define DET_CLI_WORKSPACE_COMMANDS_H_

#include <functional>
#include <string>

#include "cli/client.h"
#include "cli/commands.h"

namespace CLI {
class App;
}  // namespace CLI

namespace det::cli {

// workspace create: PostWorkspace; prints "Created workspace ID 'NAME'".
int WorkspaceCreate(Client& client, const std::string& name, const std::string& description, const CommandIo& io);
// workspace list: every workspace (all pages) as a table: id, name,
// projects, experiments, user, created, description.
int WorkspaceList(Client& client, const CommandIo& io);
// project create: PostProject in the workspace named `workspace` (a
// workspace that does not exist is an error naming it, exit 1); prints
// "Created project ID 'NAME' in workspace 'WORKSPACE'".
int ProjectCreate(Client& client, const std::string& workspace, const std::string& name,
                  const std::string& description, const CommandIo& io);
// project list: the projects of the workspace named `workspace`, or of
// every workspace when it is empty, as a table: id, workspace, name,
// experiments, active, user, created, description.
int ProjectList(Client& client, const std::string& workspace, const CommandIo& io);

// workspace archive|unarchive NAME (`archive` false: unarchive); prints
// "Archived workspace 'NAME'" / "Unarchived ...".
int WorkspaceArchive(Client& client, const std::string& name, bool archive, const CommandIo& io);
// project archive|unarchive WORKSPACE NAME; a workspace or project that
// does not exist is an error naming it (exit 1).
int ProjectArchive(Client& client, const std::string& workspace, const std::string& name, bool archive,
                   const CommandIo& io);

// The GetExperiments filter of `experiment list --workspace W --project P`
// (empty strings: no filter); the master answers NOT_FOUND for an unknown
// name.
det::api::v1::GetExperimentsRequest ExperimentsIn(const std::string& workspace, const std::string& project);

// Registers `workspace create|list|archive|unarchive` and `project
// create|list|archive|unarchive` on `app`;
// `set_run` receives what to run when one of them is parsed. The options
// live as long as the callbacks registered on `app`.
using WorkspaceCommand = std::function<int(Client&, const CommandIo&)>;
void AddWorkspaceCommands(CLI::App& app, const std::function<void(WorkspaceCommand)>& set_run);

}  // namespace det::cli

#endif  // DET_CLI_WORKSPACE_COMMANDS_H_
