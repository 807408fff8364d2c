// Validation reducers end to end (issue 45): det-trial --local on a trial
// whose last validation batch is smaller than the rest (600 samples, batch
// 64: the last holds 24). The default kAvg is the per-sample mean, on one rank
// and on two; kAvgPerBatch is the mean of the per-batch values; a batch
// without tensors falls back to the per-batch mean with one warning.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

const std::string kDetTrial = DET_TRIAL_BIN;
const std::string kTrial = std::string(DET_TRIALS_DIR) + "/ragged_validation_trial.so";
constexpr int64_t kSamples = 600;
constexpr int64_t kBatch = 64;

// Same formula as the trial's SampleValue.
double SampleValue(int64_t i) { return static_cast<double>((i * 37) % 101) / 101.0; }

double PerSampleMean() {
  double sum = 0;
  for (int64_t i = 0; i < kSamples; ++i) sum += SampleValue(i);
  return sum / kSamples;
}

double PerBatchMean() {
  double sum_of_means = 0;
  int64_t batches = 0;
  for (int64_t b = 0; b * kBatch < kSamples; ++b, ++batches) {
    double sum = 0;
    int64_t end = std::min((b + 1) * kBatch, kSamples);
    for (int64_t i = b * kBatch; i < end; ++i) sum += SampleValue(i);
    sum_of_means += sum / static_cast<double>(end - b * kBatch);
  }
  return sum_of_means / static_cast<double>(batches);
}

std::string Config(const std::string& hparams) {
  return absl::StrCat(R"(name: ragged-validation
hyperparameters:
  global_batch_size: 64
)", hparams, R"(searcher:
  name: single
  metric: score
  max_length:
    batches: 4
min_validation_period:
  batches: 2
reproducibility:
  experiment_seed: 3
)");
}

// The "score" values of metrics.csv's validation rows, in order.
std::vector<double> StoredScores(const std::string& csv) {
  static const std::regex re(R"(^validation,\d+,[^,]+,score,(\S+)$)");
  std::vector<double> out;
  std::istringstream in(csv);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, re)) out.push_back(std::stod(m[1].str()));
  }
  return out;
}

struct TrialRun {
  std::string out, err;
  std::vector<double> scores;
};

TrialRun RunTrial(const std::string& hparams, const std::vector<std::string>& extra = {}) {
  TempDir dir;
  WriteFile(dir / "config.yaml", Config(hparams));
  std::vector<std::string> argv = {kDetTrial, "--local", dir / "config.yaml", kTrial, "--output-dir", dir / "out",
                                   "--no-progress"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  TrialRun r;
  int rc = RunProcess(argv, &r.out, &r.err);
  EXPECT_EQ(rc, 0) << r.out << r.err;
  r.scores = StoredScores(ReadFile(dir / "out/metrics.csv"));
  return r;
}

TEST(ValidationReducerTest, ExpectedMeansDiffer) {
  // Otherwise the tests below could not tell the reducers apart.
  EXPECT_GT(std::abs(PerSampleMean() - PerBatchMean()), 1e-4) << PerSampleMean() << " " << PerBatchMean();
}

TEST(ValidationReducerTest, DefaultAverageIsThePerSampleMean) {
  TrialRun r = RunTrial("");
  ASSERT_EQ(r.scores.size(), 2u) << r.out;
  for (double s : r.scores) EXPECT_NEAR(s, PerSampleMean(), 1e-6);
  char printed[64];
  std::snprintf(printed, sizeof(printed), "score %.6g", PerSampleMean());
  EXPECT_THAT(r.out, HasSubstr(printed));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("warning: validation metric")));
}

TEST(ValidationReducerTest, DefaultAverageIsThePerSampleMeanOverTwoRanks) {
  // Each rank's last batch holds 12 samples; the counts cross the all-gather.
  TrialRun r = RunTrial("", {"--nproc", "2", "--threads", "1"});
  ASSERT_EQ(r.scores.size(), 2u) << r.out << r.err;
  for (double s : r.scores) EXPECT_NEAR(s, PerSampleMean(), 1e-6);
}

TEST(ValidationReducerTest, AvgPerBatchIsThePerBatchMean) {
  TrialRun r = RunTrial("  reducer: avg_per_batch\n");
  ASSERT_EQ(r.scores.size(), 2u) << r.out;
  for (double s : r.scores) EXPECT_NEAR(s, PerBatchMean(), 1e-6);
}

TEST(ValidationReducerTest, TensorlessBatchesFallBackToPerBatchMeanWithOneWarning) {
  TrialRun r = RunTrial("  tensorless: true\n");
  ASSERT_EQ(r.scores.size(), 2u) << r.out;
  for (double s : r.scores) EXPECT_NEAR(s, PerBatchMean(), 1e-6);
  const std::string warning = "det-trial: warning: validation metric 'score': a validation batch holds no tensor";
  size_t first = r.err.find(warning);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning, first + 1), std::string::npos) << "warned more than once:\n" << r.err;
  EXPECT_THAT(r.err, HasSubstr("kAvgPerBatch"));
}

}  // namespace
}  // namespace det::testing
