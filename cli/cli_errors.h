// How det-cli reports a bad command line: one "det-cli: error: ..." line,
// like every other error it prints, never CLI11's own formats.
#ifndef DET_CLI_CLI_ERRORS_H_
#define DET_CLI_CLI_ERRORS_H_

#include <string>
#include <string_view>

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

// "" when `text` (the contents of `path`) is UTF-8; else an error naming the
// file, the line and column (1-based, in bytes) and the byte of the first
// invalid sequence, and how to fix it: "PATH: line 3, column 7 (byte 0xe9) is
// not UTF-8; save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)". Configs
// are UTF-8 (YAML and the master's proto3 strings require it): det-cli says
// so before the master is asked.
std::string NotUtf8Error(const std::string& path, std::string_view text);

}  // namespace det::cli

#endif  // DET_CLI_CLI_ERRORS_H_
