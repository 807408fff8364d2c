// det-trial's exit codes: the contract between the trial runtime, which exits
// with them, and the master, which decides from them whether a failed trial is
// retried (see max_restarts).
#ifndef DET_COMMON_EXIT_CODES_H_
#define DET_COMMON_EXIT_CODES_H_

namespace det {

// The trial failed (an exception in its code, a failed checkpoint...):
// restarted from its latest checkpoint up to max_restarts times.
inline constexpr int kExitTrialError = 1;
// A bad config or hyperparameter: fails the same way every time, not retried.
inline constexpr int kExitConfigError = 2;
// An unusable trial.so (wrong ABI, missing entry): not retried.
inline constexpr int kExitLibraryError = 3;
// A managed run that lost its master (unreachable for longer than
// DET_MASTER_RETRY_TIMEOUT_S, default 600 s), its allocation (the master gave
// up on it) or the agent that started it. Not the trial's fault: the master
// resumes the trial from its latest checkpoint without counting a restart.
inline constexpr int kExitMasterUnreachable = 4;
// The trial's constructor or one of its data loader builders
// (build_training_data_loader, build_validation_data_loader) threw, e.g. a
// data file it opens is missing. A file system may have been briefly at
// fault, so the master retries such a trial once; when the retry fails the
// same way the trial is ERROR with the exception's text, whatever
// max_restarts allows.
inline constexpr int kExitTrialSetupError = 5;

}  // namespace det

#endif  // DET_COMMON_EXIT_CODES_H_
