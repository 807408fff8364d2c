// det-cli's experiment lifecycle commands: archive, unarchive, delete, wait,
// set name|description|labels and label add|remove (and the registration of
// set priority|weight|max-slots, which cli/job_commands.h runs). Each returns the process
// exit code as the commands of cli/commands.h do (0 success, 1 a failed RPC,
// 2 a usage error), except ExperimentWait (below).
//
// Not thread-safe: run one command at a time per Client.
#ifndef DET_CLI_EXPERIMENT_LIFECYCLE_COMMANDS_H_
#define DET_CLI_EXPERIMENT_LIFECYCLE_COMMANDS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cli/commands.h"

namespace CLI {
class App;
}  // namespace CLI

namespace det::cli {

// experiment archive ID / unarchive ID.
int ExperimentArchive(Client& client, int64_t experiment_id, bool archive, const CommandIo& io);

// experiment delete ID [--yes]: without `yes`, asks on `io.err` and reads the
// answer from `in` ("y" or "yes" deletes; anything else: nothing is done,
// exit 1). The master deletes in the background: prints that it is DELETING.
int ExperimentDelete(Client& client, int64_t experiment_id, bool yes, std::istream& in, const CommandIo& io);

// experiment set name|description|labels ID VALUE: one PatchExperiment.
// `field` is "name", "description" or "labels" (VALUE: comma-separated;
// "" removes every label).
int ExperimentSetField(Client& client, int64_t experiment_id, const std::string& field, const std::string& value,
                       const CommandIo& io);

// experiment label add|remove ID LABEL: the current labels plus / minus
// LABEL (adding one it has, or removing one it lacks, changes nothing).
int ExperimentLabel(Client& client, int64_t experiment_id, bool add, const std::string& label, const CommandIo& io);

struct WaitArgs {
  // Give up after this long (nullopt: never).
  std::optional<double> timeout_seconds;
  std::chrono::milliseconds poll_interval{500};
};

// experiment wait ID [--timeout S]: polls until the experiment is terminal
// and prints "Experiment ID <STATE>". Returns 0 for COMPLETED, 1 for any
// other terminal state (CANCELED, ERROR, or DELETING), 2 on a timeout or a
// failed RPC.
int ExperimentWait(Client& client, int64_t experiment_id, const WaitArgs& args, const CommandIo& io);

// Registers the commands above under `experiment` (which must already have
// its "set" subcommand); the one the user picks is stored in *run. The
// options live as long as the callbacks registered on `experiment`.
using LifecycleCommand = std::function<int(Client&, const CommandIo&)>;
void AddExperimentLifecycleCommands(CLI::App* experiment, LifecycleCommand* run);

}  // namespace det::cli

#endif  // DET_CLI_EXPERIMENT_LIFECYCLE_COMMANDS_H_
