// det-cli: experiment fork / continue and trial pause / activate (see
// cli/commands.h for the conventions every command follows).
#ifndef DET_CLI_EXPERIMENT_FORK_COMMANDS_H_
#define DET_CLI_EXPERIMENT_FORK_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "cli/commands.h"

namespace det::cli {

// experiment fork ID [--config overrides.yaml] [--paused]: a new experiment
// from the parent's config with `overrides_path` (may be empty) deep-merged
// over it (cli/yaml_merge.h) and the parent's trial.so (by hash, not sent
// again), recording the parent. Prints "Forked experiment <id> from <parent>".
int ExperimentFork(Client& client, int64_t parent_id, const std::string& overrides_path, bool activate,
                   const CommandIo& io);

// experiment continue ID [--max-length N]: ContinueExperiment.
int ExperimentContinue(Client& client, int64_t experiment_id, std::optional<int64_t> max_length,
                       const CommandIo& io);

int TrialPause(Client& client, int64_t trial_id, const CommandIo& io);
int TrialActivate(Client& client, int64_t trial_id, const CommandIo& io);

using RunCommand = std::function<int(Client&, const CommandIo&)>;

// Registers `experiment fork|continue` and `trial pause|activate` under the
// app's existing "experiment" and "trial" subcommands. When one of them is
// parsed, `set_run` receives what to run (called with the parsed --json
// flag in CommandIo). Call once per app; the options live as long as the
// process.
void AddForkCommands(CLI::App& app, const std::function<void(RunCommand)>& set_run);

}  // namespace det::cli

#endif  // DET_CLI_EXPERIMENT_FORK_COMMANDS_H_
