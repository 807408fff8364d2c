#include "cli/cli_errors.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <sys/stat.h>

namespace det::cli {

namespace {
constexpr char kCannotRead[] = "cannot read ";
}  // namespace

CLI::Validator ReadableFile() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) {
          const int err = errno;
          return std::string(kCannotRead) + path + ": " +
                 (err == ENOENT ? std::string("no such file") : std::string(std::strerror(err)));
        }
        if (S_ISDIR(st.st_mode)) return std::string(kCannotRead) + path + ": is a directory";
        if (!std::ifstream(path).good()) return std::string(kCannotRead) + path + ": permission denied";
        return std::string();
      },
      "FILE");
}

std::string FailureMessage(const CLI::App* /*app*/, const CLI::Error& e) {
  std::string message = e.what();
  const size_t file = message.find(kCannotRead);
  if (file != std::string::npos) return "det-cli: error: " + message.substr(file) + "\n";
  return "det-cli: error: " + message + "\nRun 'det-cli [COMMAND...] --help' for usage.\n";
}

std::string NameConfigFile(const std::string& message, const std::string& config_path) {
  constexpr char kPrefix[] = "config:";
  if (message.rfind(kPrefix, 0) != 0) return message;
  return config_path + message.substr(sizeof(kPrefix) - 2);
}

}  // namespace det::cli
