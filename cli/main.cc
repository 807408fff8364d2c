// det-cli: the command-line client of the det-cpp master (CLI11 wiring only;
// the commands live in commands.cc).
//
//   det-cli [-m HOST:PORT] experiment create CONFIG TRIAL.so [--follow] [--paused]
//   det-cli experiment create --local CONFIG TRIAL.so [--resume DIR] [det-trial options]
//   det-cli experiment list|describe|logs|list-trials|list-checkpoints|pause|activate|cancel|kill ...
//   det-cli experiment set gc-policy ID [--save-experiment-best N] [--save-trial-best N] [--save-trial-latest N]
//   det-cli trial describe|logs|metrics|kill ID
//   det-cli checkpoint list EXPERIMENT_ID | describe UUID
//   det-cli agent list | slot list | master info
//   det-cli user login [USERNAME] [--password-stdin] | logout | whoami | list
//   det-cli user create NAME [--admin] [--password-stdin] | change-password [USERNAME] [--password-stdin]
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
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/user_commands.h"
#include "common/experiment_config.h"

namespace det::cli {
namespace {

namespace fs = std::filesystem;

std::string FindDetTrial() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path sibling = self.parent_path() / "det-trial";
    if (fs::exists(sibling)) return sibling.string();
  }
  return "det-trial";  // execvp searches PATH
}

int CreateLocal(const std::string& config, const std::string& trial, const std::vector<std::string>& extra) {
  // Validate the config here first for a quick, clear error.
  auto parsed = LoadExperimentConfigFile(config);
  if (!parsed.ok()) {
    std::fprintf(stderr, "det-cli: error: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  std::string exe = FindDetTrial();
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

int Main(int argc, char** argv) {
  CLI::App app{"det-cli: det-cpp command-line client"};
  app.require_subcommand(1);
  // Subcommands inherit fallthrough, so -m works after them too.
  app.fallthrough();
  std::string master;
  const char* kMasterHelp = "Master gRPC address HOST:PORT (default $DET_MASTER, else localhost:8090)";
  app.add_option("-m,--master", master, kMasterHelp);
  std::string tls_ca;
  app.add_option("--tls-ca", tls_ca, "PEM CA certificate of a TLS master (default $DET_MASTER_CERT_FILE)")
      ->check(CLI::ExistingFile);
  // Commands that manage the login themselves skip the automatic one.
  bool manages_login = false;

  // What to run once parsing succeeded; `local_run` is set instead for local mode.
  Command run;
  std::function<int()> local_run;
  bool json = false;
  auto add_json = [&json](CLI::App* sub) { sub->add_flag("--json", json, "Print the response as protobuf JSON"); };
  auto add_id = [](CLI::App* sub, int32_t& id, const char* name, const char* help) {
    sub->add_option(name, id, help)->required();
  };

  // --------------------------------------------------------- experiment
  auto* experiment = app.add_subcommand("experiment", "Manage experiments")->require_subcommand(1);
  experiment->alias("e");

  auto* create = experiment->add_subcommand("create", "Create an experiment from a config and a trial.so");
  ExperimentCreateArgs create_args;
  bool local = false;
  std::string resume;
  create->add_option("CONFIG", create_args.config_path, "Experiment config (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  create->add_option("TRIAL", create_args.trial_path, "Trial library (trial.so)")
      ->required()
      ->check(CLI::ExistingFile);
  create->add_flag("--follow,-f", create_args.follow, "Wait for the experiment to end, printing its progress");
  create->add_flag("--paused", create_args.paused, "Create the experiment PAUSED instead of ACTIVE");
  create->add_flag("--local", local, "Train in this process tree with no master");
  create->add_option("--resume", resume, "(local) checkpoint directory to continue from");
  // Unknown arguments are det-trial options in local mode; they must stay here.
  create->allow_extras();
  create->fallthrough(false);
  create->add_option("-m,--master", master, kMasterHelp);
  create->callback([&] {
    if (local) {
      if (create_args.follow || create_args.paused) {
        local_run = [] { return UsageError("--follow and --paused need a master; drop --local"); };
        return;
      }
      std::vector<std::string> pass;
      if (!resume.empty()) {
        pass.push_back("--resume");
        pass.push_back(resume);
      }
      for (const auto& e : create->remaining()) pass.push_back(e);
      local_run = [&create_args, pass] { return CreateLocal(create_args.config_path, create_args.trial_path, pass); };
      return;
    }
    if (!resume.empty()) {
      local_run = [] { return UsageError("--resume needs --local"); };
      return;
    }
    if (!create->remaining().empty()) {
      std::string extras;
      for (const auto& e : create->remaining()) extras += " " + e;
      local_run = [extras] { return UsageError("unexpected arguments:" + extras + " (det-trial options need --local)"); };
      return;
    }
    run = [&create_args](Client& c, const CommandIo& io) { return ExperimentCreate(c, create_args, io); };
  });

  bool list_all = false;
  auto* exp_list = experiment->add_subcommand("list", "List experiments");
  exp_list->add_flag("--all,-a", list_all, "Include archived experiments");
  add_json(exp_list);
  exp_list->callback([&] { run = [&](Client& c, const CommandIo& io) { return ExperimentList(c, list_all, io); }; });

  int32_t id = 0;
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
      {"list-checkpoints", "List an experiment's checkpoints", true, ExperimentListCheckpoints},
      {"pause", "Pause an experiment (its trials checkpoint and stop)", false, action(ExperimentAction::kPause)},
      {"activate", "Activate a paused experiment", false, action(ExperimentAction::kActivate)},
      {"cancel", "Cancel an experiment (its trials checkpoint and stop)", false, action(ExperimentAction::kCancel)},
      {"kill", "Kill an experiment (its trials stop without a checkpoint)", false, action(ExperimentAction::kKill)},
  };
  for (const auto& cmd : exp_commands) {
    auto* sub = experiment->add_subcommand(cmd.name, cmd.help);
    add_id(sub, id, "EXPERIMENT_ID", "Experiment id");
    if (cmd.json) add_json(sub);
    auto fn = cmd.fn;
    sub->callback([&run, &id, fn] { run = [&id, fn](Client& c, const CommandIo& io) { return fn(c, id, io); }; });
  }

  GcPolicyArgs gc;
  auto* exp_set = experiment->add_subcommand("set", "Change an experiment's settings")->require_subcommand(1);
  auto* set_gc = exp_set->add_subcommand("gc-policy", "Set the checkpoint GC policy (applied at once)");
  add_id(set_gc, id, "EXPERIMENT_ID", "Experiment id");
  set_gc->add_option("--save-experiment-best", gc.save_experiment_best, "Keep the experiment's best N checkpoints")
      ->check(CLI::NonNegativeNumber);
  set_gc->add_option("--save-trial-best", gc.save_trial_best, "Keep each trial's best N checkpoints")
      ->check(CLI::NonNegativeNumber);
  set_gc->add_option("--save-trial-latest", gc.save_trial_latest, "Keep each trial's latest N checkpoints")
      ->check(CLI::NonNegativeNumber);
  add_json(set_gc);
  set_gc->callback(
      [&] { run = [&](Client& c, const CommandIo& io) { return ExperimentSetGcPolicy(c, id, gc, io); }; });

  // -------------------------------------------------------------- trial
  auto* trial = app.add_subcommand("trial", "Inspect and control trials")->require_subcommand(1);
  trial->alias("t");
  auto* trial_describe = trial->add_subcommand("describe", "Show a trial");
  add_id(trial_describe, id, "TRIAL_ID", "Trial id");
  add_json(trial_describe);
  trial_describe->callback([&] { run = [&](Client& c, const CommandIo& io) { return TrialDescribe(c, id, io); }; });

  bool follow_logs = false;
  auto* trial_logs = trial->add_subcommand("logs", "Print a trial's logs");
  add_id(trial_logs, id, "TRIAL_ID", "Trial id");
  trial_logs->add_flag("--follow,-f", follow_logs, "Keep printing new lines until the trial ends");
  add_json(trial_logs);
  trial_logs->callback(
      [&] { run = [&](Client& c, const CommandIo& io) { return TrialLogs(c, id, follow_logs, io); }; });

  std::string group;
  auto* trial_metrics = trial->add_subcommand("metrics", "Print a trial's metric reports");
  add_id(trial_metrics, id, "TRIAL_ID", "Trial id");
  trial_metrics->add_option("--group", group, "Only this group")->check(CLI::IsMember({"training", "validation"}));
  add_json(trial_metrics);
  trial_metrics->callback(
      [&] { run = [&](Client& c, const CommandIo& io) { return TrialMetrics(c, id, group, io); }; });

  auto* trial_kill = trial->add_subcommand("kill", "Kill a trial (no checkpoint)");
  add_id(trial_kill, id, "TRIAL_ID", "Trial id");
  trial_kill->callback([&] { run = [&](Client& c, const CommandIo& io) { return TrialKill(c, id, io); }; });

  // --------------------------------------------------------- checkpoint
  auto* checkpoint = app.add_subcommand("checkpoint", "Inspect checkpoints")->require_subcommand(1);
  auto* cp_list = checkpoint->add_subcommand("list", "List an experiment's checkpoints");
  add_id(cp_list, id, "EXPERIMENT_ID", "Experiment id");
  add_json(cp_list);
  cp_list->callback(
      [&] { run = [&](Client& c, const CommandIo& io) { return ExperimentListCheckpoints(c, id, io); }; });
  std::string uuid;
  auto* cp_describe = checkpoint->add_subcommand("describe", "Show a checkpoint");
  cp_describe->add_option("UUID", uuid, "Checkpoint uuid")->required();
  add_json(cp_describe);
  cp_describe->callback(
      [&] { run = [&](Client& c, const CommandIo& io) { return CheckpointDescribe(c, uuid, io); }; });

  // ------------------------------------------------------------ cluster
  auto* agent = app.add_subcommand("agent", "Inspect agents")->require_subcommand(1);
  auto* agent_list = agent->add_subcommand("list", "List agents");
  add_json(agent_list);
  agent_list->callback([&] { run = [&](Client& c, const CommandIo& io) { return AgentList(c, io); }; });

  std::string slot_agent;
  auto* slot = app.add_subcommand("slot", "Inspect slots")->require_subcommand(1);
  auto* slot_list = slot->add_subcommand("list", "List the slots of every agent");
  slot_list->add_option("--agent", slot_agent, "Only this agent's slots");
  add_json(slot_list);
  slot_list->callback([&] { run = [&](Client& c, const CommandIo& io) { return SlotList(c, slot_agent, io); }; });

  auto* master_cmd = app.add_subcommand("master", "Inspect the master")->require_subcommand(1);
  auto* master_info = master_cmd->add_subcommand("info", "Show the master's version and cluster");
  add_json(master_info);
  master_info->callback([&] { run = [&](Client& c, const CommandIo& io) { return MasterInfo(c, io); }; });

  // --------------------------------------------------------------- user
  auto* user = app.add_subcommand("user", "Log in and manage users")->require_subcommand(1);
  std::string username;
  bool password_stdin = false;
  auto add_password_stdin = [&password_stdin](CLI::App* sub) {
    sub->add_flag("--password-stdin", password_stdin, "Read the password from stdin instead of the terminal");
  };
  auto* login = user->add_subcommand("login", "Log in and store the token for this master");
  login->add_option("USERNAME", username, "User (default determined)");
  add_password_stdin(login);
  add_json(login);
  login->callback([&] {
    manages_login = true;
    run = [&](Client& c, const CommandIo& io) {
      std::string name = username.empty() ? "determined" : username;
      return UserLogin(c, name, ReadPassword("Password for user '" + name + "': ", password_stdin), io);
    };
  });
  auto* logout = user->add_subcommand("logout", "Revoke and forget the stored token");
  logout->callback([&] {
    manages_login = true;
    run = [&](Client& c, const CommandIo& io) { return UserLogout(c, io); };
  });
  auto* whoami = user->add_subcommand("whoami", "Show the logged-in user");
  add_json(whoami);
  whoami->callback([&] { run = [&](Client& c, const CommandIo& io) { return UserWhoami(c, io); }; });
  auto* user_list = user->add_subcommand("list", "List users");
  add_json(user_list);
  user_list->callback([&] { run = [&](Client& c, const CommandIo& io) { return UserList(c, io); }; });
  bool new_admin = false;
  auto* user_create = user->add_subcommand("create", "Create a user (admin only; empty password unless given)");
  user_create->add_option("USERNAME", username, "New user's name")->required();
  user_create->add_flag("--admin", new_admin, "Make the user an admin");
  add_password_stdin(user_create);
  add_json(user_create);
  user_create->callback([&] {
    run = [&](Client& c, const CommandIo& io) {
      std::string password = password_stdin ? ReadPassword("", true) : "";
      return UserCreate(c, username, new_admin, password, io);
    };
  });
  auto* change_password = user->add_subcommand("change-password", "Change your password (or, as admin, a user's)");
  change_password->add_option("USERNAME", username, "User (default: you)");
  add_password_stdin(change_password);
  change_password->callback([&] {
    run = [&](Client& c, const CommandIo& io) {
      std::string password = ReadPassword("New password: ", password_stdin);
      if (!password_stdin && password != ReadPassword("Confirm password: ", false)) {
        return UsageError("passwords do not match");
      }
      return UserChangePassword(c, username, password, io);
    };
  });

  std::string preview_config;
  bool preview_trials = false;
  auto* preview = app.add_subcommand("preview-search", "Show what a config's searcher would do, without running it");
  preview->add_option("config", preview_config, "Experiment config (YAML)")->required();
  preview->add_flag("--trials", preview_trials, "Also list every simulated trial");
  add_json(preview);
  preview->callback([&] {
    run = [&](Client& c, const CommandIo& io) { return PreviewSearch(c, preview_config, preview_trials, io); };
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (local_run) return local_run();
  if (!run) return UsageError("no command given");
  ClientOptions options = ClientOptionsFromEnv(master);
  if (!tls_ca.empty()) options.tls_ca = tls_ca;
  Client client(options);
  if (!manages_login) EnsureLoggedIn(client);
  CommandIo io{std::cout, std::cerr, json};
  int rc = run(client, io);
  std::cout.flush();
  return rc;
}

}  // namespace
}  // namespace det::cli

int main(int argc, char** argv) { return det::cli::Main(argc, argv); }
