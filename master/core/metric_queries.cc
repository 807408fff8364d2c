// MasterCore::GetTrialMetrics: a trial's metric reports, downsampled for
// charts by default (metric_downsample.h) or at full resolution in bounded
// pages. The store is read in pages so that a trial with millions of
// reports never holds the store's lock (and the writers behind it) for long.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/core/master_core.h"
#include "master/core/metric_downsample.h"
#include "master/core/metrics_logs.h"
#include "master/core/proto_convert.h"

namespace det::master {
namespace {

// Rows read from the store per call while downsampling.
constexpr int64_t kScanPage = 50000;

// Keeps only the metrics `names` lists (all when empty).
void FilterNames(const google::protobuf::RepeatedPtrField<std::string>& names, MetricRow* row) {
  if (names.empty()) return;
  for (auto it = row->metrics.begin(); it != row->metrics.end();) {
    if (std::find(names.begin(), names.end(), it->first) == names.end()) {
      it = row->metrics.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status ValidateMetricsRequest(const apiv1::GetTrialMetricsRequest& req) {
  if (!req.group().empty()) DET_RETURN_IF_ERROR(ValidateMetricGroup(req.group()));
  if (req.after_total_batches() < 0 || req.after_id() < 0 || req.limit() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("after_total_batches, after_id and limit must be >= 0, got ",
                                                   req.after_total_batches(), ", ", req.after_id(), ", ",
                                                   req.limit()));
  }
  const int max = req.full_resolution() ? kMaxMetricsPage : kMaxChartPoints;
  if (req.limit() > max) {
    return absl::InvalidArgumentError(absl::StrCat("limit must be at most ", max,
                                                   req.full_resolution() ? " reports per page" : " points per series",
                                                   ", got ", req.limit()));
  }
  if (req.metric_names_size() > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("metric_names: at most 1000, got ", req.metric_names_size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<apiv1::GetTrialMetricsResponse> MasterCore::GetTrialMetrics(const apiv1::GetTrialMetricsRequest& req) {
  DET_RETURN_IF_ERROR(ValidateMetricsRequest(req));
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_RETURN_IF_ERROR(FindTrial(req.trial_id()).status());
  }
  // The store's "after" is exclusive: -1 reads from the start (0 is valid).
  const int64_t after = req.after_total_batches() > 0 || req.after_id() > 0 ? req.after_total_batches() : -1;
  apiv1::GetTrialMetricsResponse resp;
  if (req.full_resolution()) {
    const int64_t page = req.limit() > 0 ? req.limit() : kMaxMetricsPage;
    DET_ASSIGN_OR_RETURN(std::vector<MetricRow> rows,
                         store_->ListMetrics(req.trial_id(), req.group(), req.include_archived(), after, page + 1,
                                             req.after_id()));
    if (static_cast<int64_t>(rows.size()) > page) {
      rows.resize(page);
      resp.set_has_more(true);
      resp.set_next_after_total_batches(rows.back().total_batches);
      resp.set_next_after_id(rows.back().id);
    }
    for (MetricRow& r : rows) {
      FilterNames(req.metric_names(), &r);
      *resp.add_metrics() = MetricProto(r);
    }
    return resp;
  }
  std::vector<MetricRow> rows;
  int64_t cursor_batches = after, cursor_id = req.after_id();
  for (;;) {
    DET_ASSIGN_OR_RETURN(std::vector<MetricRow> page,
                         store_->ListMetrics(req.trial_id(), req.group(), req.include_archived(), cursor_batches,
                                             kScanPage, cursor_id));
    if (page.empty()) break;
    cursor_batches = page.back().total_batches;
    cursor_id = page.back().id;
    const bool last = static_cast<int64_t>(page.size()) < kScanPage;
    for (MetricRow& r : page) {
      FilterNames(req.metric_names(), &r);
      rows.push_back(std::move(r));
    }
    if (last) break;
  }
  bool downsampled = false;
  rows = DownsampleReports(std::move(rows), req.limit() > 0 ? req.limit() : kDefaultChartPoints, &downsampled);
  resp.set_downsampled(downsampled);
  for (const MetricRow& r : rows) *resp.add_metrics() = MetricProto(r);
  return resp;
}

}  // namespace det::master
