// How det-cli reports a bad command line: one "det-cli: error: ..." line,
// like every other error it prints, never CLI11's own formats.
#ifndef DET_CLI_CLI_ERRORS_H_
#define DET_CLI_CLI_ERRORS_H_

#include <string>

#include <CLI/CLI.hpp>

namespace det::cli {

// A validator for a file argument: empty when `path` is a readable regular
// file, else "cannot read PATH: no such file" (or ": is a directory",
// ": permission denied", ...).
CLI::Validator ReadableFile();

// For CLI::App::failure_message: "det-cli: error: MESSAGE\n", where a file
// validator's message stands alone (no option-name prefix) and other usage
// errors add a hint to --help.
std::string FailureMessage(const CLI::App* app, const CLI::Error& e);

// The master names the config of CreateExperiment "config" in its errors
// ("config:12: unknown field 'x'"); det-cli knows the file: returns `message`
// with a leading "config:" rewritten to "CONFIG_PATH:" (other messages as
// they are). The master never learns or opens the path.
std::string NameConfigFile(const std::string& message, const std::string& config_path);

}  // namespace det::cli

#endif  // DET_CLI_CLI_ERRORS_H_
