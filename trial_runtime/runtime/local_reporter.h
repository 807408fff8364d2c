// Reporter for local mode: metric lines on stdout, a CSV history file, and a
// progress bar on stderr when it is a terminal.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_LOCAL_REPORTER_H_
#define DET_TRIAL_RUNTIME_RUNTIME_LOCAL_REPORTER_H_

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "trial_runtime/runtime/trial_controller.h"

namespace det::runtime {

class LocalReporter final : public Reporter {
 public:
  // Opens csv_path for appending (writing a header when new). When
  // keep_up_to_batch is set (resuming), rows of later batches, reported by
  // the earlier run after its checkpoint, are dropped first.
  // `searcher_metric` (smaller better when `smaller_is_better`) is tracked
  // for best(), including rows kept from an earlier run.
  static absl::StatusOr<std::unique_ptr<LocalReporter>> Open(const std::string& csv_path, bool progress_bar,
                                                             std::optional<int64_t> keep_up_to_batch,
                                                             std::string searcher_metric, bool smaller_is_better);
  ~LocalReporter() override;

  absl::Status ReportTrainingMetrics(int64_t total_batches, double epochs, const MetricsMap& metrics) override;
  absl::Status ReportValidationMetrics(int64_t total_batches, double epochs, const MetricsMap& metrics) override;
  absl::Status ReportMetrics(const std::string& group, int64_t total_batches, double epochs,
                             const MetricsMap& metrics) override {
    return Write(group.c_str(), total_batches, epochs, metrics);
  }
  absl::Status ReportCheckpoint(const SavedCheckpoint& checkpoint, int64_t total_batches) override;
  void ReportProgress(int64_t total_batches, int64_t target_batches) override;

  // Best searcher-metric value reported so far and its batch.
  std::optional<std::pair<double, int64_t>> best() const { return best_; }

 private:
  LocalReporter(FILE* csv, bool progress_bar, std::string metric, bool smaller_is_better)
      : csv_(csv), progress_bar_(progress_bar), metric_(std::move(metric)), smaller_is_better_(smaller_is_better) {}
  void Consider(double value, int64_t batch);
  absl::Status Write(const char* group, int64_t total_batches, double epochs, const MetricsMap& metrics);
  void ClearProgress();

  FILE* csv_;
  bool progress_bar_;
  bool progress_shown_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::optional<int64_t> first_batch_;
  std::string metric_;
  bool smaller_is_better_;
  std::optional<std::pair<double, int64_t>> best_;
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_LOCAL_REPORTER_H_
