// det-cli's ABI check of a trial.so before it is uploaded or run locally
// (common/abi_check.h): against the libdet_sdk, LibTorch and libstdc++ that
// the det-trial beside det-cli loads.
#ifndef DET_CLI_TRIAL_ABI_CHECK_H_
#define DET_CLI_TRIAL_ABI_CHECK_H_

#include <ostream>
#include <string>

namespace det::cli {

// The det-trial next to this det-cli binary, else "det-trial" (PATH).
std::string DetTrialBeside();

// Reads `trial_path` (never loads it) and the libraries `det_trial` loads
// (FindTrialRuntimeLibraries; a bare name is looked up on PATH). Returns 0
// when it can be loaded; 1 after printing "det-cli: error: <file>: undefined
// symbol ... : likely <cause>" (CheckTrialAbi) to `err`. When the libraries
// cannot be found it prints a warning that only the master checks, and
// returns 0; a file that is not a shared library is left to the master's
// own error.
// `before_upload` adds how to leave the check to the master.
int CheckTrialAbiLocally(const std::string& trial_path, const std::string& det_trial, bool before_upload,
                         std::ostream& err);

}  // namespace det::cli

#endif  // DET_CLI_TRIAL_ABI_CHECK_H_
