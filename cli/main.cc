// det-cli: the command-line client of the det-cpp master (CLI11 wiring only;
// the commands live in commands.cc).
//
//   det-cli [-m HOST:PORT] experiment create CONFIG TRIAL.so [--follow] [--paused] [--no-local-abi-check]
//   det-cli experiment create --local CONFIG TRIAL.so [--resume DIR] [det-trial options]
//   det-cli experiment list|describe|logs|list-trials|list-checkpoints|pause|activate|cancel|kill ...
//   det-cli experiment list-checkpoints ID --best N | download ID --top-n N -o DIR
//   det-cli experiment set gc-policy ID [--save-experiment-best N] [--save-trial-best N] [--save-trial-latest N]
//   det-cli experiment archive|unarchive|delete [--yes]|wait [--timeout S] ID
//   det-cli experiment set name|description|labels ID VALUE | label add|remove ID LABEL
//   det-cli experiment set priority|weight|max-slots ID VALUE
//   det-cli job list [--pool P] | update JOB_ID [--priority N] [--weight W] [--max-slots N] [--ahead-of|--behind JOB]
//   det-cli trial describe|logs|metrics|profile|kill|pause|activate ID
//   det-cli trial new NAME [--dir DIR]   (a trial project from examples/minimal; no master)
//   det-cli experiment fork ID [--config overrides.yaml] [--paused] | continue ID [--max-length N]
//   det-cli checkpoint list EXPERIMENT_ID | describe UUID | download UUID -o DIR | delete UUID... [--yes]
//   det-cli checkpoint set-metadata UUID key=value... [--remove KEY]
//   det-cli agent list | slot list | master info | master backup FILE [--force]
//   det-cli resource-pool list | agent describe|enable|disable [--drain] | slot enable|disable [--drain]
//   det-cli user login [USERNAME] [--password-stdin] | logout | whoami | list
//   det-cli workspace create NAME | list | archive|unarchive NAME
//   det-cli project create WORKSPACE NAME | list [WORKSPACE] | archive|unarchive WORKSPACE NAME
//   det-cli user create NAME [--admin] [--password-stdin] | change-password [USERNAME] [--password-stdin]
//     (your own password: the current one first, on stdin its first line)
//
// The master is -m/--master, else $DET_MASTER, else localhost:8090; a token
// in $DET_USER_TOKEN is sent with every call, else the one `user login`
// stored ($DET_AUTH_FILE, else ~/.det/auth.json), else det-cli logs in as
// `determined` with an empty password (as Determined's CLI does). --tls-ca
// (or $DET_MASTER_CERT_FILE) connects over TLS. Local mode runs the trial in
// this terminal through det-trial (found next to det-cli, or on PATH), with
// no master.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/checkpoint_commands.h"
#include "cli/cli_errors.h"
#include "cli/client.h"
#include "cli/cluster_commands.h"
#include "cli/commands.h"
#include "cli/experiment_best_commands.h"
#include "cli/experiment_lifecycle_commands.h"
#include "cli/metrics_log_commands.h"
#include "cli/trial_abi_check.h"
#include "cli/trial_metrics_command.h"
#include "cli/trial_profile_command.h"
#include "cli/trial_new_command.h"
#include "cli/experiment_fork_commands.h"
#include "cli/job_commands.h"
#include "cli/master_backup_command.h"
#include "cli/user_commands.h"
#include "cli/workspace_commands.h"
#include "common/exit_codes.h"
#include "common/experiment_config.h"

namespace det::cli {
namespace {

int CreateLocal(const std::string& config, const std::string& trial, const std::vector<std::string>& extra) {
  // Validate the config here first for a quick, clear error.
  auto parsed = LoadExperimentConfigFile(config);
  if (!parsed.ok()) {
    std::fprintf(stderr, "det-cli: error: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  std::string exe = DetTrialBeside();
  // The trial.so's symbols against the libraries this det-trial loads, with
  // the same message as before an upload (dlopen's would be mangled).
  // Exits as det-trial would for an unusable trial.so.
  if (CheckTrialAbiLocally(trial, exe, /*before_upload=*/false, std::cerr) != 0) return kExitLibraryError;
  std::vector<std::string> args = {exe, "--local", config, trial};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execvp(exe.c_str(), argv.data());
  std::perror(("det-cli: cannot run " + exe).c_str());
  return 127;
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "det-cli: error: %s\n", message.c_str());
  return 2;
}

using Command = std::function<int(Client&, const CommandIo&)>;

constexpr const char* kMasterHelp = "Master gRPC address HOST:PORT (default $DET_MASTER, else localhost:8090)";

// Every option's value, and what to run once parsing succeeded. The callbacks
// that the Add*Commands functions register on the CLI::App hold references to
// it: it must outlive the app. Not thread-safe (one per det-cli process).
struct CommandLine {
  std::string master;
  std::string tls_ca;
  // Commands that manage the login themselves skip the automatic one.
  bool manages_login = false;
  // What to run once parsing succeeded; `local_run` is set instead for local mode.
  Command run;
  std::function<int()> local_run;
  bool json = false;
  bool raw = false;  // experiment logs --raw
  // EXPERIMENT_ID or TRIAL_ID (only one subcommand runs).
  int64_t id = 0;
  // experiment create
  ExperimentCreateArgs create_args;
  bool local = false;
  std::string resume;
  // experiment list
  bool list_all = false;
  std::string list_workspace, list_project;
  // experiment set gc-policy
  GcPolicyArgs gc;
  // trial metrics
  TrialMetricsArgs metrics;
  // checkpoint describe
  std::string uuid;
  // slot list
  std::string slot_agent;
  // user
  std::string username;
  bool password_stdin = false;
  bool new_admin = false;
  int64_t agent_uid = 0;
  int64_t agent_gid = 0;
  // preview-search
  std::string preview_config;
  bool preview_trials = false;
};

void AddJsonFlag(CLI::App* sub, CommandLine& cl) {
  sub->add_flag("--json", cl.json, "Print the response as protobuf JSON");
}

void AddIdArg(CLI::App* sub, int64_t& id, const char* name, const char* help) {
  sub->add_option(name, id, help)->required();
}

// -m/--master and --tls-ca; exactly one subcommand.
void AddGlobalOptions(CLI::App& app, CommandLine& cl) {
  app.require_subcommand(1);
  // Subcommands inherit fallthrough, so -m works after them too.
  app.fallthrough();
  app.add_option("-m,--master", cl.master, kMasterHelp);
  app.add_option("--tls-ca", cl.tls_ca, "PEM CA certificate of a TLS master (default $DET_MASTER_CERT_FILE)")
      ->check(ReadableFile());
}

// experiment create: through the master, or with --local through det-trial.
void AddExperimentCreate(CLI::App* experiment, CommandLine& cl) {
  auto* create = experiment->add_subcommand("create", "Create an experiment from a config and a trial.so");
  create->add_option("CONFIG", cl.create_args.config_path, "Experiment config (YAML)")
      ->required()
      ->check(ReadableFile());
  create->add_option("TRIAL", cl.create_args.trial_path, "Trial library (trial.so)")
      ->required()
      ->check(ReadableFile());
  create->add_flag("--follow,-f", cl.create_args.follow, "Wait for the experiment to end, printing its progress");
  create->add_flag("--paused", cl.create_args.paused, "Create the experiment PAUSED instead of ACTIVE");
  create->add_flag("--no-local-abi-check", cl.create_args.no_local_abi_check,
                   "Skip det-cli's check of the trial.so's symbols against the LibTorch and SDK beside it "
                   "(the master still checks against its agents')");
  create->add_flag("--local", cl.local, "Train in this process tree with no master");
  create->add_option("--resume", cl.resume, "(local) checkpoint directory to continue from");
  // Unknown arguments are det-trial options in local mode; they must stay here.
  create->allow_extras();
  create->fallthrough(false);
  create->add_option("-m,--master", cl.master, kMasterHelp);
  create->callback([create, &cl] {
    if (cl.local) {
      if (cl.create_args.follow || cl.create_args.paused) {
        cl.local_run = [] { return UsageError("--follow and --paused need a master; drop --local"); };
        return;
      }
      std::vector<std::string> pass;
      if (!cl.resume.empty()) {
        pass.push_back("--resume");
        pass.push_back(cl.resume);
      }
      for (const auto& e : create->remaining()) pass.push_back(e);
      cl.local_run = [&cl, pass] { return CreateLocal(cl.create_args.config_path, cl.create_args.trial_path, pass); };
      return;
    }
    if (!cl.resume.empty()) {
      cl.local_run = [] { return UsageError("--resume needs --local"); };
      return;
    }
    if (!create->remaining().empty()) {
      std::string extras;
      for (const auto& e : create->remaining()) extras += " " + e;
      cl.local_run = [extras] {
        return UsageError("unexpected arguments:" + extras + " (det-trial options need --local)");
      };
      return;
    }
    cl.run = [&cl](Client& c, const CommandIo& io) { return ExperimentCreate(c, cl.create_args, io); };
  });
}

// experiment (alias e): create, list, the commands on one EXPERIMENT_ID, set gc-policy.
void AddExperimentCommands(CLI::App& app, CommandLine& cl) {
  auto* experiment = app.add_subcommand("experiment", "Manage experiments")->require_subcommand(1);
  experiment->alias("e");

  AddExperimentCreate(experiment, cl);

  auto* exp_list = experiment->add_subcommand("list", "List experiments");
  exp_list->add_flag("--all,-a", cl.list_all, "Include archived experiments");
  exp_list->add_option("--workspace", cl.list_workspace, "Only experiments in this workspace");
  exp_list->add_option("--project", cl.list_project, "Only experiments in projects of this name");
  AddJsonFlag(exp_list, cl);
  exp_list->callback([&cl] {
    cl.run = [&cl](Client& c, const CommandIo& io) {
      return ExperimentList(c, cl.list_all, io, ExperimentsIn(cl.list_workspace, cl.list_project));
    };
  });

  struct ExperimentIdCommand {
    const char* name;
    const char* help;
    bool json;
    std::function<int(Client&, int32_t, const CommandIo&)> fn;
  };
  auto action = [](ExperimentAction a) {
    return [a](Client& c, int32_t i, const CommandIo& io) { return ExperimentChangeState(c, a, i, io); };
  };
  std::vector<ExperimentIdCommand> exp_commands = {
      {"describe", "Show an experiment and its trials", true, ExperimentDescribe},
      {"logs", "Print the logs of all the experiment's trials", true, ExperimentLogs},
      {"list-trials", "List an experiment's trials", true, ExperimentListTrials},
      {"pause", "Pause an experiment (its trials checkpoint and stop)", false, action(ExperimentAction::kPause)},
      {"activate", "Activate a paused experiment", false, action(ExperimentAction::kActivate)},
      {"cancel", "Cancel an experiment (its trials checkpoint and stop)", false, action(ExperimentAction::kCancel)},
      {"kill", "Kill an experiment (its trials stop without a checkpoint)", false, action(ExperimentAction::kKill)},
  };
  for (const auto& cmd : exp_commands) {
    auto* sub = experiment->add_subcommand(cmd.name, cmd.help);
    AddIdArg(sub, cl.id, "EXPERIMENT_ID", "Experiment id");
    if (cmd.json) AddJsonFlag(sub, cl);
    if (std::string(cmd.name) == "logs") {
      sub->add_flag("--raw", cl.raw,
                    "Print lines as stored; without it, control characters (ESC, CR, ...) show as escapes like \\x1b");
    }
    auto fn = cmd.fn;
    sub->callback([&cl, fn] { cl.run = [&cl, fn](Client& c, const CommandIo& io) { return fn(c, cl.id, io); }; });
  }

  auto* exp_set = experiment->add_subcommand("set", "Change an experiment's settings")->require_subcommand(1);
  auto* set_gc = exp_set->add_subcommand("gc-policy", "Set the checkpoint GC policy (applied at once)");
  AddIdArg(set_gc, cl.id, "EXPERIMENT_ID", "Experiment id");
  set_gc->add_option("--save-experiment-best", cl.gc.save_experiment_best, "Keep the experiment's best N checkpoints")
      ->check(CLI::NonNegativeNumber);
  set_gc->add_option("--save-trial-best", cl.gc.save_trial_best, "Keep each trial's best N checkpoints")
      ->check(CLI::NonNegativeNumber);
  set_gc->add_option("--save-trial-latest", cl.gc.save_trial_latest, "Keep each trial's latest N checkpoints")
      ->check(CLI::NonNegativeNumber);
  AddJsonFlag(set_gc, cl);
  set_gc->callback([&cl] {
    cl.run = [&cl](Client& c, const CommandIo& io) { return ExperimentSetGcPolicy(c, cl.id, cl.gc, io); };
  });
}

// trial (alias t): describe, logs, metrics, profile, kill.
void AddTrialCommands(CLI::App& app, CommandLine& cl) {
  auto* trial = app.add_subcommand("trial", "Inspect and control trials")->require_subcommand(1);
  trial->alias("t");
  auto* trial_describe = trial->add_subcommand("describe", "Show a trial");
  AddIdArg(trial_describe, cl.id, "TRIAL_ID", "Trial id");
  AddJsonFlag(trial_describe, cl);
  trial_describe->callback(
      [&cl] { cl.run = [&cl](Client& c, const CommandIo& io) { return TrialDescribe(c, cl.id, io); }; });

  auto* trial_metrics = trial->add_subcommand("metrics", "Print a trial's metric reports");
  AddIdArg(trial_metrics, cl.id, "TRIAL_ID", "Trial id");
  trial_metrics->add_option("--group", cl.metrics.group, "Only this group (training, validation, inference, ...)");
  trial_metrics->add_option("--metric", cl.metrics.metric_names, "Only this metric name (repeatable)");
  auto* full = trial_metrics->add_flag("--full", cl.metrics.full,
                                       "Every report, not the chart view's 1,000 points per metric");
  trial_metrics->add_flag("--follow,-f", cl.metrics.follow, "Print reports as they arrive until the trial ends")
      ->excludes(full);
  AddJsonFlag(trial_metrics, cl);
  trial_metrics->callback([&cl] {
    cl.run = [&cl](Client& c, const CommandIo& io) { return TrialMetrics(c, cl.id, cl.metrics, io); };
  });

  auto* trial_profile = trial->add_subcommand(
      "profile", "Print where a profiled trial's time went: share per phase, batches/s, samples/s, CPU/RSS/GPU");
  AddIdArg(trial_profile, cl.id, "TRIAL_ID", "Trial id");
  trial_profile->add_flag("--json", cl.json, "Print the summary as one JSON object");
  trial_profile->callback(
      [&cl] { cl.run = [&cl](Client& c, const CommandIo& io) { return TrialProfileCommand(c, cl.id, io); }; });

  auto* trial_kill = trial->add_subcommand("kill", "Kill a trial (no checkpoint)");
  AddIdArg(trial_kill, cl.id, "TRIAL_ID", "Trial id");
  trial_kill->callback([&cl] { cl.run = [&cl](Client& c, const CommandIo& io) { return TrialKill(c, cl.id, io); }; });
}

// checkpoint: list, describe.
void AddCheckpointCommands(CLI::App& app, CommandLine& cl) {
  auto* checkpoint = app.add_subcommand("checkpoint", "Inspect checkpoints")->require_subcommand(1);
  auto* cp_list = checkpoint->add_subcommand("list", "List an experiment's checkpoints");
  AddIdArg(cp_list, cl.id, "EXPERIMENT_ID", "Experiment id");
  AddJsonFlag(cp_list, cl);
  cp_list->callback([&cl] {
    cl.run = [&cl](Client& c, const CommandIo& io) { return ExperimentListCheckpoints(c, cl.id, io); };
  });
  auto* cp_describe = checkpoint->add_subcommand("describe", "Show a checkpoint");
  cp_describe->add_option("UUID", cl.uuid, "Checkpoint uuid")->required();
  AddJsonFlag(cp_describe, cl);
  cp_describe->callback([&cl] {
    cl.run = [&cl](Client& c, const CommandIo& io) { return CheckpointDescribe(c, cl.uuid, io); };
  });
}

// The cluster: agent list, slot list, master info.
void AddClusterCommands(CLI::App& app, CommandLine& cl) {
  auto* agent = app.add_subcommand("agent", "Inspect agents")->require_subcommand(1);
  auto* agent_list = agent->add_subcommand("list", "List agents");
  AddJsonFlag(agent_list, cl);
  agent_list->callback([&cl] { cl.run = [](Client& c, const CommandIo& io) { return AgentList(c, io); }; });

  auto* slot = app.add_subcommand("slot", "Inspect slots")->require_subcommand(1);
  auto* slot_list = slot->add_subcommand("list", "List the slots of every agent");
  slot_list->add_option("--agent", cl.slot_agent, "Only this agent's slots");
  AddJsonFlag(slot_list, cl);
  slot_list->callback(
      [&cl] { cl.run = [&cl](Client& c, const CommandIo& io) { return SlotList(c, cl.slot_agent, io); }; });

  auto* master_cmd = app.add_subcommand("master", "Inspect the master")->require_subcommand(1);
  auto* master_info = master_cmd->add_subcommand("info", "Show the master's version and cluster");
  AddJsonFlag(master_info, cl);
  master_info->callback([&cl] { cl.run = [](Client& c, const CommandIo& io) { return MasterInfo(c, io); }; });
}

void AddPasswordStdinFlag(CLI::App* sub, CommandLine& cl) {
  sub->add_flag("--password-stdin", cl.password_stdin, "Read the password from stdin instead of the terminal");
}

// user: login, logout, whoami, list, create, change-password.
void AddUserCommands(CLI::App& app, CommandLine& cl) {
  auto* user = app.add_subcommand("user", "Log in and manage users")->require_subcommand(1);
  auto* login = user->add_subcommand("login", "Log in and store the token for this master");
  login->add_option("USERNAME", cl.username, "User (default determined)");
  AddPasswordStdinFlag(login, cl);
  AddJsonFlag(login, cl);
  login->callback([&cl] {
    cl.manages_login = true;
    cl.run = [&cl](Client& c, const CommandIo& io) {
      std::string name = cl.username.empty() ? "determined" : cl.username;
      return UserLogin(c, name, ReadPassword("Password for user '" + name + "': ", cl.password_stdin), io);
    };
  });
  auto* logout = user->add_subcommand("logout", "Revoke and forget the stored token");
  logout->callback([&cl] {
    cl.manages_login = true;
    cl.run = [](Client& c, const CommandIo& io) { return UserLogout(c, io); };
  });
  auto* whoami = user->add_subcommand("whoami", "Show the logged-in user");
  AddJsonFlag(whoami, cl);
  whoami->callback([&cl] { cl.run = [](Client& c, const CommandIo& io) { return UserWhoami(c, io); }; });
  auto* user_list = user->add_subcommand("list", "List users");
  AddJsonFlag(user_list, cl);
  user_list->callback([&cl] { cl.run = [](Client& c, const CommandIo& io) { return UserList(c, io); }; });
  auto* link = user->add_subcommand("link-with-agent-user",
                                    "Run a user's trials as this Unix uid/gid on every agent (admin only; instead of "
                                    "one from det-master --trial-uid-range)");
  link->add_option("USERNAME", cl.username, "User to link")->required();
  link->add_option("--agent-uid", cl.agent_uid, "Unix uid (1000..4294967294, no other user's)")->required();
  link->add_option("--agent-gid", cl.agent_gid, "Unix gid (1..4294967294)")->required();
  link->callback([&cl] {
    cl.run = [&cl](Client& c, const CommandIo& io) {
      return UserLinkAgentUser(c, cl.username, cl.agent_uid, cl.agent_gid, io);
    };
  });
  auto* user_create = user->add_subcommand("create", "Create a user (admin only; empty password unless given)");
  user_create->add_option("USERNAME", cl.username, "New user's name")->required();
  user_create->add_flag("--admin", cl.new_admin, "Make the user an admin");
  AddPasswordStdinFlag(user_create, cl);
  AddJsonFlag(user_create, cl);
  user_create->callback([&cl] {
    cl.run = [&cl](Client& c, const CommandIo& io) {
      std::string password = cl.password_stdin ? ReadPassword("", true) : "";
      return UserCreate(c, cl.username, cl.new_admin, password, io);
    };
  });
  auto* change_password = user->add_subcommand("change-password", "Change your password (or, as admin, a user's)");
  change_password->add_option("USERNAME", cl.username, "User (default: you)");
  AddPasswordStdinFlag(change_password, cl);
  change_password->callback([&cl] {
    cl.run = [&cl](Client& c, const CommandIo& io) {
      // --password-stdin: the current password (own password only) on the
      // first line, the new one on the next.
      PasswordPrompts prompts;
      prompts.old_password = [&cl] { return ReadPassword("Current password: ", cl.password_stdin); };
      prompts.new_password = [&cl]() -> std::optional<std::string> {
        std::string password = ReadPassword("New password: ", cl.password_stdin);
        if (!cl.password_stdin && password != ReadPassword("Confirm password: ", false)) return std::nullopt;
        return password;
      };
      return UserChangePassword(c, cl.username, prompts, io);
    };
  });
}

// preview-search CONFIG [--trials].
void AddPreviewSearchCommand(CLI::App& app, CommandLine& cl) {
  auto* preview = app.add_subcommand("preview-search", "Show what a config's searcher would do, without running it");
  preview->add_option("config", cl.preview_config, "Experiment config (YAML)")->required();
  preview->add_flag("--trials", cl.preview_trials, "Also list every simulated trial");
  AddJsonFlag(preview, cl);
  preview->callback([&cl] {
    cl.run = [&cl](Client& c, const CommandIo& io) {
      return PreviewSearch(c, cl.preview_config, cl.preview_trials, io);
    };
  });
}

int Main(int argc, char** argv) {
  CLI::App app{"det-cli: det-cpp command-line client"};
  CommandLine cl;
  AddGlobalOptions(app, cl);
  AddExperimentCommands(app, cl);
  AddExperimentLifecycleCommands(app.get_subcommand("experiment"), &cl.run);
  AddTrialCommands(app, cl);
  // trial new NAME [--dir DIR] (cli/trial_new_command.h): local, no master.
  TrialNewArgs trial_new_args;
  AddTrialNewCommand(app.get_subcommand("trial"), trial_new_args,
                     [&cl](std::function<int()> run) { cl.local_run = std::move(run); });
  // experiment fork|continue, trial pause|activate (cli/experiment_fork_commands.h)
  AddForkCommands(app, [&cl](RunCommand run) { cl.run = std::move(run); });
  // experiment list-checkpoints [--best N] | download --top-n N -o DIR
  // (cli/experiment_best_commands.h)
  ExperimentBestArgs best_args;
  AddExperimentBestCommands(app.get_subcommand("experiment"), best_args,
                            [&cl](Command command) { cl.run = std::move(command); });
  AddCheckpointCommands(app, cl);
  // checkpoint download | delete | set-metadata (cli/checkpoint_commands.h)
  CheckpointFileArgs checkpoint_file_args;
  AddCheckpointFileCommands(app.get_subcommand("checkpoint"), checkpoint_file_args,
                            [&cl](Command command) { cl.run = std::move(command); });
  AddClusterCommands(app, cl);
  // resource-pool list, agent describe|enable|disable, slot enable|disable (cli/cluster_commands.h)
  AddClusterControlCommands(app, [&cl](Command command) { cl.run = std::move(command); });
  // trial logs (filters), experiment validation-history, master logs
  // (cli/metrics_log_commands.h)
  AddMetricsLogCommands(app, &cl.id, &cl.json, &cl.run);
  // master backup FILE [--force] (cli/master_backup_command.h)
  MasterBackupArgs backup_args;
  AddMasterBackupCommand(app.get_subcommand("master"), backup_args,
                         [&cl](Command command) { cl.run = std::move(command); });
  AddUserCommands(app, cl);
  AddPreviewSearchCommand(app, cl);
  // job list | update (cli/job_commands.h)
  AddJobCommands(app, [&cl](JobCommand run) { cl.run = std::move(run); });
  // workspace create|list, project create|list (cli/workspace_commands.h)
  AddWorkspaceCommands(app, [&cl](WorkspaceCommand run) { cl.run = std::move(run); });

  app.failure_message(FailureMessage);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (cl.local_run) return cl.local_run();
  if (!cl.run) return UsageError("no command given");
  ClientOptions options = ClientOptionsFromEnv(cl.master);
  if (!cl.tls_ca.empty()) options.tls_ca = cl.tls_ca;
  Client client(options);
  if (!cl.manages_login) EnsureLoggedIn(client);
  CommandIo io{std::cout, std::cerr, cl.json, isatty(STDOUT_FILENO) == 1, cl.raw};
  int rc = cl.run(client, io);
  std::cout.flush();
  return rc;
}

}  // namespace
}  // namespace det::cli

int main(int argc, char** argv) { return det::cli::Main(argc, argv); }
