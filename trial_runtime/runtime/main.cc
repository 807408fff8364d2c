// det-trial: runs one trial of a user's trial.so.
//
//   det-trial --local CONFIG.yaml TRIAL.so [--resume CHECKPOINT_DIR] [--output-dir DIR] [--nproc N]
//   det-trial --managed TRIAL.so          (started by det-agent for the master)
//   det-trial --prestart                  (det-agent's prestart pool: prestart_mode.h)
//
// Local mode trains with no master: hyperparameters come from the config
// (const values; the first sampled value of search types), and metrics go to
// stdout and DIR/metrics.csv, checkpoints to the config's checkpoint_storage
// or DIR/checkpoints. SIGTERM (or Ctrl-C) finishes the current batch, writes a
// checkpoint and exits 0; --resume continues from it exactly.
//
// --nproc N (N > 1) makes this process a launcher: it starts N ranks of
// itself on this machine (DET_RANK ... DET_CHIEF_PORT set as det-agent sets
// them), forwards SIGTERM/SIGINT to them and fails when any rank fails. A
// process started with DET_WORLD_SIZE > 1 joins that process group instead;
// only the chief (rank 0) writes metrics.csv and checkpoints.
//
// Exit codes: 0 completed or paused; 1 the trial failed; 2 bad usage or
// config; 3 the trial library cannot be used; 5 the trial's constructor or a
// data loader builder threw (common/exit_codes.h).
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>
#include <variant>

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/batch_lengths.h"
#include "common/experiment_config.h"
#include "spdlog/spdlog.h"
#include "common/hparams.h"
#include "trial_runtime/runtime/checkpoint.h"
#include "trial_runtime/runtime/distributed.h"
#include "trial_runtime/runtime/local_flags.h"
#include "trial_runtime/runtime/local_launcher.h"
#include "trial_runtime/runtime/local_reporter.h"
#include "trial_runtime/runtime/managed_mode.h"
#include "trial_runtime/runtime/prestart_mode.h"
#include "common/prestart_assignment.h"
#include "trial_runtime/runtime/process_setup.h"
#include "trial_runtime/runtime/s3_storage.h"
#include "trial_runtime/runtime/slurm_mode.h"
#include "trial_runtime/runtime/trial_controller.h"
#include "trial_runtime/runtime/trial_loader.h"
#include "trial_runtime/runtime/warm_start.h"

namespace det::runtime {
namespace {

namespace fs = std::filesystem;

int Fail(int code, const absl::Status& status) {
  std::fprintf(stderr, "det-trial: error: %s\n", std::string(status.message()).c_str());
  return code;
}

// What local mode derives from the flags before building the trial.
struct LocalSetup {
  nlohmann::json resume_meta;  // metadata.json of --resume, or null
  ExperimentConfig config;
  uint64_t seed = 0;
  nlohmann::json hparams;
  int64_t global_batch_size = 0;
};

// Exit code and error of a failed PrepareLocal.
struct SetupError {
  int code;
  absl::Status status;
};

std::variant<LocalSetup, SetupError> PrepareLocal(const Flags& flags) {
  LocalSetup setup;
  // The checkpoint to resume, if any, also supplies hparams and the seed.
  if (!flags.resume.empty()) {
    auto meta = ReadCheckpointMetadata(flags.resume);
    if (!meta.ok()) return SetupError{kExitConfigError, meta.status()};
    setup.resume_meta = *std::move(meta);
  }
  const nlohmann::json& resume_meta = setup.resume_meta;
  absl::StatusOr<ExperimentConfig> config_or =
      flags.config_path.empty() && resume_meta.contains("config_yaml")
          ? ParseExperimentConfig(resume_meta["config_yaml"].get<std::string>(), flags.resume + "/metadata.json")
          : LoadExperimentConfigFile(flags.config_path);
  if (!config_or.ok()) return SetupError{kExitConfigError, config_or.status()};
  setup.config = *std::move(config_or);
  if (setup.config.checkpoint_storage) {
    absl::Status st = CheckLocalCheckpointStorage(setup.config.checkpoint_storage->type, flags.checkpoint_dir);
    if (!st.ok()) return SetupError{kExitConfigError, st};
  }

  uint64_t flag_seed = 0;
  if (!flags.seed.empty() && !absl::SimpleAtoi(flags.seed, &flag_seed)) {
    return SetupError{kExitConfigError,
                      absl::InvalidArgumentError(absl::StrCat("--seed must be a non-negative integer, got '",
                                                              flags.seed, "'"))};
  }
  if (resume_meta.contains("trial_seed")) {
    setup.seed = resume_meta["trial_seed"].get<uint64_t>();
  } else if (!flags.seed.empty()) {
    setup.seed = flag_seed;
  } else if (setup.config.reproducibility.experiment_seed) {
    setup.seed = *setup.config.reproducibility.experiment_seed;
  } else {
    setup.seed = std::random_device()() & 0x7fffffffu;
  }
  setup.hparams = resume_meta.contains("hparams") ? resume_meta["hparams"]
                                                  : FirstHParams(setup.config.hyperparameters, setup.seed);
  const nlohmann::json& hparams = setup.hparams;
  // global_batch_size is optional (Determined 0.38): trials that ask their
  // context for it get an error there.
  if (!hparams.contains("global_batch_size")) return setup;
  if (!hparams["global_batch_size"].is_number_integer() || hparams["global_batch_size"].get<int64_t>() <= 0) {
    return SetupError{kExitConfigError,
                      absl::InvalidArgumentError(absl::StrCat(
                          flags.config_path, ": hyperparameters.global_batch_size must be a positive integer, got ",
                          hparams.value("global_batch_size", nlohmann::json()).dump()))};
  }
  setup.global_batch_size = hparams["global_batch_size"].get<int64_t>();
  return setup;
}

absl::Status CheckDivisible(int64_t global_batch_size, int world_size) {
  if (global_batch_size % world_size == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("hyperparameters.global_batch_size ", global_batch_size,
                                                 " is not divisible by the ", world_size,
                                                 " ranks (slots) of this trial"));
}

// Reports nothing: the non-chief ranks of a distributed trial.
class NullReporter final : public Reporter {
 public:
  absl::Status ReportTrainingMetrics(int64_t, double, const MetricsMap&) override { return absl::OkStatus(); }
  absl::Status ReportValidationMetrics(int64_t, double, const MetricsMap&) override { return absl::OkStatus(); }
  absl::Status ReportCheckpoint(const SavedCheckpoint&, int64_t) override { return absl::OkStatus(); }
};

// det-trial --local ... --nproc N: checks what all ranks would check alike
// (config, batch size, library), then starts the ranks.
int RunLauncher(const Flags& flags) {
  if (std::getenv("DET_WORLD_SIZE") != nullptr && std::string(std::getenv("DET_WORLD_SIZE")) != "" &&
      std::string(std::getenv("DET_WORLD_SIZE")) != "1") {
    return Fail(kExitConfigError, absl::InvalidArgumentError(
                                      "--nproc cannot be used in a process that already is a rank (DET_WORLD_SIZE "
                                      "is set)"));
  }
  auto prepared = PrepareLocal(flags);
  if (auto* e = std::get_if<SetupError>(&prepared)) return Fail(e->code, e->status);
  const LocalSetup& setup = std::get<LocalSetup>(prepared);
  absl::Status st = CheckDivisible(setup.global_batch_size, flags.nproc);
  if (!st.ok()) return Fail(kExitConfigError, st);
  auto plugin = LoadTrialLibrary(flags.trial_path);
  if (!plugin.ok()) return Fail(kExitLibraryError, plugin.status());

  std::error_code ec;
  std::string exe = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return Fail(kExitTrialError, absl::InternalError("cannot find det-trial's own executable"));
  int threads = flags.threads;
  if (threads <= 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / flags.nproc);
  std::vector<std::string> args = {"--local"};
  if (!flags.config_path.empty()) args.push_back(flags.config_path);
  args.push_back(flags.trial_path);
  // Every rank must agree on the seed: fix it here.
  args.insert(args.end(), {"--seed", std::to_string(setup.seed), "--threads", std::to_string(threads),
                           "--output-dir", flags.output_dir});
  if (!flags.resume.empty()) args.insert(args.end(), {"--resume", flags.resume});
  if (!flags.checkpoint_dir.empty()) args.insert(args.end(), {"--checkpoint-dir", flags.checkpoint_dir});
  if (!flags.metrics_csv.empty()) args.insert(args.end(), {"--metrics-csv", flags.metrics_csv});
  if (flags.no_progress) args.push_back("--no-progress");
  args.insert(args.end(), {"--device", flags.device});
  std::fflush(stdout);
  return LaunchLocalRanks(exe, args, flags.nproc);
}

// Prints a rank's error and returns `code`. In a distributed trial the
// error names the rank and the process exits at once with `code` (its peers'
// collectives fail and the launcher stops them).
int FailRank(const DistributedEnv& env, int code, const absl::Status& status) {
  if (!env.distributed()) return Fail(code, status);
  std::fprintf(stderr, "det-trial: error: rank %d: %s\n", env.rank, std::string(status.message()).c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
  return code;
}

// What the trial sees of itself in local mode (TrialContext), on the device
// --device names. InvalidArgument for an unusable device.
absl::StatusOr<TrialInfo> LocalTrialInfo(const Flags& flags, const LocalSetup& setup, const DistributedEnv& env) {
  TrialInfo info;
  info.hparams = setup.hparams;
  info.experiment_config = setup.config.raw;
  info.trial_seed = setup.seed;
  info.global_batch_size = setup.global_batch_size;
  info.distributed = env.context();
  auto device = SelectDevice(flags.device, info.distributed);
  if (!device.ok()) return device.status();
  info.device = *device;
  return info;
}

// Where checkpoints go: --checkpoint-dir, else the config's
// checkpoint_storage (host_path/storage_path; without host_path,
// OUTPUT_DIR/checkpoints/storage_path), else OUTPUT_DIR/checkpoints.
std::string LocalCheckpointDir(const Flags& flags, const ExperimentConfig& config) {
  std::string checkpoint_dir = flags.checkpoint_dir;
  if (checkpoint_dir.empty() && config.checkpoint_storage) {
    fs::path p = config.checkpoint_storage->host_path.empty() ? fs::path(flags.output_dir) / "checkpoints"
                                                               : fs::path(config.checkpoint_storage->host_path);
    if (!config.checkpoint_storage->storage_path.empty()) p /= config.checkpoint_storage->storage_path;
    checkpoint_dir = p.string();
  }
  if (checkpoint_dir.empty()) checkpoint_dir = (fs::path(flags.output_dir) / "checkpoints").string();
  return checkpoint_dir;
}

// Local mode sequences training, validation and checkpoints itself, from the
// config's lengths and periods.
TrainingPlan LocalTrainingPlan(const Flags& flags, const ExperimentConfig& config, const char* trial_class) {
  TrainingPlan plan;
  const SearcherLength length = SearcherLengthOf(config.searcher);
  if (length.is_metric()) {
    plan.time_metric = length.unit;
    plan.max_time = length.max;
  } else {
    plan.max_length = Length{*length.length_unit, length.max};
  }
  plan.min_validation_period = config.min_validation_period;
  plan.min_checkpoint_period = config.min_checkpoint_period;
  plan.records_per_epoch = config.records_per_epoch;
  plan.scheduling_unit = config.scheduling_unit;
  plan.perform_initial_validation = config.perform_initial_validation;
  plan.checkpoint_policy = config.checkpoint_policy;
  plan.smaller_is_better = config.searcher.smaller_is_better;
  plan.searcher_metric = config.searcher.metric;
  plan.checkpoint_dir = LocalCheckpointDir(flags, config);
  plan.checkpoint_metadata = {{"config_yaml", config.yaml_text}, {"trial_class", trial_class}};
  plan.profiling = config.profiling;
  return plan;
}

// The chief's first line: the trial, its seed, threads and hparams.
void PrintLocalBanner(const Flags& flags, const DistributedEnv& env, const LocalSetup& setup, const char* trial_class) {
  std::printf("[det-trial] trial %s from %s, seed %llu, %d torch threads%s, hparams %s\n", trial_class,
              flags.trial_path.c_str(), static_cast<unsigned long long>(setup.seed), torch::get_num_threads(),
              env.distributed() ? absl::StrCat(" per rank, ", env.world_size, " ranks").c_str() : "",
              setup.hparams.dump().c_str());
  std::fflush(stdout);
}

// The rank's reporter: the chief's LocalReporter (stdout, metrics.csv and a
// progress bar; when resuming, rows after the checkpoint's batch are
// dropped), also returned in *local_reporter; a NullReporter on the others.
absl::StatusOr<std::unique_ptr<Reporter>> OpenLocalReporter(const Flags& flags, const LocalSetup& setup, bool chief,
                                                            LocalReporter** local_reporter) {
  *local_reporter = nullptr;
  if (!chief) return std::make_unique<NullReporter>();
  std::string csv =
      flags.metrics_csv.empty() ? (fs::path(flags.output_dir) / "metrics.csv").string() : flags.metrics_csv;
  std::optional<int64_t> keep;
  if (!flags.resume.empty()) keep = setup.resume_meta.value("batches_trained", int64_t{0});
  auto reporter = LocalReporter::Open(csv, !flags.no_progress && isatty(STDERR_FILENO), keep,
                                      setup.config.searcher.metric, setup.config.searcher.smaller_is_better);
  if (!reporter.ok()) return reporter.status();
  *local_reporter = reporter->get();
  return std::unique_ptr<Reporter>(*std::move(reporter));
}

// The chief's last lines: throughput, then where it paused (with the command
// that resumes it) or what it completed and its best validation metric.
void PrintLocalResult(const Flags& flags, const DistributedEnv& env, const ExperimentConfig& config,
                      const TrialController& c, TrialOutcome outcome,
                      const std::optional<std::pair<double, int64_t>>& best) {
  double secs = c.training_seconds();
  std::printf("[det-trial] training throughput: %.3f batches/s (%lld batches in %.3f s)\n",
              secs > 0 ? static_cast<double>(c.batches_this_run()) / secs : 0.0,
              static_cast<long long>(c.batches_this_run()), secs);
  const std::string ckpt = c.latest_checkpoint() ? c.latest_checkpoint()->path : "";
  if (outcome == TrialOutcome::kPaused) {
    std::printf("[det-trial] paused at batch %lld; checkpoint %s\n[det-trial] resume with: %s\n",
                static_cast<long long>(c.batches_trained()), ckpt.c_str(),
                LocalResumeCommand(flags, env.world_size, ckpt).c_str());
  } else {
    std::printf("[det-trial] completed %lld batches; checkpoint %s\n", static_cast<long long>(c.batches_trained()),
                ckpt.c_str());
    if (best) {
      std::printf("[det-trial] best validation %s: %.6g (batch %lld)\n", config.searcher.metric.c_str(), best->first,
                  static_cast<long long>(best->second));
    }
  }
  std::fflush(stdout);
}

// A warm start of a local run (searcher.source_checkpoint_uuid: a
// checkpoint of an earlier local run): its model weights, before training.
// Returns 0, or the exit code after reporting why not.
int WarmStartLocal(const DistributedEnv& env, const ExperimentConfig& config, const std::string& checkpoint_dir,
                   TrialContext& context) {
  auto dir = LocalWarmStartDir(config, checkpoint_dir);
  if (!dir.ok()) return FailRank(env, kExitConfigError, dir.status());
  if (!dir->has_value()) return 0;
  absl::Status st = WarmStart(**dir, context, /*announce=*/env.rank == 0);
  if (!st.ok()) return FailRank(env, kExitTrialError, st);
  return 0;
}

// Builds the trial in `context`, its reporter and controller, restores
// --resume, trains to the end (or a pause) and prints the result. Returns the
// exit code.
int TrainLocal(const Flags& flags, const DistributedEnv& env, const LocalSetup& setup, const DetTrialPlugin* plugin,
               Distributed* dist, TrialContext& context) {
  const bool chief = env.rank == 0;
  if (setup.config.debug) {  // the config's debug: true raises the log level
    spdlog::set_level(spdlog::level::debug);
    spdlog::debug("[det-trial] debug logging on (config debug: true)");
  }
  if (chief) {  // fields that do not apply here, one line each
    for (const std::string& w : setup.config.warnings) std::fprintf(stderr, "det-trial: warning: %s\n", w.c_str());
  }
  TrainingPlan plan = LocalTrainingPlan(flags, setup.config, plugin->trial_class);
  InstallStopSignalHandlers();
  if (chief) PrintLocalBanner(flags, env, setup, plugin->trial_class);

  // The constructor or a data loader builder throwing (a missing data file)
  // exits kExitTrialSetupError, as on a cluster.
  auto handle = TrialHandle::Create(plugin, &context);
  if (!handle.ok()) return FailRank(env, kExitTrialSetupError, handle.status());
  // Local reporter after the trial is built, so a failing constructor leaves
  // no metrics file behind. Only the chief reports.
  LocalReporter* local_reporter = nullptr;
  auto reporter = OpenLocalReporter(flags, setup, chief, &local_reporter);
  if (!reporter.ok()) return FailRank(env, kExitTrialError, reporter.status());
  SignalPreemption preemption;
  auto controller = TrialController::Create(handle->get(), &context, reporter->get(), &preemption, plan, dist);
  if (!controller.ok()) {
    const absl::Status& st = controller.status();
    int code = st.code() == absl::StatusCode::kInvalidArgument ? kExitConfigError : kExitTrialError;
    if (IsTrialSetupError(st)) code = kExitTrialSetupError;
    return FailRank(env, code, st);
  }
  if (!flags.resume.empty()) {
    absl::Status st = (*controller)->Restore(flags.resume);
    if (!st.ok()) return FailRank(env, kExitTrialError, st);
    if (chief) {
      std::printf("[det-trial] resumed from %s at batch %lld\n", flags.resume.c_str(),
                  static_cast<long long>((*controller)->batches_trained()));
    }
  } else if (int rc = WarmStartLocal(env, setup.config, plan.checkpoint_dir, context); rc != 0) {
    return rc;
  }
  auto outcome = (*controller)->Run();
  std::optional<std::pair<double, int64_t>> best;
  if (local_reporter != nullptr) best = local_reporter->best();
  reporter->reset();
  if (!outcome.ok()) return FailRank(env, kExitTrialError, outcome.status());
  if (dist != nullptr) {
    absl::Status st = dist->Finish();
    if (!st.ok()) return FailRank(env, kExitTrialError, st);
  }
  if (!chief) return 0;
  PrintLocalResult(flags, env, setup.config, **controller, *outcome, best);
  return 0;
}

// det-trial --local without --nproc (or one rank started by the launcher):
// reads the rank's environment, checks the config and library, joins the
// process group of a distributed trial, then trains (TrainLocal).
int RunLocal(const Flags& flags) {
  TuneAllocator();
  auto env = ReadDistributedEnv();
  if (!env.ok()) return Fail(kExitConfigError, env.status());

  auto prepared = PrepareLocal(flags);
  if (auto* e = std::get_if<SetupError>(&prepared)) return FailRank(*env, e->code, e->status);
  const LocalSetup& setup = std::get<LocalSetup>(prepared);
  if (env->distributed()) {
    absl::Status st = CheckDivisible(setup.global_batch_size, env->world_size);
    if (!st.ok()) return FailRank(*env, kExitConfigError, st);
  }

  auto plugin = LoadTrialLibrary(flags.trial_path);
  if (!plugin.ok()) return FailRank(*env, kExitLibraryError, plugin.status());

  if (flags.threads > 0) torch::set_num_threads(flags.threads);
  torch::manual_seed(setup.seed);

  std::unique_ptr<Distributed> dist;
  if (env->distributed()) {
    auto joined = Distributed::Join(*env);
    if (!joined.ok()) return FailRank(*env, kExitTrialError, joined.status());
    dist = *std::move(joined);
  }

  auto info = LocalTrialInfo(flags, setup, *env);
  if (!info.ok()) return FailRank(*env, kExitConfigError, info.status());
  TrialContext context(*info);
  if (dist) context.set_gradient_reducer(dist->MakeGradientReducer());
  return TrainLocal(flags, *env, setup, *plugin, dist.get(), context);
}

}  // namespace
}  // namespace det::runtime

int main(int argc, char** argv) {
  // det-trial --prestart (det-agent's pool, prestart_mode.h): nothing else.
  if (argc == 2 && std::string(argv[1]) == det::kPrestartFlag) return det::runtime::RunPrestarted();
  det::runtime::Flags flags;
  CLI::App app{"det-trial: runs one trial of a det-cpp trial.so"};
  bool managed = false;
  std::string slurm_job_file;
  app.add_flag("--local", flags.local, "Train with no master (local mode)");
  app.add_flag("--managed", managed,
               "Run an allocation of the master (started by det-agent; reads DET_MASTER, DET_ALLOCATION_ID, "
               "DET_ALLOCATION_TOKEN_FD or DET_ALLOCATION_TOKEN, DET_RANK)");
  app.add_option("--slurm-job-file", slurm_job_file,
                 "With --managed: a rank of a Slurm job of det-master's Slurm resource manager (its job.json; rank "
                 "and world size from srun's SLURM_* variables)");
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
  app.add_option("--threads", flags.threads,
                 "LibTorch intra-op threads (per rank; default: LibTorch's, or cores / N with --nproc N)");
  app.add_option("--nproc", flags.nproc,
                 "Local mode: run the trial as N ranks on this machine (distributed training, like torchrun)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--seed", flags.seed, "Trial seed (default: the checkpoint's, else reproducibility.experiment_seed, "
                                       "else random)");
  app.add_flag("--no-progress", flags.no_progress, "No progress bar");
  app.add_option("--device", flags.device,
                 "Local mode: auto (a GPU when LibTorch sees one, else the CPU), cpu, cuda or cuda:N")
      ->capture_default_str();
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
    if (!slurm_job_file.empty()) return det::runtime::RunSlurmManaged(slurm_job_file, positional[0], flags.threads);
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
  if (flags.nproc > 1) return det::runtime::RunLauncher(flags);
  return det::runtime::RunLocal(flags);
}
