// det-cli: the command-line client.
//
//   det-cli experiment create --local CONFIG TRIAL.so [det-trial options]
//
// Local mode runs the trial in this terminal through det-trial (found next to
// det-cli, or on PATH), with no master.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

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

}  // namespace
}  // namespace det::cli

int main(int argc, char** argv) {
  CLI::App app{"det-cli: det-cpp command-line client"};
  app.require_subcommand(1);
  auto* experiment = app.add_subcommand("experiment", "Manage experiments")->require_subcommand(1);
  auto* create = experiment->add_subcommand("create", "Create an experiment from a config and a trial.so");
  std::string config, trial;
  bool local = false;
  std::string resume;
  create->add_option("CONFIG", config, "Experiment config (YAML)")->required()->check(CLI::ExistingFile);
  create->add_option("TRIAL", trial, "Trial library (trial.so)")->required()->check(CLI::ExistingFile);
  create->add_flag("--local", local, "Train in this process tree with no master");
  create->add_option("--resume", resume, "(local) checkpoint directory to continue from");
  create->allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (create->parsed()) {
    if (!local) {
      std::fprintf(stderr,
                   "det-cli: error: this build runs experiments with --local only; managed experiments need "
                   "det-master\n");
      return 2;
    }
    std::vector<std::string> pass;
    if (!resume.empty()) {
      pass.push_back("--resume");
      pass.push_back(resume);
    }
    for (const auto& e : create->remaining()) pass.push_back(e);
    return det::cli::CreateLocal(config, trial, pass);
  }
  return 0;
}
