// MasterCore::GetTrialMetrics: a trial's metric reports, downsampled for
// charts by default (metric_downsample.h) or at full resolution in bounded
// pages. The store is read in pages so that a trial with millions of
// reports never holds the store's lock (and the writers behind it) for
// long; the downsampled path scans the values compactly (Store::ScanMetrics),
// keeps the scan of a whole chart for the next ask (chart_cache.h) and reads
// whole rows only for the points it keeps.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/core/chart_cache.h"
#include "master/core/master_core.h"
#include "master/core/metric_downsample.h"
#include "master/core/metrics_logs.h"
#include "master/core/proto_convert.h"

namespace det::master {
namespace {

// Rows read from the store per call while downsampling.
constexpr int64_t kScanPage = 10000;
// The most (name, value) pairs one downsampled query holds (16 bytes each:
// 128 MiB), after dropping the names the request did not ask for.
constexpr size_t kMaxScanValues = 8 << 20;

// Drops from rows [first, scan->rows()) the values whose name is not in
// `names` (nothing when it is empty), keeping offsets consistent.
void KeepNames(const google::protobuf::RepeatedPtrField<std::string>& names, size_t first, Store::MetricScan* scan,
               std::vector<bool>* keep_name) {
  if (names.empty()) return;
  for (size_t i = keep_name->size(); i < scan->names.size(); ++i) {
    keep_name->push_back(std::find(names.begin(), names.end(), scan->names[i]) != names.end());
  }
  uint32_t out = scan->offsets[first];
  for (size_t r = first; r < scan->rows(); ++r) {
    const uint32_t begin = scan->offsets[r], end = scan->offsets[r + 1];
    scan->offsets[r] = out;
    for (uint32_t k = begin; k < end; ++k) {
      if ((*keep_name)[static_cast<size_t>(scan->values[k].first)]) scan->values[out++] = scan->values[k];
    }
  }
  scan->offsets[scan->rows()] = out;
  scan->values.resize(out);
}

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

// Appends to *scan the rows after (cursor_batches, cursor_id) in pages,
// dropping names the request did not ask for; raises *max_id to the largest
// id read.
absl::Status ScanPages(Store& store, const apiv1::GetTrialMetricsRequest& req, int64_t cursor_batches,
                       int64_t cursor_id, Store::MetricScan* scan, std::vector<bool>* keep_name, int64_t* max_id) {
  for (;;) {
    const size_t first = scan->rows(), values_before = scan->values.size();
    DET_ASSIGN_OR_RETURN(int64_t n, store.ScanMetrics(req.trial_id(), req.group(), req.include_archived(),
                                                      cursor_batches, cursor_id, kScanPage, scan, kMaxScanValues));
    if (n == 0) break;
    // The store stopped early (not at the end) when this page had that many.
    const bool stopped_early = scan->values.size() - values_before > kMaxScanValues;
    KeepNames(req.metric_names(), first, scan, keep_name);
    for (size_t r = first; r < scan->rows(); ++r) *max_id = std::max(*max_id, scan->ids[r]);
    cursor_batches = scan->batches.back();
    cursor_id = scan->ids.back();
    if (scan->values.size() > kMaxScanValues) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "trial ", req.trial_id(), " has too many metric values to downsample in one query; ask for fewer "
          "metric_names, one group, or full_resolution pages"));
    }
    if (n < kScanPage && !stopped_early) break;
  }
  return absl::OkStatus();
}

// The scan for a downsampled answer. A chart from the first report, without
// archived reports, of every name, starts from the cached scan of that
// trial and group when nothing was archived or deleted since it was built
// and no report arrived out of order, and reads only the rows after it.
// *complete: the scan holds every row up to its largest id (false when a
// report stored while it read landed behind it; then it is not cached).
absl::StatusOr<ChartCache::Entry> ChartScan(Store& store, ChartCache* cache, const apiv1::GetTrialMetricsRequest& req,
                                            int64_t after, bool cacheable, std::vector<bool>* keep_name,
                                            bool* complete) {
  ChartCache::Entry entry;
  std::optional<ChartCache::Entry> cached;
  // Rows up to this id were stored before anything below looked: the scan
  // sees them. Only rows stored after could land behind it.
  int64_t stored_before = 0;
  if (cacheable) {
    DET_ASSIGN_OR_RETURN(stored_before, store.MaxMetricId());
    cached = cache->Take(req.trial_id(), req.group());
  }
  bool fresh = true;
  if (cached && cached->rewrites == store.MetricRewrites()) {
    bool out_of_order = false;
    if (cached->scan.rows() > 0) {
      DET_ASSIGN_OR_RETURN(out_of_order,
                           store.MetricsReportedOutOfOrder(req.trial_id(), req.group(), cached->max_id,
                                                           cached->scan.batches.back(), cached->scan.ids.back()));
    }
    fresh = out_of_order;
  }
  if (fresh) {
    entry.rewrites = store.MetricRewrites();  // read before the scan: a rewrite meanwhile makes it stale
  } else {
    entry = *std::move(cached);
  }
  int64_t cursor_batches = after, cursor_id = req.after_id();
  if (entry.scan.rows() > 0) {
    cursor_batches = entry.scan.batches.back();
    cursor_id = entry.scan.ids.back();
  }
  const size_t rows_before = entry.scan.rows();
  DET_RETURN_IF_ERROR(ScanPages(store, req, cursor_batches, cursor_id, &entry.scan, keep_name, &entry.max_id));
  *complete = true;
  if (cacheable && entry.max_id > stored_before) {
    int64_t scanned = 0;
    for (size_t r = rows_before; r < entry.scan.rows(); ++r) scanned += entry.scan.ids[r] > stored_before ? 1 : 0;
    DET_ASSIGN_OR_RETURN(int64_t stored,
                         store.CountMetricsInIdRange(req.trial_id(), req.group(), stored_before, entry.max_id));
    *complete = stored == scanned;
  }
  return entry;
}

// The rows after a series' last closed 64-block the rollup path reads at
// most (all its series together); beyond, the chart scans.
constexpr int64_t kMaxRollupTailRows = 4096;

// The most groups of a trial an all-groups chart reads from rollups, one
// group at a time; a trial with more is scanned.
constexpr size_t kMaxRollupGroups = 64;

// What RollupDownsampled did.
enum class RollupAnswer {
  kAnswered,    // the answer is written
  kNotCovered,  // the rollups do not cover every row (Store::ReadRollupChart)
  kScanGroup,   // no series, or one needs buckets narrower than a 64-point
                // block or none (its group fits): only this group's rows
};

// The downsampled answer of one group from its chart rollups
// (metric_rollups.h): the same points a scan chooses, read in O(points).
// Nothing written unless kAnswered; the caller then scans.
absl::StatusOr<RollupAnswer> RollupDownsampled(Store& store, const apiv1::GetTrialMetricsRequest& req,
                                       apiv1::GetTrialMetricsResponse* resp) {
  const size_t max_points = req.limit() > 0 ? static_cast<size_t>(req.limit()) : kDefaultChartPoints;
  std::vector<RollupChartSeries> series;
  DET_ASSIGN_OR_RETURN(bool covered, store.ReadRollupChart(
                                         req.trial_id(), req.group(),
                                         [max_points](int64_t n) {
                                           return static_cast<int64_t>(
                                               ChartBucketWidth(static_cast<size_t>(n), max_points));
                                         },
                                         kMaxRollupTailRows, &series));
  if (!covered) return RollupAnswer::kNotCovered;
  if (series.empty()) return RollupAnswer::kScanGroup;
  std::map<int64_t, std::vector<std::string>> picked;  // row id -> names whose series chose it
  for (const RollupChartSeries& s : series) {
    if (s.width < kRollupWidths[0]) return RollupAnswer::kScanGroup;
    std::vector<RollupRun> runs;
    if (!RollupRunsFor(s.blocks, s.points, s.width, s.tail, &runs)) return RollupAnswer::kNotCovered;
    std::vector<int64_t> ids = {s.first_id, s.last_id};
    for (const PointExtremes& b : MergeRunsIntoBuckets(runs, s.width)) {
      if (b.count == 0) continue;
      ids.push_back(b.lo);
      ids.push_back(b.hi);
    }
    for (int64_t id : ids) {
      std::vector<std::string>& names = picked[id];
      if (names.empty() || names.back() != s.name) names.push_back(s.name);
    }
  }
  std::vector<MetricRow> rows;
  std::vector<int64_t> ids;
  for (auto it = picked.begin(); it != picked.end();) {
    ids.push_back(it->first);
    if (++it == picked.end() || ids.size() == static_cast<size_t>(kMaxMetricsPage)) {
      DET_ASSIGN_OR_RETURN(std::vector<MetricRow> page, store.GetMetricsByIds(ids));
      for (MetricRow& r : page) rows.push_back(std::move(r));
      ids.clear();
    }
  }
  std::sort(rows.begin(), rows.end(), [](const MetricRow& a, const MetricRow& b) {
    return std::tie(a.total_batches, a.id) < std::tie(b.total_batches, b.id);
  });
  for (MetricRow& r : rows) {
    std::map<std::string, double> kept;
    for (const std::string& name : picked.at(r.id)) {
      auto it = r.metrics.find(name);
      if (it != r.metrics.end()) kept.insert(*it);
    }
    r.metrics = std::move(kept);
    *resp->add_metrics() = MetricProto(r);
  }
  resp->set_downsampled(true);
  return RollupAnswer::kAnswered;
}

absl::Status ScanDownsampled(Store& store, ChartCache* cache, const apiv1::GetTrialMetricsRequest& req,
                             int64_t after, bool cacheable, apiv1::GetTrialMetricsResponse* resp);

// The downsampled chart of every group (a request without a group) from the
// groups' rollups. Downsampling is per series (group, name) and whether a
// group fits is decided per group (DownsampleScan), so the all-groups
// answer is the one-group answers merged in (total_batches, id) order,
// downsampled when any is. A group whose rollups need not answer
// (kScanGroup) is scanned alone, as its one-group chart is. False (nothing
// written) when the trial has no groups or more than kMaxRollupGroups, or a
// group is not covered by rollups: the caller scans every row.
absl::StatusOr<bool> AllGroupsFromRollups(Store& store, ChartCache* cache, const apiv1::GetTrialMetricsRequest& req,
                                          apiv1::GetTrialMetricsResponse* resp) {
  DET_ASSIGN_OR_RETURN(std::vector<std::string> groups, store.ListMetricGroups(req.trial_id(), kMaxRollupGroups));
  if (groups.empty() || groups.size() > kMaxRollupGroups) return false;
  std::vector<apiv1::GetTrialMetricsResponse> parts(groups.size());
  std::vector<size_t> scan_groups;
  apiv1::GetTrialMetricsRequest one = req;
  for (size_t i = 0; i < groups.size(); ++i) {
    one.set_group(groups[i]);
    DET_ASSIGN_OR_RETURN(RollupAnswer answer, RollupDownsampled(store, one, &parts[i]));
    if (answer == RollupAnswer::kNotCovered) return false;
    if (answer == RollupAnswer::kScanGroup) scan_groups.push_back(i);
  }
  for (size_t i : scan_groups) {
    one.set_group(groups[i]);
    DET_RETURN_IF_ERROR(ScanDownsampled(store, cache, one, -1, true, &parts[i]));
  }
  std::vector<apiv1::MetricsReport*> all;
  bool downsampled = false;
  for (apiv1::GetTrialMetricsResponse& part : parts) {
    downsampled = downsampled || part.downsampled();
    for (apiv1::MetricsReport& m : *part.mutable_metrics()) all.push_back(&m);
  }
  std::sort(all.begin(), all.end(), [](const apiv1::MetricsReport* a, const apiv1::MetricsReport* b) {
    return std::make_pair(a->total_batches(), a->id()) < std::make_pair(b->total_batches(), b->id());
  });
  for (apiv1::MetricsReport* m : all) *resp->add_metrics() = std::move(*m);
  resp->set_downsampled(downsampled);
  return true;
}

// The downsampled answer: a chart from the first report, without archived
// reports, of every name, from the rollups when they answer; otherwise
// ScanDownsampled.
absl::Status Downsampled(Store& store, ChartCache* cache, const apiv1::GetTrialMetricsRequest& req, int64_t after,
                         apiv1::GetTrialMetricsResponse* resp) {
  const bool cacheable = !req.include_archived() && after < 0 && req.metric_names_size() == 0;
  if (cacheable && !req.group().empty()) {  // one group's chart from its rollups, when they answer
    DET_ASSIGN_OR_RETURN(RollupAnswer answer, RollupDownsampled(store, req, resp));
    if (answer == RollupAnswer::kAnswered) return absl::OkStatus();
  } else if (cacheable) {  // every group's, when the rollups answer each
    DET_ASSIGN_OR_RETURN(bool answered, AllGroupsFromRollups(store, cache, req, resp));
    if (answered) return absl::OkStatus();
  }
  return ScanDownsampled(store, cache, req, after, cacheable, resp);
}

// The downsampled answer from a scan: scan, choose, then read the chosen
// rows whole.
absl::Status ScanDownsampled(Store& store, ChartCache* cache, const apiv1::GetTrialMetricsRequest& req,
                             int64_t after, bool cacheable, apiv1::GetTrialMetricsResponse* resp) {
  std::vector<bool> keep_name;
  bool complete = false;
  DET_ASSIGN_OR_RETURN(ChartCache::Entry entry,
                       ChartScan(store, cache, req, after, cacheable, &keep_name, &complete));
  const Store::MetricScan& scan = entry.scan;
  bool downsampled = false;
  const size_t points = req.limit() > 0 ? static_cast<size_t>(req.limit()) : kDefaultChartPoints;
  std::vector<ScanPick> picks = DownsampleScan(scan, keep_name, points, &downsampled);
  resp->set_downsampled(downsampled);
  std::map<int64_t, const ScanPick*> by_id;
  for (const ScanPick& p : picks) by_id.emplace(scan.ids[p.row], &p);
  for (size_t start = 0; start < picks.size(); start += kMaxMetricsPage) {
    std::vector<int64_t> ids;
    for (size_t i = start; i < std::min(picks.size(), start + kMaxMetricsPage); ++i) ids.push_back(scan.ids[picks[i].row]);
    DET_ASSIGN_OR_RETURN(std::vector<MetricRow> rows, store.GetMetricsByIds(ids));
    for (MetricRow& r : rows) {
      const ScanPick& p = *by_id.at(r.id);
      if (p.whole) {
        FilterNames(req.metric_names(), &r);
      } else {
        std::map<std::string, double> kept;
        for (int32_t n : p.names) {
          auto it = r.metrics.find(scan.names[static_cast<size_t>(n)]);
          if (it != r.metrics.end()) kept.insert(*it);
        }
        r.metrics = std::move(kept);
      }
      *resp->add_metrics() = MetricProto(r);
    }
  }
  if (cacheable && complete) cache->Put(req.trial_id(), req.group(), std::move(entry));
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
  if (!req.full_resolution()) {
    DET_RETURN_IF_ERROR(Downsampled(*store_, &chart_cache_, req, after, &resp));
    return resp;
  }
  const int64_t page = req.limit() > 0 ? req.limit() : kMaxMetricsPage;
  DET_ASSIGN_OR_RETURN(std::vector<MetricRow> rows,
                       store_->ListMetrics(req.trial_id(), req.group(), req.include_archived(), after, page + 1,
                                           req.after_id()));
  if (static_cast<int64_t>(rows.size()) > page) {
    rows.resize(static_cast<size_t>(page));
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

}  // namespace det::master
