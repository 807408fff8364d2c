#include "trial_runtime/runtime/local_reporter.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace det::runtime {
namespace fs = std::filesystem;

constexpr char kCsvHeader[] = "group,total_batches,epochs,metric,value";

absl::StatusOr<std::unique_ptr<LocalReporter>> LocalReporter::Open(const std::string& csv_path, bool progress_bar,
                                                                   std::optional<int64_t> keep_up_to_batch,
                                                                   std::string searcher_metric,
                                                                   bool smaller_is_better) {
  std::error_code ec;
  fs::path parent = fs::path(csv_path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  bool exists = fs::exists(csv_path);
  std::vector<std::pair<double, int64_t>> kept_values;
  if (exists && keep_up_to_batch) {
    std::ifstream in(csv_path);
    std::string line, kept;
    while (std::getline(in, line)) {
      std::vector<std::string> cols = absl::StrSplit(line, ',');
      int64_t batches = 0;
      double value = 0;
      if (cols.size() == 5 && absl::SimpleAtoi(cols[1], &batches)) {
        if (batches > *keep_up_to_batch) continue;
        if (cols[0] == "validation" && cols[3] == searcher_metric && absl::SimpleAtod(cols[4], &value)) {
          kept_values.emplace_back(value, batches);
        }
      }
      kept += line + "\n";
    }
    in.close();
    std::ofstream out(csv_path, std::ios::trunc);
    out << kept;
  }
  FILE* f = std::fopen(csv_path.c_str(), "a");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot open metrics file '", csv_path, "'"));
  if (!exists) std::fprintf(f, "%s\n", kCsvHeader);
  std::fflush(f);
  std::unique_ptr<LocalReporter> r(new LocalReporter(f, progress_bar, std::move(searcher_metric), smaller_is_better));
  for (const auto& [value, batch] : kept_values) r->Consider(value, batch);
  return r;
}

void LocalReporter::Consider(double value, int64_t batch) {
  if (!best_ || (smaller_is_better_ ? value < best_->first : value > best_->first)) best_ = {value, batch};
}

LocalReporter::~LocalReporter() {
  ClearProgress();
  std::fclose(csv_);
}

void LocalReporter::ClearProgress() {
  if (progress_shown_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    progress_shown_ = false;
  }
}

absl::Status LocalReporter::Write(const char* group, int64_t total_batches, double epochs,
                                  const MetricsMap& metrics) {
  ClearProgress();
  std::string line = absl::StrFormat("[det-trial] %-10s batches %-7d epochs %-8.4f", group, total_batches, epochs);
  for (const auto& [name, value] : metrics) {
    absl::StrAppendFormat(&line, " %s %.6g", name, value);
    std::fprintf(csv_, "%s,%lld,%.17g,%s,%.17g\n", group, static_cast<long long>(total_batches), epochs, name.c_str(), value);
  }
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
  if (std::fflush(csv_) != 0) return absl::InternalError("cannot write the metrics CSV file");
  return absl::OkStatus();
}

absl::Status LocalReporter::ReportTrainingMetrics(int64_t total_batches, double epochs, const MetricsMap& metrics) {
  return Write("training", total_batches, epochs, metrics);
}

absl::Status LocalReporter::ReportValidationMetrics(int64_t total_batches, double epochs,
                                                    const MetricsMap& metrics) {
  auto it = metrics.find(metric_);
  if (it != metrics.end()) Consider(it->second, total_batches);
  return Write("validation", total_batches, epochs, metrics);
}

absl::Status LocalReporter::ReportCheckpoint(const SavedCheckpoint& checkpoint, int64_t total_batches) {
  ClearProgress();
  std::fprintf(stdout, "[det-trial] checkpoint batches %-7lld %s\n", static_cast<long long>(total_batches),
               checkpoint.path.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

void LocalReporter::ReportProgress(int64_t total_batches, int64_t target_batches) {
  if (!progress_bar_) return;
  auto now = std::chrono::steady_clock::now();
  if (!first_batch_) {
    first_batch_ = total_batches - 1;
    start_ = now;
  }
  if (now - last_draw_ < std::chrono::milliseconds(100) && total_batches != target_batches) return;
  last_draw_ = now;
  double frac = target_batches > 0 ? static_cast<double>(total_batches) / static_cast<double>(target_batches) : 1;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(frac * kWidth);
  double secs = std::chrono::duration<double>(now - start_).count();
  double rate = secs > 0 ? static_cast<double>(total_batches - *first_batch_) / secs : 0;
  std::fprintf(stderr, "\r[%s%s] %3.0f%% %lld/%lld batches %.1f batches/s\033[K", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, ' ').c_str(), frac * 100, static_cast<long long>(total_batches),
               static_cast<long long>(target_batches), rate);
  std::fflush(stderr);
  progress_shown_ = true;
}

}  // namespace det::runtime
