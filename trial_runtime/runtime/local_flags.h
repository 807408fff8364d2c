// det-trial --local's command line, and the command that resumes a paused
// local run with the same flags.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_LOCAL_FLAGS_H_
#define DET_TRIAL_RUNTIME_RUNTIME_LOCAL_FLAGS_H_

#include <string>

namespace det::runtime {

inline constexpr char kDefaultOutputDir[] = "det-output";
inline constexpr char kDefaultDevice[] = "auto";

struct Flags {
  bool local = false;
  std::string config_path;
  std::string trial_path;
  std::string resume;
  std::string output_dir = kDefaultOutputDir;
  std::string checkpoint_dir;
  std::string metrics_csv;
  int threads = 0;
  bool no_progress = false;
  int nproc = 1;
  std::string device = kDefaultDevice;
  std::string seed;  // decimal; empty: from the checkpoint, the config, or random
};

// The command that resumes a paused local run of `world_size` ranks from
// `checkpoint`: every flag of `flags` that shapes the run and differs from its
// default (the config, the trial, --nproc, --threads, --output-dir,
// --checkpoint-dir, --metrics-csv, --no-progress, --device), each word
// shell-quoted; not --seed (the checkpoint has it) nor an earlier --resume.
std::string LocalResumeCommand(const Flags& flags, int world_size, const std::string& checkpoint);

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_LOCAL_FLAGS_H_
