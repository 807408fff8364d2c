// LocalResumeCommand (issue 45: the resume command local mode prints keeps
// every flag that shapes the run; it dropped --output-dir).
#include "trial_runtime/runtime/local_flags.h"

#include <gtest/gtest.h>

namespace det::runtime {
namespace {

TEST(LocalResumeCommandTest, KeepsEveryFlagThatShapesTheRun) {
  Flags flags;
  flags.config_path = "my config.yaml";
  flags.trial_path = "build/trial.so";
  flags.threads = 3;
  flags.output_dir = "out dir";
  flags.checkpoint_dir = "/data/ckpt's";
  flags.metrics_csv = "m.csv";
  flags.no_progress = true;
  flags.device = "cpu";
  flags.seed = "7";               // in the checkpoint: not repeated
  flags.resume = "/old/checkpoint";  // replaced by the new one
  EXPECT_EQ(LocalResumeCommand(flags, 2, "/ck/new one"),
            "det-trial --local 'my config.yaml' build/trial.so --nproc 2 --threads 3 --output-dir 'out dir' "
            "--checkpoint-dir '/data/ckpt'\\''s' --metrics-csv m.csv --no-progress --device cpu "
            "--resume '/ck/new one'");
}

TEST(LocalResumeCommandTest, LeavesOutDefaultsAndAMissingConfig) {
  Flags flags;
  flags.trial_path = "trial.so";
  EXPECT_EQ(LocalResumeCommand(flags, 1, "/ck/a"), "det-trial --local trial.so --resume /ck/a");
}

}  // namespace
}  // namespace det::runtime
