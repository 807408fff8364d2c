#include "cli/cli_errors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

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

std::string NotUtf8Error(const std::string& path, std::string_view text) {
  const size_t at = Utf8InvalidAt(text);
  if (at == std::string_view::npos) return "";
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') ++line, line_start = i + 1;
  }
  char byte[8];
  std::snprintf(byte, sizeof(byte), "0x%02x", static_cast<unsigned char>(text[at]));
  return absl::StrCat(path, ": line ", line, ", column ", at - line_start + 1, " (byte ", byte,
                      ") is not UTF-8; save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)");
}

}  // namespace det::cli
