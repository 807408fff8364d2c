#include "cli/trial_new_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "absl/strings/str_replace.h"
#include "cli/minimal_trial_template.h"  // generated: kMinimalTrialTemplate
#include "common/shell_quote.h"

namespace det::cli {
namespace {

namespace fs = std::filesystem;

// " -DCMAKE_PREFIX_PATH=PREFIX" when this det-cli is installed (PREFIX/bin)
// next to the SDK's CMake package under a prefix CMake does not search by
// default; else "".
std::string PrefixPathOption() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path prefix = self.parent_path().parent_path();
  if (prefix == "/usr" || prefix == "/usr/local") return "";
  if (!fs::exists(prefix / DET_INSTALL_LIBDIR / "cmake/det/detConfig.cmake", ec)) return "";
  return " -DCMAKE_PREFIX_PATH=" + ShellWord(prefix.string());
}

// Writes `content` to a new file `path` (never through a symlink, never over
// an existing file). Returns "" or the error.
std::string WriteNewFile(const fs::path& path, std::string_view content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + path.string() + ": " + std::strerror(errno);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string error = "cannot write " + path.string() + ": " + std::strerror(errno);
      ::close(fd);
      return error;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return "cannot write " + path.string() + ": " + std::strerror(errno);
  return "";
}

// "" when `dir` is absent or an empty directory, else why it cannot be used.
std::string CheckTarget(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return "cannot use " + dir.string() + ": " + ec.message();
  if (!fs::exists(st)) return "";
  if (!fs::is_directory(st)) return dir.string() + " exists and is not a directory; choose another NAME or --dir";
  if (!fs::is_empty(dir, ec) || ec) {
    return dir.string() + " exists and is not empty; choose another NAME or --dir (nothing was written)";
  }
  return "";
}

}  // namespace

std::string ValidateTrialName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= kMaxTrialNameChars &&
            (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  // Names CMake or the packages find_package(det) loads already take: the
  // generated project would not configure.
  static constexpr std::string_view kTaken[] = {
      "all", "clean", "help", "install", "package", "package_source", "test", "edit_cache", "rebuild_cache",
      "list_install_components", "ALL_BUILD", "ZERO_CHECK", "RUN_TESTS", "torch", "torch_cpu", "torch_library",
      "c10", "caffe2", "gloo"};
  for (std::string_view taken : kTaken) {
    if (ok && name == taken) {
      return "NAME '" + std::string(name) + "' is a name CMake or LibTorch already uses; choose another, e.g. my_" +
             std::string(name);
    }
  }
  if (ok) return "";
  return "NAME '" + std::string(name.substr(0, kMaxTrialNameChars)) + (name.size() > kMaxTrialNameChars ? "..." : "") +
         "' is not a valid trial name: use a letter or '_' followed by letters, digits or '_' (at most " +
         std::to_string(kMaxTrialNameChars) + " characters), e.g. my_trial";
}

std::vector<std::pair<std::string, std::string>> TrialProjectFiles(std::string_view name) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const EmbeddedFile& f : kMinimalTrialTemplate) {
    const std::vector<std::pair<absl::string_view, absl::string_view>> rename = {
        {absl::string_view(kTemplateTrialName.data(), kTemplateTrialName.size()),
         absl::string_view(name.data(), name.size())}};
    files.emplace_back(absl::StrReplaceAll(absl::string_view(f.name.data(), f.name.size()), rename),
                       absl::StrReplaceAll(absl::string_view(f.content.data(), f.content.size()), rename));
  }
  return files;
}

int TrialNew(const TrialNewArgs& args, std::ostream& out, std::ostream& err) {
  if (std::string bad = ValidateTrialName(args.name); !bad.empty()) {
    err << "det-cli: error: " << bad << "\n";
    return 2;
  }
  const fs::path dir = args.dir == "." ? fs::path(args.name) : fs::path(args.dir) / args.name;
  if (std::string bad = CheckTarget(dir); !bad.empty()) {
    err << "det-cli: error: " << bad << "\n";
    return 2;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    err << "det-cli: error: cannot create " << dir.string() << ": " << ec.message() << "\n";
    return 1;
  }
  std::string names;
  for (const auto& [file, content] : TrialProjectFiles(args.name)) {
    if (std::string bad = WriteNewFile(dir / file, content); !bad.empty()) {
      err << "det-cli: error: " << bad << "\n";
      return 1;
    }
    names += (names.empty() ? "" : ", ") + file;
  }
  const std::string d = ShellWord(dir.string());
  out << "Created " << dir.string() << ": " << names << "\n"
      << "Build it and train it locally:\n"
      << "  cmake -S " << d << " -B " << d << "/build" << PrefixPathOption() << " && cmake --build " << d
      << "/build && det-cli experiment create --local " << d << "/const.yaml " << d << "/build/" << args.name
      << ".so\n";
  return 0;
}

void AddTrialNewCommand(CLI::App* trial, TrialNewArgs& args,
                        const std::function<void(std::function<int()>)>& set_run) {
  auto* sub = trial->add_subcommand(
      "new", "Create a trial project NAME (NAME.cc, CMakeLists.txt, const.yaml, adaptive.yaml) from the minimal "
             "example");
  sub->add_option("NAME", args.name, "Trial name: the directory, the source file and the library NAME.so")
      ->required();
  sub->add_option("--dir", args.dir, "Where to create NAME/ (default: the current directory)");
  sub->callback([&args, set_run] { set_run([&args] { return TrialNew(args, std::cout, std::cerr); }); });
}

}  // namespace det::cli
