#include "cli/trial_abi_check.h"

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/abi_check.h"
#include "common/elf_symbols.h"

namespace det::cli {

namespace fs = std::filesystem;

std::string DetTrialBeside() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path sibling = self.parent_path() / "det-trial";
    if (fs::exists(sibling, ec)) return sibling.string();
  }
  return "det-trial";
}

int CheckTrialAbiLocally(const std::string& trial_path, const std::string& det_trial, bool before_upload,
                         std::ostream& err) {
  const std::string file_name = fs::path(trial_path).filename().string();
  absl::StatusOr<ElfDynamicInfo> trial = ReadElfDynamic(trial_path, trial_path);
  if (!trial.ok()) return 0;  // not a shared library: the master says what is wrong
  absl::StatusOr<std::vector<std::string>> libs = FindTrialRuntimeLibraries(det_trial);
  absl::StatusOr<AbiManifest> manifest =
      libs.ok() ? BuildAbiManifest(*libs) : absl::StatusOr<AbiManifest>(libs.status());
  if (!manifest.ok()) {
    err << "det-cli: warning: cannot check " << file_name << " against this host's LibTorch and Trial SDK ("
        << manifest.status().message() << "); the master checks it against its agents'\n";
    return 0;
  }
  absl::Status st = CheckTrialAbi(*trial, *manifest, trial_path,
                                  absl::StrCat("the libraries of ", det_trial, " (", absl::StrJoin(*libs, ", "), ")"));
  if (st.ok()) return 0;
  err << "det-cli: error: " << st.message()
      << (before_upload ? " (checked before the upload; --no-local-abi-check leaves the check to the master)" : "")
      << '\n';
  return 1;
}

}  // namespace det::cli
