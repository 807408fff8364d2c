#include "trial_runtime/runtime/local_flags.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shell_quote.h"

namespace det::runtime {

std::string LocalResumeCommand(const Flags& flags, int world_size, const std::string& checkpoint) {
  std::vector<std::string> words = {"det-trial", "--local"};
  if (!flags.config_path.empty()) words.push_back(flags.config_path);
  words.push_back(flags.trial_path);
  if (world_size > 1) words.insert(words.end(), {"--nproc", std::to_string(world_size)});
  if (flags.threads > 0) words.insert(words.end(), {"--threads", std::to_string(flags.threads)});
  if (flags.output_dir != kDefaultOutputDir) words.insert(words.end(), {"--output-dir", flags.output_dir});
  if (!flags.checkpoint_dir.empty()) words.insert(words.end(), {"--checkpoint-dir", flags.checkpoint_dir});
  if (!flags.metrics_csv.empty()) words.insert(words.end(), {"--metrics-csv", flags.metrics_csv});
  if (flags.no_progress) words.push_back("--no-progress");
  if (flags.device != kDefaultDevice) words.insert(words.end(), {"--device", flags.device});
  words.insert(words.end(), {"--resume", checkpoint});
  std::string command;
  for (const auto& w : words) absl::StrAppend(&command, command.empty() ? "" : " ", ShellWord(w));
  return command;
}

}  // namespace det::runtime
