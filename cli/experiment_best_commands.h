// det-cli's commands for an experiment's best model (issue 45, as
// Determined's `det experiment download --top-n`):
//   experiment list-checkpoints ID [--best N] [--json]
//   experiment download ID --top-n N -o DIR
// "Best" is the master's order for GetExperimentCheckpoints with sort_by
// SORT_BY_SEARCHER_METRIC (the experiment's searcher metric, honouring
// smaller_is_better; checkpoints without that metric last), among COMPLETED
// checkpoints. N is 1..1000. Each command returns the process exit code as
// the commands of cli/commands.h do (0 success, 1 a failed RPC or download,
// 2 a usage error). Not thread-safe: run one command at a time per Client.
#ifndef DET_CLI_EXPERIMENT_BEST_COMMANDS_H_
#define DET_CLI_EXPERIMENT_BEST_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cli/client.h"
#include "cli/commands.h"

namespace CLI {
class App;
}  // namespace CLI

namespace det::cli {

// The bound on --best and --top-n.
constexpr int kMaxBestCheckpoints = 1000;

// "" when 1 <= n <= kMaxBestCheckpoints; else the error, naming `flag`
// ("--best must be a whole number from 1 to 1000 ..., got 0").
std::string CheckBestCount(const std::string& flag, const std::string& value);

// experiment list-checkpoints ID --best N: the N best COMPLETED checkpoints,
// best first, as a table under a line naming the metric and its sense (or
// the response as protobuf JSON with io.json). Fewer when fewer exist.
int ExperimentListBestCheckpoints(Client& client, int64_t experiment_id, int best, const CommandIo& io);

// experiment download ID --top-n N -o DIR: downloads the N best COMPLETED
// checkpoints (as checkpoint download does, CheckpointDirWriter) into
// DIR/<uuid>/, printing for each its rank, trial, batches and metric and
// where it went. DIR is created when missing. A DIR/<uuid> that exists
// (even a symlink) is refused before anything is downloaded, never
// overwritten; a uuid from the master that is no RFC 4122 uuid is refused,
// so every path stays below DIR.
int ExperimentDownloadTopN(Client& client, int64_t experiment_id, int top_n, const std::string& dir,
                           const CommandIo& io);

// Option values of these commands; must outlive the CLI::App.
struct ExperimentBestArgs {
  int64_t id = 0;
  std::optional<int> best;
  int top_n = 0;
  std::string output_dir;
  bool json = false;
};

// Registers list-checkpoints (all checkpoints, or --best N) and download
// under `experiment`; `set_run` receives the command to run once parsing
// succeeded. A bad --best/--top-n is a parse error naming the flag.
void AddExperimentBestCommands(CLI::App* experiment, ExperimentBestArgs& args,
                               std::function<void(std::function<int(Client&, const CommandIo&)>)> set_run);

}  // namespace det::cli

#endif  // DET_CLI_EXPERIMENT_BEST_COMMANDS_H_
