// det-trial: runs one trial of a user's trial.so.
//
//   det-trial --local CONFIG.yaml TRIAL.so [--resume CHECKPOINT_DIR] [--output-dir DIR]
//   det-trial --managed TRIAL.so          (started by det-agent for the master)
//
// Local mode trains with no master: hyperparameters come from the config
// (const values; the first sampled value of search types), and metrics go to
// stdout and DIR/metrics.csv, checkpoints to the config's checkpoint_storage
// or DIR/checkpoints. SIGTERM (or Ctrl-C) finishes the current batch, writes a
// checkpoint and exits 0; --resume continues from it exactly.
//
// Exit codes: 0 completed or paused; 1 the trial failed; 2 bad usage or
// config; 3 the trial library cannot be used.
#include <unistd.h>

#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/experiment_config.h"
#include "common/hparams.h"
#include "trial_runtime/runtime/checkpoint.h"
#include "trial_runtime/runtime/local_reporter.h"
#include "trial_runtime/runtime/managed_mode.h"
#include "trial_runtime/runtime/process_setup.h"
#include "trial_runtime/runtime/trial_controller.h"
#include "trial_runtime/runtime/trial_loader.h"

namespace det::runtime {
namespace {

namespace fs = std::filesystem;

int Fail(int code, const absl::Status& status) {
  std::fprintf(stderr, "det-trial: error: %s\n", std::string(status.message()).c_str());
  return code;
}

struct Flags {
  bool local = false;
  std::string config_path;
  std::string trial_path;
  std::string resume;
  std::string output_dir = "det-output";
  std::string checkpoint_dir;
  std::string metrics_csv;
  int threads = 0;
  bool no_progress = false;
};

int RunLocal(const Flags& flags) {
  TuneAllocator();
  // The checkpoint to resume, if any, also supplies hparams and the seed.
  nlohmann::json resume_meta;
  if (!flags.resume.empty()) {
    auto meta = ReadCheckpointMetadata(flags.resume);
    if (!meta.ok()) return Fail(kExitConfigError, meta.status());
    resume_meta = *std::move(meta);
  }
  std::string config_path = flags.config_path;
  absl::StatusOr<ExperimentConfig> config_or =
      config_path.empty() && resume_meta.contains("config_yaml")
          ? ParseExperimentConfig(resume_meta["config_yaml"].get<std::string>(), flags.resume + "/metadata.json")
          : LoadExperimentConfigFile(config_path);
  if (!config_or.ok()) return Fail(kExitConfigError, config_or.status());
  ExperimentConfig config = *std::move(config_or);

  auto plugin = LoadTrialLibrary(flags.trial_path);
  if (!plugin.ok()) return Fail(kExitLibraryError, plugin.status());

  uint64_t seed;
  if (resume_meta.contains("trial_seed")) {
    seed = resume_meta["trial_seed"].get<uint64_t>();
  } else if (config.reproducibility.experiment_seed) {
    seed = *config.reproducibility.experiment_seed;
  } else {
    seed = std::random_device()() & 0x7fffffffu;
  }
  nlohmann::json hparams =
      resume_meta.contains("hparams") ? resume_meta["hparams"] : FirstHParams(config.hyperparameters, seed);
  if (!hparams.contains("global_batch_size") || !hparams["global_batch_size"].is_number_integer() ||
      hparams["global_batch_size"].get<int64_t>() <= 0) {
    return Fail(kExitConfigError,
                absl::InvalidArgumentError(absl::StrCat(flags.config_path,
                                                        ": hyperparameters.global_batch_size must be a positive "
                                                        "integer, got ",
                                                        hparams.value("global_batch_size", nlohmann::json()).dump())));
  }

  if (flags.threads > 0) torch::set_num_threads(flags.threads);
  torch::manual_seed(seed);

  TrialInfo info;
  info.hparams = hparams;
  info.experiment_config = config.raw;
  info.trial_seed = seed;
  info.global_batch_size = hparams["global_batch_size"].get<int64_t>();
  TrialContext context(info);

  std::string checkpoint_dir = flags.checkpoint_dir;
  if (checkpoint_dir.empty() && config.checkpoint_storage) {
    fs::path p = config.checkpoint_storage->host_path;
    if (!config.checkpoint_storage->storage_path.empty()) p /= config.checkpoint_storage->storage_path;
    checkpoint_dir = p.string();
  }
  if (checkpoint_dir.empty()) checkpoint_dir = (fs::path(flags.output_dir) / "checkpoints").string();
  std::string csv = flags.metrics_csv.empty() ? (fs::path(flags.output_dir) / "metrics.csv").string() : flags.metrics_csv;

  TrainingPlan plan;
  plan.max_length = config.searcher.max_length;
  plan.min_validation_period = config.min_validation_period;
  plan.min_checkpoint_period = config.min_checkpoint_period;
  plan.records_per_epoch = config.records_per_epoch;
  plan.scheduling_unit = config.scheduling_unit;
  plan.perform_initial_validation = config.perform_initial_validation;
  plan.searcher_metric = config.searcher.metric;
  plan.checkpoint_dir = checkpoint_dir;
  plan.checkpoint_metadata = {{"config_yaml", config.yaml_text}, {"trial_class", (*plugin)->trial_class}};

  InstallStopSignalHandlers();

  std::printf("[det-trial] trial %s from %s, seed %llu, %d torch threads, hparams %s\n", (*plugin)->trial_class,
              flags.trial_path.c_str(), static_cast<unsigned long long>(seed), torch::get_num_threads(),
              hparams.dump().c_str());
  std::fflush(stdout);

  auto handle = TrialHandle::Create(*plugin, &context);
  if (!handle.ok()) return Fail(kExitTrialError, handle.status());
  // Local reporter after the trial is built, so a failing constructor leaves
  // no metrics file behind.
  std::optional<int64_t> keep;
  if (!flags.resume.empty()) keep = resume_meta.value("batches_trained", int64_t{0});
  auto reporter = LocalReporter::Open(csv, !flags.no_progress && isatty(STDERR_FILENO), keep, config.searcher.metric,
                                     config.searcher.smaller_is_better);
  if (!reporter.ok()) return Fail(kExitTrialError, reporter.status());
  SignalPreemption preemption;
  auto controller = TrialController::Create(handle->get(), &context, reporter->get(), &preemption, plan);
  if (!controller.ok()) {
    return Fail(controller.status().code() == absl::StatusCode::kInvalidArgument ? kExitConfigError : kExitTrialError,
                controller.status());
  }
  if (!flags.resume.empty()) {
    absl::Status st = (*controller)->Restore(flags.resume);
    if (!st.ok()) return Fail(kExitTrialError, st);
    std::printf("[det-trial] resumed from %s at batch %lld\n", flags.resume.c_str(),
                static_cast<long long>((*controller)->batches_trained()));
  }
  auto outcome = (*controller)->Run();
  auto best = (*reporter)->best();
  reporter->reset();
  if (!outcome.ok()) return Fail(kExitTrialError, outcome.status());

  const TrialController& c = **controller;
  double secs = c.training_seconds();
  std::printf("[det-trial] training throughput: %.3f batches/s (%lld batches in %.3f s)\n",
              secs > 0 ? static_cast<double>(c.batches_this_run()) / secs : 0.0,
              static_cast<long long>(c.batches_this_run()), secs);
  const std::string ckpt = c.latest_checkpoint() ? c.latest_checkpoint()->path : "";
  if (*outcome == TrialOutcome::kPaused) {
    std::printf("[det-trial] paused at batch %lld; checkpoint %s\n[det-trial] resume with: det-trial --local %s %s --resume %s\n",
                static_cast<long long>(c.batches_trained()), ckpt.c_str(), flags.config_path.c_str(),
                flags.trial_path.c_str(), ckpt.c_str());
  } else {
    std::printf("[det-trial] completed %lld batches; checkpoint %s\n", static_cast<long long>(c.batches_trained()),
                ckpt.c_str());
    if (best) {
      std::printf("[det-trial] best validation %s: %.6g (batch %lld)\n", config.searcher.metric.c_str(), best->first,
                  static_cast<long long>(best->second));
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace det::runtime

int main(int argc, char** argv) {
  det::runtime::Flags flags;
  CLI::App app{"det-trial: runs one trial of a det-cpp trial.so"};
  bool managed = false;
  app.add_flag("--local", flags.local, "Train with no master (local mode)");
  app.add_flag("--managed", managed,
               "Run an allocation of the master (started by det-agent; reads DET_MASTER, DET_ALLOCATION_ID, "
               "DET_ALLOCATION_TOKEN, DET_RANK)");
  std::vector<std::string> positional;
  app.add_option("CONFIG TRIAL", positional,
                 "Experiment config (YAML) and trial library (trial.so); the config may be left out with --resume")
      ->required()
      ->expected(1, 2);
  app.add_option("--resume", flags.resume, "Checkpoint directory to continue from");
  app.add_option("--output-dir", flags.output_dir, "Where metrics.csv and (by default) checkpoints go")
      ->capture_default_str();
  app.add_option("--checkpoint-dir", flags.checkpoint_dir, "Checkpoint directory (overrides checkpoint_storage)");
  app.add_option("--metrics-csv", flags.metrics_csv, "Metrics history file (default OUTPUT_DIR/metrics.csv)");
  app.add_option("--threads", flags.threads, "LibTorch intra-op threads (default: LibTorch's)");
  app.add_flag("--no-progress", flags.no_progress, "No progress bar");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : det::runtime::kExitConfigError;
  }
  if (managed) {
    if (flags.local || positional.size() != 1) {
      std::fprintf(stderr, "det-trial: error: --managed takes exactly one argument, the trial library\n");
      return det::runtime::kExitConfigError;
    }
    return det::runtime::RunManaged(positional[0], flags.threads);
  }
  if (positional.size() == 2) {
    flags.config_path = positional[0];
    flags.trial_path = positional[1];
  } else if (!flags.resume.empty()) {
    flags.trial_path = positional[0];
  } else {
    std::fprintf(stderr, "det-trial: error: expected CONFIG and TRIAL arguments (CONFIG may be left out with --resume)\n");
    return det::runtime::kExitConfigError;
  }
  if (!flags.local) {
    std::fprintf(stderr, "det-trial: error: give --local (no master) or --managed (started by det-agent)\n");
    return det::runtime::kExitConfigError;
  }
  return det::runtime::RunLocal(flags);
}
