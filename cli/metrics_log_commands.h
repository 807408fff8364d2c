// det-cli's metric and log commands (issue 15): trial logs with filters,
// experiment validation-history, master logs; and their registration on the
// `trial`, `experiment` and `master` subcommands.
#ifndef DET_CLI_METRICS_LOG_COMMANDS_H_
#define DET_CLI_METRICS_LOG_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "cli/commands.h"

namespace det::cli {

// The filters of `trial logs` (each empty/0: off).
struct TrialLogFilterArgs {
  bool follow = false;
  std::vector<int32_t> ranks;
  std::vector<std::string> levels;    // "info", "WARNING", "LOG_LEVEL_ERROR", ...
  std::vector<std::string> stdtypes;  // "stdout", "stderr"
  std::string grep;
  int32_t tail = 0;
  std::string since, until;  // RFC 3339 ("2026-11-24T09:00:00Z") or Unix seconds
  bool raw = false;          // print lines unescaped (CommandIo::raw)
};

// Builds the TrialLogsRequest of `args`; false (and why in *error) for an
// unknown level/stdtype or a malformed time.
bool TrialLogsRequestOf(int64_t trial_id, const TrialLogFilterArgs& args, det::api::v1::TrialLogsRequest* req,
                        std::string* error);

// Streams `req` to io.out, one FormatLog line (or JSON line) per log line.
grpc::Status StreamTrialLogs(Client& client, const det::api::v1::TrialLogsRequest& req, bool with_trial,
                             const CommandIo& io);
// The unfiltered form (experiment logs).
grpc::Status StreamTrialLogs(Client& client, int64_t trial_id, bool follow, bool with_trial, const CommandIo& io);

// trial logs ID [filters]: 2 for a bad filter.
int TrialLogs(Client& client, int64_t trial_id, const TrialLogFilterArgs& args, const CommandIo& io);
// experiment validation-history ID: the best-so-far validations.
int ExperimentValidationHistory(Client& client, int64_t experiment_id, const CommandIo& io);
// master logs [--follow] [--tail N] [--level L]... [--grep TEXT] (admins).
struct MasterLogArgs {
  bool follow = false;
  int32_t tail = 0;
  std::vector<std::string> levels;
  std::string grep;
  bool raw = false;  // print lines unescaped (CommandIo::raw)
};
int MasterLogs(Client& client, const MasterLogArgs& args, const CommandIo& io);

using CliCommand = std::function<int(Client&, const CommandIo&)>;
// Adds `trial logs`, `experiment validation-history` and `master logs` to
// app's existing `trial`, `experiment` and `master` subcommands (call after
// adding those); a parsed command stores what to run in *run. `id` and
// `json` are the command line's shared id argument and --json flag.
void AddMetricsLogCommands(CLI::App& app, int64_t* id, bool* json, CliCommand* run);

}  // namespace det::cli

#endif  // DET_CLI_METRICS_LOG_COMMANDS_H_
