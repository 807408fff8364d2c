// End-to-end tests of local mode: real det-trial processes on the synthetic
// trial, paused with real signals.
#include <signal.h>

#include <filesystem>
#include <regex>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kDetTrial = DET_TRIAL_BIN;
const std::string kDetCli = DET_CLI_BIN;
const std::string kTrialsDir = DET_TRIALS_DIR;
const std::string kSynthetic = kTrialsDir + "/synthetic_trial.so";

// A synthetic config; `extra_hparams` are appended under hyperparameters.
std::string SyntheticConfig(int64_t batches, const std::string& extra_hparams = "") {
  return absl::StrCat(R"(name: synthetic-test
hyperparameters:
  global_batch_size: 32
  learning_rate: 0.01
  hidden_size: 32
  dropout: 0.1
)", extra_hparams, R"(searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: )", batches, R"(
min_validation_period:
  batches: 50
scheduling_unit: 10
reproducibility:
  experiment_seed: 7
data:
  train_size: 1000
  val_size: 256
  features: 16
  seed: 1
)");
}

// `config` with `line` added under searcher (after its name).
std::string WithSearcherLine(const std::string& config, const std::string& line) {
  return absl::StrReplaceAll(config, {{"  name: single\n", absl::StrCat("  name: single\n  ", line, "\n")}});
}

// Largest "batches N" of a training line in det-trial's stdout, or -1.
int64_t LastReportedBatch(const std::string& out) {
  static const std::regex re(R"(\[det-trial\] training\s+batches (\d+))");
  int64_t last = -1;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it) {
    last = std::stoll((*it)[1]);
  }
  return last;
}

std::string PausedCheckpoint(const std::string& out) {
  static const std::regex re(R"(paused at batch \d+; checkpoint (\S+))");
  std::smatch m;
  return std::regex_search(out, m, re) ? m[1].str() : "";
}

// The command after "resume with: " in det-trial's stdout, or "".
std::string ResumeCommand(const std::string& out) {
  static const std::regex re(R"(\[det-trial\] resume with: ([^\n]*))");
  std::smatch m;
  return std::regex_search(out, m, re) ? m[1].str() : "";
}

TEST(LocalModeTest, RunsToCompletionAndWritesCheckpoint) {
  TempDir dir;
  WriteFile(dir / "config.yaml", SyntheticConfig(100));
  std::string out, err;
  int rc = RunProcess({kDetTrial, "--local", dir / "config.yaml", kSynthetic, "--output-dir", dir / "out"}, &out, &err);
  ASSERT_EQ(rc, 0) << out << err;
  EXPECT_THAT(out, HasSubstr("[det-trial] validation batches 100"));
  EXPECT_THAT(out, HasSubstr("completed 100 batches"));
  std::string csv = ReadFile(dir / "out/metrics.csv");
  EXPECT_THAT(csv, HasSubstr("validation,100,"));
  EXPECT_THAT(csv, HasSubstr("validation_accuracy"));
}

TEST(LocalModeTest, DetCliCreateLocalRunsTheTrial) {
  TempDir dir;
  WriteFile(dir / "config.yaml", SyntheticConfig(20));
  std::string out, err;
  int rc = RunProcess({kDetCli, "experiment", "create", "--local", dir / "config.yaml", kSynthetic, "--output-dir",
                       dir / "out", "--no-progress"},
                      &out, &err);
  ASSERT_EQ(rc, 0) << out << err;
  EXPECT_THAT(out, HasSubstr("completed 20 batches"));
}

// Papercut: a missing file is one det-cli error line, not CLI11's format.
TEST(LocalModeTest, DetCliNamesAMissingFileInOneLine) {
  TempDir dir;
  WriteFile(dir / "config.yaml", SyntheticConfig(20));
  std::string out, err;
  EXPECT_EQ(RunProcess({kDetCli, "experiment", "create", dir / "missing.yaml", kSynthetic}, &out, &err), 2);
  EXPECT_EQ(err, "det-cli: error: cannot read " + std::string(dir / "missing.yaml") + ": no such file\n");
  EXPECT_EQ(RunProcess({kDetCli, "experiment", "create", dir / "config.yaml", dir.path()}, &out, &err), 2);
  EXPECT_EQ(err, "det-cli: error: cannot read " + dir.path() + ": is a directory\n");
  EXPECT_EQ(RunProcess({kDetCli, "experiment", "create", "--bogus"}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("det-cli: error: "));
  EXPECT_THAT(err, Not(HasSubstr("ERROR")));
}

// Issue 45: type: log bounds written as values (1e-4..1e-1) instead of
// exponents are refused at create, naming the field and what they would
// sample; nothing runs.
TEST(LocalModeTest, DetCliCreateLocalRefusesLogBoundsThatLookLikeValues) {
  TempDir dir;
  WriteFile(dir / "config.yaml",
            absl::StrReplaceAll(SyntheticConfig(20), {{"  learning_rate: 0.01\n",
                                                       "  learning_rate:\n    type: log\n    minval: 0.0001\n"
                                                       "    maxval: 0.1\n"}}));
  std::string out, err;
  EXPECT_EQ(RunProcess({kDetCli, "experiment", "create", "--local", dir / "config.yaml", kSynthetic, "--output-dir",
                        dir / "out", "--no-progress"},
                       &out, &err),
            2)
      << out << err;
  EXPECT_THAT(err, HasSubstr("config.yaml:6: field 'hyperparameters.learning_rate.minval': type: log bounds are "
                             "exponents of base 10, and minval: 0.0001, maxval: 0.1 would sample "
                             "10^0.0001..10^0.1 = 1.0002..1.2589; give exponents: minval: -4, maxval: -1"));
  EXPECT_THAT(out, Not(HasSubstr("[det-trial] training")));
  EXPECT_FALSE(std::filesystem::exists(dir / "out/metrics.csv"));
}

// Must show 3: paused by SIGTERM twice and resumed, a run reports exactly
// the training and validation metrics of an uninterrupted run.
// Also with mixed precision (bfloat16 autocast, and a loss scaler whose
// scale grows during the run; CheckpointTest.LossScalerStateIsRestored checks
// the scaler's own state survives a checkpoint).
class PauseResumeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PauseResumeTest, PausedTwiceAndResumedMatchesUninterruptedRun) {
  constexpr int64_t kBatches = 400;
  TempDir dir;
  // 3 ms per batch keeps the run long enough to be interrupted twice.
  WriteFile(dir / "config.yaml",
            SyntheticConfig(kBatches, absl::StrCat("  batch_delay_ms: 3\n  mixed_precision: ", GetParam(), "\n")));
  const std::vector<std::string> base = {kDetTrial, "--local", dir / "config.yaml", kSynthetic, "--threads", "1"};

  std::string out, err;
  auto args = base;
  args.insert(args.end(), {"--output-dir", dir / "straight"});
  ASSERT_EQ(RunProcess(args, &out, &err), 0) << out << err;
  const std::string expected = ReadFile(dir / "straight/metrics.csv");
  ASSERT_THAT(expected, HasSubstr(absl::StrCat("validation,", kBatches, ",")));

  std::string resume_from;
  std::string resume_line;  // the command the last paused run printed
  int64_t paused_at = 0;
  for (int round = 0; round < 2; ++round) {
    args = base;
    args.insert(args.end(), {"--output-dir", dir / "paused"});
    if (!resume_from.empty()) args.insert(args.end(), {"--resume", resume_from});
    std::string log = dir / absl::StrCat("round", round);
    Subprocess p(args, log + ".out", log + ".err");
    // Wait until it has trained at least 60 batches past where it started.
    ASSERT_TRUE(PollUntil([&] { return LastReportedBatch(p.Stdout()) >= paused_at + 60; }, std::chrono::seconds(60)))
        << p.Stdout() << p.Stderr();
    p.Signal(SIGTERM);
    ASSERT_EQ(p.Wait(std::chrono::seconds(60)), 0) << p.Stdout() << p.Stderr();
    std::string stdout_text = p.Stdout();
    resume_line = ResumeCommand(stdout_text);
    resume_from = PausedCheckpoint(stdout_text);
    ASSERT_FALSE(resume_from.empty()) << "run was not paused:\n" << stdout_text;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(stdout_text, m, std::regex(R"(paused at batch (\d+))")));
    int64_t at = std::stoll(m[1]);
    ASSERT_GT(at, paused_at);
    ASSERT_LT(at, kBatches);
    paused_at = at;
  }
  // The printed command keeps every flag given (issue 45: it dropped
  // --output-dir): run as printed, it continues into the same directory.
  EXPECT_EQ(resume_line, absl::StrCat("det-trial --local ", dir / "config.yaml", " ", kSynthetic,
                                      " --threads 1 --output-dir ", dir / "paused", " --resume ",
                                      resume_from));
  const std::string bin_dir = std::filesystem::path(kDetTrial).parent_path().string();
  const std::string run_as_printed = absl::StrCat("PATH='", bin_dir, "':\"$PATH\"; exec ", resume_line);
  ASSERT_EQ(RunProcess({"/bin/sh", "-c", run_as_printed}, &out, &err), 0) << resume_line << "\n" << out << err;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("resumed from ", resume_from, " at batch ", paused_at)));
  EXPECT_EQ(ReadFile(dir / "paused/metrics.csv"), expected);
}

INSTANTIATE_TEST_SUITE_P(LocalModeTest, PauseResumeTest, ::testing::Values("none", "bf16"));

// First training loss ("training batches N ... loss X") in det-trial's stdout.
double FirstTrainingLoss(const std::string& out) {
  static const std::regex re(R"(\[det-trial\] training\s+batches \d+.* loss ([0-9.e+-]+))");
  std::smatch m;
  return std::regex_search(out, m, re) ? std::stod(m[1].str()) : -1;
}

// searcher.source_checkpoint_uuid in local mode: the weights of an earlier
// local run's checkpoint (found under the checkpoint directory by uuid),
// training from batch 0. Before, local mode ignored the key silently.
TEST(LocalModeTest, WarmStartsFromAnEarlierLocalCheckpointByUuid) {
  TempDir dir;
  WriteFile(dir / "config.yaml", SyntheticConfig(20));
  std::string scratch, err;
  ASSERT_EQ(RunProcess({kDetTrial, "--local", dir / "config.yaml", kSynthetic, "--output-dir", dir / "out"}, &scratch,
                       &err),
            0)
      << scratch << err;
  static const std::regex done(R"(completed 20 batches; checkpoint \S+/([0-9a-f-]{36}))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(scratch, m, done)) << scratch;
  const std::string uuid = m[1].str();
  WriteFile(dir / "warm.yaml", WithSearcherLine(SyntheticConfig(20), "source_checkpoint_uuid: " + uuid));
  std::string warm;
  ASSERT_EQ(RunProcess({kDetTrial, "--local", dir / "warm.yaml", kSynthetic, "--output-dir", dir / "out"}, &warm, &err),
            0)
      << warm << err;
  EXPECT_THAT(warm, HasSubstr("warm start: model weights from checkpoint " + (dir / "out/checkpoints/" + uuid)));
  EXPECT_THAT(warm, HasSubstr("completed 20 batches"));  // from batch 0: the counters are not the source's
  // Same seed, same data order: only the loaded weights make the first loss lower.
  ASSERT_GT(FirstTrainingLoss(scratch), 0) << scratch;
  EXPECT_LT(FirstTrainingLoss(warm), FirstTrainingLoss(scratch)) << scratch << warm;
}

// Must show 4: each bad input gives one clear error and a non-zero exit.
struct ErrorCase {
  std::string name;
  std::string trial;       // library path
  std::string config;      // config text
  int exit_code;
  std::string message;     // expected in stderr
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class LocalModeErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(LocalModeErrorTest, FailsWithOneClearError) {
  const ErrorCase& c = GetParam();
  TempDir dir;
  WriteFile(dir / "config.yaml", c.config);
  WriteFile(dir / "not_a_library.so", "this is text, not ELF\n");
  std::string trial = absl::StrReplaceAll(c.trial, {{"$TMP", dir.path()}});
  std::string out, err;
  int rc = RunProcess({kDetTrial, "--local", dir / "config.yaml", trial, "--output-dir", dir / "out"}, &out, &err);
  EXPECT_EQ(rc, c.exit_code) << out << err;
  EXPECT_THAT(err, HasSubstr(c.message)) << err;
  // Exactly one error line.
  size_t count = 0;
  for (size_t pos = err.find("error:"); pos != std::string::npos; pos = err.find("error:", pos + 1)) ++count;
  EXPECT_EQ(count, 1u) << err;
  EXPECT_THAT(err, Not(HasSubstr("terminate called")));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LocalModeErrorTest,
    ::testing::Values(
        ErrorCase{"AbiVersionMismatch", kTrialsDir + "/synthetic_trial_abi2.so", SyntheticConfig(10), 3,
                  "was built for trial ABI version 2, but this det-trial supports ABI version 1"},
        ErrorCase{"MissingEntrySymbol", kTrialsDir + "/no_entry_trial.so", SyntheticConfig(10), 3,
                  "has no entry symbol 'det_trial_plugin_entry'"},
        ErrorCase{"NotASharedLibrary", "$TMP/not_a_library.so", SyntheticConfig(10), 3,
                  "as a shared library"},
        ErrorCase{"TrialThrowsInTrainBatch", kSynthetic, SyntheticConfig(10, "  throw_at_batch: 5\n"), 1,
                  "trial SyntheticTrial failed in train_batch (epoch 0, batch 5): synthetic failure at batch 5"},
        ErrorCase{"UnknownConfigField", kSynthetic,
                  absl::StrReplaceAll(SyntheticConfig(10), {{"  max_length:", "  max_lenght:"}}), 2,
                  "config.yaml:11: unknown field 'searcher.max_lenght'"},
        ErrorCase{"WarmStartFromATrialIdNeedsAMaster", kSynthetic,
                  WithSearcherLine(SyntheticConfig(10), "source_trial_id: 3"), 2,
                  "searcher.source_trial_id: local mode has no master to look up trial 3's checkpoint"},
        ErrorCase{"WarmStartFromAMissingCheckpoint", kSynthetic,
                  WithSearcherLine(SyntheticConfig(10), "source_checkpoint_uuid: 0f3c9a1e-5b2d-4c6e-8f10-112233445566"),
                  2, "searcher.source_checkpoint_uuid: no checkpoint 0f3c9a1e-5b2d-4c6e-8f10-112233445566 in"},
        ErrorCase{"WarmStartUuidIsNotAPath", kSynthetic,
                  WithSearcherLine(SyntheticConfig(10), "source_checkpoint_uuid: ../../etc"), 2,
                  "searcher.source_checkpoint_uuid: '../../etc' is not a canonical lower-case UUID"},
        // Issue 49: S3 credentials come from a master; local mode has none.
        ErrorCase{"S3StorageNeedsACluster", kSynthetic,
                  SyntheticConfig(10) + "checkpoint_storage:\n  type: s3\n  bucket: det-test\n", 2,
                  "checkpoint_storage.type: s3 needs a cluster"},
        ErrorCase{"WrongConfigType", kSynthetic,
                  absl::StrReplaceAll(SyntheticConfig(10), {{"scheduling_unit: 10", "scheduling_unit: often"}}), 2,
                  "config.yaml:15: field 'scheduling_unit'"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

}  // namespace
}  // namespace det::testing
