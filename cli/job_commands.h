// det-cli's job queue commands (see cli/commands.h for the conventions every
// command follows: exit 0 success, 1 a failed RPC, 2 a usage error):
//
//   det-cli job list [--pool P] [--json]
//   det-cli job update JOB_ID [--priority N] [--weight W] [--max-slots N]
//                             [--ahead-of JOB | --behind JOB]
//   det-cli experiment set priority|weight|max-slots EXPERIMENT_ID VALUE
//
// A job is an experiment: JOB_ID is "exp-<id>" or just "<id>".
// Not thread-safe: run one command at a time per Client.
#ifndef DET_CLI_JOB_COMMANDS_H_
#define DET_CLI_JOB_COMMANDS_H_

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

// "exp-7" for "7" or "exp-7"; anything else is returned as given (the master
// answers INVALID_ARGUMENT naming the field).
std::string NormalizeJobId(const std::string& job);

// job list: every page of GetJobQueue (only pool `pool` when not empty) as a
// table in queue order per pool: position, job, experiment, name, user,
// pool, state, priority, weight, max slots, slots requested/allocated.
int JobList(Client& client, const std::string& pool, const CommandIo& io);

struct JobUpdateArgs {
  std::optional<int32_t> priority;
  std::optional<double> weight;
  std::optional<int32_t> max_slots;
  std::string ahead_of;  // a job id ("exp-3" or "3"); empty: not moved
  std::string behind;
};

// job update JOB_ID ...: one UpdateJob; prints the job's new place. Nothing
// to change is a usage error (2).
int JobUpdate(Client& client, const std::string& job, const JobUpdateArgs& args, const CommandIo& io);

// experiment set priority|weight|max-slots ID VALUE: UpdateJob of
// "exp-<ID>". `knob` is "priority", "weight" or "max-slots"; a VALUE that
// is not a number (an integer for priority and max-slots) is a usage error.
int ExperimentSetJobKnob(Client& client, int64_t experiment_id, const std::string& knob, const std::string& value,
                         const CommandIo& io);

// Registers `job list` and `job update` on `app`; `set_run` receives what
// to run when one of them is parsed. The options live as long as the
// callbacks registered on `app`.
using JobCommand = std::function<int(Client&, const CommandIo&)>;
void AddJobCommands(CLI::App& app, const std::function<void(JobCommand)>& set_run);

}  // namespace det::cli

#endif  // DET_CLI_JOB_COMMANDS_H_
