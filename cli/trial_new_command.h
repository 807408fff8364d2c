// det-cli trial new NAME [--dir DIR]: a new trial project, from the files of
// examples/minimal (compiled into det-cli, so the template cannot drift from
// the example the tree builds and tests).
#ifndef DET_CLI_TRIAL_NEW_COMMAND_H_
#define DET_CLI_TRIAL_NEW_COMMAND_H_

#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace det::cli {

// One file of a template, by its name in the template directory.
struct EmbeddedFile {
  std::string_view name;
  std::string_view content;
};

// The example's trial name: in file names and contents it becomes NAME.
inline constexpr std::string_view kTemplateTrialName = "minimal_trial";
inline constexpr size_t kMaxTrialNameChars = 64;

// "" when `name` is a C and CMake identifier of at most 64 characters
// ([A-Za-z_][A-Za-z0-9_]*), else the error to print. Thread-safe.
std::string ValidateTrialName(std::string_view name);

// The files of project `name` (validated): NAME.cc, CMakeLists.txt,
// const.yaml, adaptive.yaml, each with kTemplateTrialName replaced by `name`.
std::vector<std::pair<std::string, std::string>> TrialProjectFiles(std::string_view name);

struct TrialNewArgs {
  std::string name;
  std::string dir = ".";
};

// Writes DIR/NAME (created, or empty beforehand) and prints the commands that
// build and train it on `out`. Returns 0; 2 with one "det-cli: error: ..."
// line on `err` for a bad NAME or an existing non-empty DIR/NAME (nothing
// written); 1 when a file cannot be written.
int TrialNew(const TrialNewArgs& args, std::ostream& out, std::ostream& err);

// Registers `new` under `trial`; on a successful parse it hands `set_run` the
// command to run (no master involved).
void AddTrialNewCommand(CLI::App* trial, TrialNewArgs& args, const std::function<void(std::function<int()>)>& set_run);

}  // namespace det::cli

#endif  // DET_CLI_TRIAL_NEW_COMMAND_H_
