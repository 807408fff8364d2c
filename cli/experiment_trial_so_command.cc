#include "cli/experiment_trial_so_command.h"

#include <memory>

#include <CLI/CLI.hpp>

#include "cli/trial_abi_check.h"
#include "common/bounded_file.h"
#include "det/api/v1/api.grpc.pb.h"

namespace det::cli {

namespace v1 = ::det::api::v1;
using Stub = Client::Stub;

int ExperimentSetTrialSo(Client& client, const SetTrialSoArgs& args, const CommandIo& io) {
  absl::StatusOr<std::string> bytes =
      ReadBoundedFile(args.trial_path, kMaxTrialSoFileBytes, "TRIAL_SO '" + args.trial_path + "'");
  if (!bytes.ok()) {
    io.err << "det-cli: error: " << bytes.status().message() << '\n';
    return 2;
  }
  if (!args.no_local_abi_check) {
    const std::string det_trial = args.det_trial.empty() ? DetTrialBeside() : args.det_trial;
    if (int rc = CheckTrialAbiLocally(args.trial_path, det_trial, /*before_upload=*/true, io.err); rc != 0) return rc;
  }
  // As experiment create: the file name the master and the agents' errors use.
  const std::string so_name = TrialSoName(args.trial_path);
  std::string sha;
  grpc::Status status = UploadTrialSo(client, *bytes, &sha);
  if (!status.ok()) return ReportError(client, status, io.err);
  v1::PatchExperimentRequest req;
  req.set_experiment_id(args.experiment_id);
  req.set_trial_so_sha256(sha);
  req.set_trial_so_name(so_name);
  v1::PatchExperimentResponse resp;
  status = client.Call(&Stub::PatchExperiment, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << "Experiment " << args.experiment_id << " now runs " << so_name << " (sha256 " << sha
         << "); activate it to resume its trials from their checkpoints\n";
  return 0;
}

void AddExperimentSetTrialSoCommand(CLI::App* set, LifecycleCommand* run) {
  auto args = std::make_shared<SetTrialSoArgs>();
  auto* sub = set->add_subcommand(
      "trial-so", "Attach a trial.so rebuilt from the same source to a PAUSED experiment (e.g. after an upgrade)");
  sub->add_option("EXPERIMENT_ID", args->experiment_id, "Experiment id")->required();
  sub->add_option("TRIAL_SO", args->trial_path, "The rebuilt trial library")->required();
  sub->add_flag("--no-local-abi-check", args->no_local_abi_check,
                "Do not check TRIAL_SO against the libraries of the det-trial beside det-cli (the master still "
                "checks it against its agents')");
  sub->add_option("--det-trial", args->det_trial, "Check against the libraries this det-trial loads");
  sub->callback([args, run] {
    *run = [args](Client& c, const CommandIo& io) { return ExperimentSetTrialSo(c, *args, io); };
  });
}

}  // namespace det::cli
