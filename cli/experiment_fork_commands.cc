#include "cli/experiment_fork_commands.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "cli/cli_errors.h"
#include "cli/terminal_text.h"
#include "cli/yaml_merge.h"
#include "common/bounded_file.h"
#include "det/api/v1/api.grpc.pb.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using Stub = Client::Stub;

// The largest overrides file read (the master bounds the merged config too).
constexpr int64_t kMaxOverridesBytes = 1 << 20;

}  // namespace

int ExperimentFork(Client& client, int64_t parent_id, const std::string& overrides_path, bool activate,
                   const CommandIo& io) {
  // A bad overrides file is an error before anything is asked of the master.
  std::string overrides;
  if (!overrides_path.empty()) {
    absl::StatusOr<std::string> text =
        ReadBoundedFile(overrides_path, kMaxOverridesBytes, absl::StrCat("overrides file '", overrides_path, "'"));
    if (!text.ok()) {
      io.err << "det-cli: error: " << text.status().message() << '\n';
      return 2;
    }
    overrides = *std::move(text);
    if (std::string bad = NotUtf8Error(overrides_path, overrides); !bad.empty()) {
      io.err << "det-cli: error: " << bad << '\n';
      return 2;
    }
  }
  v1::GetExperimentRequest get;
  get.set_experiment_id(parent_id);
  v1::GetExperimentResponse parent;
  grpc::Status status = client.Call(&Stub::GetExperiment, get, &parent);
  if (!status.ok()) return ReportError(client, status, io.err);
  v1::CreateExperimentRequest req;
  req.set_config_yaml(parent.experiment().config_yaml());
  if (!overrides_path.empty()) {
    auto merged = MergeYaml(req.config_yaml(), overrides, overrides_path);
    if (!merged.ok()) {
      io.err << "det-cli: error: " << merged.status().message() << '\n';
      return 2;
    }
    req.set_config_yaml(*merged);
  }
  req.set_trial_so_sha256(parent.experiment().trial_so().sha256());
  req.set_parent_id(parent_id);
  req.set_activate(activate);
  v1::CreateExperimentResponse resp;
  status = client.Call(&Stub::CreateExperiment, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  for (const auto& w : resp.warnings()) io.err << "det-cli: warning: " << TerminalText(w, kKeepLayout) << '\n';
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  io.out << "Forked experiment " << resp.experiment().id() << " from " << parent_id << '\n';
  return 0;
}

int ExperimentContinue(Client& client, int64_t experiment_id, std::optional<int64_t> max_length,
                       const CommandIo& io) {
  v1::ContinueExperimentRequest req;
  req.set_experiment_id(experiment_id);
  if (max_length) req.set_max_length(*max_length);
  v1::ContinueExperimentResponse resp;
  grpc::Status status = client.Call(&Stub::ContinueExperiment, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  io.out << "Continued experiment " << experiment_id << ": trial(s)";
  for (int64_t id : resp.trial_ids()) io.out << ' ' << id;
  io.out << " train on from their latest checkpoints\n";
  return 0;
}

int TrialPause(Client& client, int64_t trial_id, const CommandIo& io) {
  v1::PauseTrialRequest req;
  req.set_trial_id(trial_id);
  v1::PauseTrialResponse resp;
  grpc::Status status = client.Call(&Stub::PauseTrial, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << "Paused trial " << trial_id << '\n';
  return 0;
}

int TrialActivate(Client& client, int64_t trial_id, const CommandIo& io) {
  v1::ActivateTrialRequest req;
  req.set_trial_id(trial_id);
  v1::ActivateTrialResponse resp;
  grpc::Status status = client.Call(&Stub::ActivateTrial, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << "Activated trial " << trial_id << '\n';
  return 0;
}

void AddForkCommands(CLI::App& app, const std::function<void(RunCommand)>& set_run) {
  struct Args {
    int64_t id = 0;
    std::string overrides;
    bool paused = false;
    bool activate = false;
    std::optional<int64_t> max_length;
    bool json = false;
  };
  // Referenced by the callbacks for the life of the process.
  static Args* const a = new Args();
  CLI::App* experiment = app.get_subcommand("experiment");
  CLI::App* trial = app.get_subcommand("trial");

  auto* fork = experiment->add_subcommand("fork", "Create a new experiment from an experiment's config and trial.so");
  fork->add_option("EXPERIMENT_ID", a->id, "Parent experiment id")->required();
  fork->add_option("--config", a->overrides, "YAML merged over the parent's config (maps key by key)")
      ->check(ReadableFile());
  fork->add_flag("--paused", a->paused, "Create the new experiment PAUSED");
  fork->add_flag("--activate", a->activate, "Create the new experiment ACTIVE (the default)");
  fork->add_flag("--json", a->json, "Print the response as protobuf JSON");
  fork->callback([set_run] {
    set_run([](Client& c, const CommandIo& io) {
      if (a->paused && a->activate) {
        io.err << "det-cli: error: --paused and --activate exclude each other\n";
        return 2;
      }
      return ExperimentFork(c, a->id, a->overrides, !a->paused, CommandIo{io.out, io.err, a->json});
    });
  });

  auto* cont = experiment->add_subcommand("continue", "Train a terminal experiment's trials further");
  cont->add_option("EXPERIMENT_ID", a->id, "Experiment id")->required();
  cont->add_option("--max-length", a->max_length,
                   "New searcher length in the config's unit (max_length's or time_metric's; default for a single-trial "
                   "experiment: twice the config's)")
      ->check(CLI::PositiveNumber);
  cont->add_flag("--json", a->json, "Print the response as protobuf JSON");
  cont->callback([set_run] {
    set_run([](Client& c, const CommandIo& io) {
      return ExperimentContinue(c, a->id, a->max_length, CommandIo{io.out, io.err, a->json});
    });
  });

  auto* pause = trial->add_subcommand("pause", "Pause one trial (it checkpoints and frees its slots)");
  pause->add_option("TRIAL_ID", a->id, "Trial id")->required();
  pause->callback([set_run] { set_run([](Client& c, const CommandIo& io) { return TrialPause(c, a->id, io); }); });
  auto* activate = trial->add_subcommand("activate", "Activate a paused trial (it resumes from its checkpoint)");
  activate->add_option("TRIAL_ID", a->id, "Trial id")->required();
  activate->callback(
      [set_run] { set_run([](Client& c, const CommandIo& io) { return TrialActivate(c, a->id, io); }); });
}

}  // namespace det::cli
