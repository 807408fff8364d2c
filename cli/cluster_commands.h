// det-cli: resource pools, and agent and slot control (see cli/commands.h for
// the conventions every command follows).
//
//   det-cli resource-pool list
//   det-cli agent describe ID | enable ID | disable ID [--drain]
//   det-cli slot enable AGENT_ID SLOT_ID | disable AGENT_ID SLOT_ID [--drain]
//
// Enabling and disabling need an admin. Disable without --drain preempts the
// work running there (it checkpoints and moves); --drain lets it finish.
#ifndef DET_CLI_CLUSTER_COMMANDS_H_
#define DET_CLI_CLUSTER_COMMANDS_H_

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "cli/commands.h"

namespace det::cli {

// resource-pool list: POOL, DESCRIPTION, AGENTS, SLOTS (available / used),
// QUEUED (allocations waiting), DEFAULT, PRIORITY, PREEMPTION.
int ResourcePoolList(Client& client, const CommandIo& io);
// agent describe ID: the agent's fields, then one row per slot (enabled,
// draining, allocation, trial).
int AgentDescribe(Client& client, const std::string& agent_id, const CommandIo& io);
// agent enable ID | disable ID [--drain].
int AgentEnable(Client& client, const std::string& agent_id, bool enable, bool drain, const CommandIo& io);
// slot enable AGENT_ID SLOT_ID | disable AGENT_ID SLOT_ID [--drain].
int SlotEnable(Client& client, const std::string& agent_id, const std::string& slot_id, bool enable, bool drain,
               const CommandIo& io);

// Registers `resource-pool list` (a new top-level command) and `agent
// describe|enable|disable`, `slot enable|disable` under the app's existing
// "agent" and "slot" subcommands. When one is parsed, `set_run` receives
// what to run. Call once per app; the options live as long as the process.
void AddClusterControlCommands(CLI::App& app,
                               const std::function<void(std::function<int(Client&, const CommandIo&)>)>& set_run);

}  // namespace det::cli

#endif  // DET_CLI_CLUSTER_COMMANDS_H_
