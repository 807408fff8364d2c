// det-cli's commands against the master: one function per command. Each
// calls the master through a Client, prints its result to `io.out` (human
// tables, or protobuf JSON with io.json) and returns the process exit code:
// 0 on success, 1 when an RPC failed (after printing
// "det-cli: error: <message> (<CODE>)" to `io.err`), 2 for a usage error.
//
// Not thread-safe: run one command at a time per Client.
#ifndef DET_CLI_COMMANDS_H_
#define DET_CLI_COMMANDS_H_

#include <optional>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

#include <grpcpp/grpcpp.h>

#include "cli/client.h"

namespace det::cli {

struct CommandIo {
  std::ostream& out;
  std::ostream& err;
  // Print the response message(s) as protobuf JSON instead of tables.
  bool json = false;
  // `out` is a terminal: progress is redrawn in place (follow_progress.h).
  bool out_is_terminal = false;
  // --raw of the log commands: log lines are printed as stored, control
  // characters included; otherwise as TerminalText (terminal_text.h).
  bool raw = false;
};

// Prints "det-cli: error: <client.ErrorMessage(status)>" to `err`; returns 1.
int ReportError(const Client& client, const grpc::Status& status, std::ostream& err);

// Writes `message` as protobuf JSON (proto field names, default values
// included; indented unless `pretty` is false) and a final newline: what
// every command prints with --json.
void PrintJson(const google::protobuf::Message& message, std::ostream& out, bool pretty = true);
// "2026-11-24 09:15:00" in the local time zone; "" for an unset timestamp.
std::string FormatTime(const google::protobuf::Timestamp& ts);
// "ACTIVE" for STATE_ACTIVE; "" for STATE_UNSPECIFIED.
std::string StateLabel(det::api::v1::State state);
// "%.6g".
std::string FormatDouble(double v);
// "a=1 b=2", metrics sorted by name.
std::string FormatMetrics(const google::protobuf::Map<std::string, double>& metrics);
// One log line as det-cli prints it: "[time] [trial N] [rank=R] LEVEL: text".
// The message is printed as TerminalText unless `raw`.
std::string FormatLog(const det::api::v1::TaskLog& log, bool with_trial, bool raw = false);

struct ExperimentCreateArgs {
  std::string config_path;
  std::string trial_path;
  // Start PAUSED instead of ACTIVE.
  bool paused = false;
  // Wait for the experiment to end (see ExperimentFollow).
  bool follow = false;
  std::chrono::milliseconds poll_interval{500};
  // Skip det-cli's own ABI check (cli/trial_abi_check.h) before the upload;
  // the master still checks. det_trial: whose libraries it checks against
  // ("" = the det-trial beside det-cli).
  bool no_local_abi_check = false;
  std::string det_trial;
};

// Uploads the trial.so `bytes` with UploadArtifact (in chunks); fills
// `sha256` on success.
grpc::Status UploadTrialSo(Client& client, const std::string& bytes, std::string* sha256);

// The name the master and the agents' errors use for the trial.so at
// `trial_path`: its file name's first 255 bytes, UTF-8 (proto3 strings must
// be: a Latin-1 name's bytes become '?'), control characters '?'.
std::string TrialSoName(const std::string& trial_path);

// experiment create CONFIG TRIAL.so [--follow] [--paused]: sends the config
// text and the trial.so bytes; prints "Created experiment <id>".
int ExperimentCreate(Client& client, const ExperimentCreateArgs& args, const CommandIo& io);

// Polls GetExperiment (and its trials) every `poll_interval`, printing state
// changes and trial progress, until the experiment is terminal. Returns 0 when
// COMPLETED, 1 when ERROR or CANCELED (or an RPC failed).
int ExperimentFollow(Client& client, int64_t experiment_id, std::chrono::milliseconds poll_interval,
                     const CommandIo& io);

// experiment list [--all]: unarchived experiments (of `filter`), or all with `all`.
int ExperimentList(Client& client, bool all, const CommandIo& io,
                   const det::api::v1::GetExperimentsRequest& filter = {});
int ExperimentDescribe(Client& client, int64_t experiment_id, const CommandIo& io);
// Logs of all the experiment's trials, trial by trial.
int ExperimentLogs(Client& client, int64_t experiment_id, const CommandIo& io);
int ExperimentListTrials(Client& client, int64_t experiment_id, const CommandIo& io);
// Also `checkpoint list EXPERIMENT_ID`.
int ExperimentListCheckpoints(Client& client, int64_t experiment_id, const CommandIo& io);

enum class ExperimentAction { kPause, kActivate, kCancel, kKill };
int ExperimentChangeState(Client& client, ExperimentAction action, int64_t experiment_id, const CommandIo& io);

// Sets the experiment's checkpoint GC policy; a count left unset keeps its
// current value. The master applies it at once to ended trials' checkpoints.
struct GcPolicyArgs {
  std::optional<int32_t> save_experiment_best;
  std::optional<int32_t> save_trial_best;
  std::optional<int32_t> save_trial_latest;
};
int ExperimentSetGcPolicy(Client& client, int64_t experiment_id, const GcPolicyArgs& args, const CommandIo& io);

int TrialDescribe(Client& client, int64_t trial_id, const CommandIo& io);
int TrialKill(Client& client, int64_t trial_id, const CommandIo& io);

int CheckpointDescribe(Client& client, const std::string& uuid, const CommandIo& io);

int AgentList(Client& client, const CommandIo& io);
// Slots of every agent, or of `agent_id` when non-empty.
int SlotList(Client& client, const std::string& agent_id, const CommandIo& io);
int MasterInfo(Client& client, const CommandIo& io);

// preview-search CONFIG: asks the master what the config's searcher would do
// (PreviewSearch) and prints its brackets, rungs and totals (and, with
// `show_trials`, every simulated trial). Nothing runs. 2 if CONFIG can't be
// read.
int PreviewSearch(Client& client, const std::string& config_path, bool show_trials, const CommandIo& io);

}  // namespace det::cli

#endif  // DET_CLI_COMMANDS_H_
