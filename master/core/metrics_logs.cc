// MasterCore: metric groups, the validation history, metric streams and log
// filters (see master_core.h), and their pure helpers (metrics_logs.h).
#include "master/core/metrics_logs.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"
#include "master/store/metric_limits.h"

namespace det::master {

namespace {
constexpr size_t kMaxSearchText = 1024;
constexpr int kMaxMetricRows = 1000;
constexpr size_t kMaxFilterValues = 100;
constexpr size_t kMaxStreamTrials = 1000;
}  // namespace

absl::Status ValidateMetricGroup(const std::string& group, const char* field) {
  bool ok = !group.empty() && group.size() <= 64;
  for (char c : group) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must match [a-z0-9_]{1,64}, got '", group.substr(0, 80), "'"));
}

std::vector<apiv1::ValidationHistoryEntry> BestSoFar(const std::vector<ValidationPoint>& points,
                                                     const std::string& metric, bool smaller_is_better) {
  std::vector<apiv1::ValidationHistoryEntry> out;
  bool have = false;
  double best = 0;
  for (const ValidationPoint& p : points) {
    auto it = p.metrics.find(metric);
    if (it == p.metrics.end() || std::isnan(it->second)) continue;
    const double v = it->second;
    if (have && !(smaller_is_better ? v < best : v > best)) continue;
    have = true;
    best = v;
    apiv1::ValidationHistoryEntry e;
    e.set_trial_id(p.trial_id);
    SetTime(e.mutable_end_time(), p.time_ms);
    e.set_searcher_metric(v);
    e.set_total_batches(p.total_batches);
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status ValidateTrialLogsRequest(const apiv1::TrialLogsRequest& req) {
  if (req.offset() < 0 || req.limit() < 0 || req.tail() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset, limit and tail must be >= 0, got ", req.offset(), ", ",
                                                   req.limit(), ", ", req.tail()));
  }
  if (req.offset() > 0 && req.tail() > 0) return absl::InvalidArgumentError("offset and tail are exclusive");
  if (req.search_text().size() > kMaxSearchText) {
    return absl::InvalidArgumentError(
        absl::StrCat("search_text: ", req.search_text().size(), " bytes; at most ", kMaxSearchText));
  }
  return absl::OkStatus();
}

absl::StatusOr<TaskLogFilter> TaskLogFilterOf(const apiv1::TrialLogsRequest& req, int64_t after_id) {
  auto bound = [](int n, const char* field) -> absl::Status {
    if (static_cast<size_t>(n) <= kMaxFilterValues) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", n, " values; at most ", kMaxFilterValues));
  };
  DET_RETURN_IF_ERROR(bound(req.levels_size(), "levels"));
  DET_RETURN_IF_ERROR(bound(req.stdtypes_size(), "stdtypes"));
  DET_RETURN_IF_ERROR(bound(req.ranks_size(), "ranks"));
  DET_RETURN_IF_ERROR(bound(req.allocation_ids_size(), "allocation_ids"));
  TaskLogFilter f;
  f.trial_id = req.trial_id();
  f.after_id = after_id;
  for (int level : req.levels()) f.levels.push_back(apiv1::LogLevel_Name(static_cast<apiv1::LogLevel>(level)));
  for (int st : req.stdtypes()) {
    if (st == apiv1::STD_TYPE_STDOUT) f.streams.push_back("stdout");
    if (st == apiv1::STD_TYPE_STDERR) f.streams.push_back("stderr");
    if (st == apiv1::STD_TYPE_UNSPECIFIED) {
      f.streams.push_back("system");
      f.streams.push_back("dropped");
    }
  }
  f.ranks.assign(req.ranks().begin(), req.ranks().end());
  f.allocation_ids.assign(req.allocation_ids().begin(), req.allocation_ids().end());
  if (req.has_since()) f.since_ms = TimeMs(req.since());
  if (req.has_until()) f.until_ms = TimeMs(req.until());
  f.search_text = req.search_text();
  return f;
}

// ---- MasterCore

absl::StatusOr<apiv1::GetExperimentValidationHistoryResponse> MasterCore::GetExperimentValidationHistory(
    const apiv1::GetExperimentValidationHistoryRequest& req) {
  std::string metric;
  bool smaller_is_better;
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(req.experiment_id()));
    metric = exp->config.searcher.metric;
    smaller_is_better = exp->config.searcher.smaller_is_better;
  }
  DET_ASSIGN_OR_RETURN(std::vector<ValidationPoint> points, store_->ListExperimentValidations(req.experiment_id()));
  apiv1::GetExperimentValidationHistoryResponse resp;
  for (auto& e : BestSoFar(points, metric, smaller_is_better)) *resp.add_validation_history() = std::move(e);
  return resp;
}

absl::StatusOr<TrialMetricsBatch> MasterCore::ReadTrialMetrics(const apiv1::StreamTrialMetricsRequest& req,
                                                               int64_t after_id, int64_t max_rows) {
  std::set<int64_t> ids(req.trial_ids().begin(), req.trial_ids().end());
  if (req.trial_id() != 0) ids.insert(req.trial_id());
  if (ids.empty()) return absl::InvalidArgumentError("trial_id or trial_ids: no trial to stream");
  if (ids.size() > kMaxStreamTrials) {
    return absl::InvalidArgumentError(absl::StrCat("trial_ids: ", ids.size(), " trials; at most ", kMaxStreamTrials));
  }
  if (!req.group().empty()) DET_RETURN_IF_ERROR(ValidateMetricGroup(req.group()));
  if (req.after_total_batches() < 0) return absl::InvalidArgumentError("after_total_batches must be >= 0");
  TrialMetricsBatch batch;
  batch.trials_ended = true;
  {
    // "Ended" is read before the rows so that the last rows are never missed.
    std::lock_guard<std::mutex> l(mu_);
    for (int64_t id : ids) {
      DET_ASSIGN_OR_RETURN(TrialRuntime * t, FindTrial(id));
      batch.trials_ended = batch.trials_ended && Terminal(t->row.state) && t->allocation_id.empty();
    }
  }
  DET_ASSIGN_OR_RETURN(std::vector<MetricRow> rows,
                       store_->ListMetricsAfterId(std::vector<int64_t>(ids.begin(), ids.end()), req.group(),
                                                  after_id, max_rows));
  batch.rows_read = static_cast<int64_t>(rows.size());
  batch.last_id = rows.empty() ? after_id : rows.back().id;
  for (const MetricRow& r : rows) {
    if (req.after_total_batches() > 0 && r.total_batches <= req.after_total_batches()) continue;
    apiv1::MetricsReport m = MetricProto(r);
    if (req.metric_names_size() > 0) {
      auto* metrics = m.mutable_metrics();
      for (auto it = metrics->begin(); it != metrics->end();) {
        bool keep = std::find(req.metric_names().begin(), req.metric_names().end(), it->first) !=
                    req.metric_names().end();
        it = keep ? std::next(it) : metrics->erase(it);
      }
    }
    *batch.metrics.add_metrics() = std::move(m);
  }
  if (batch.metrics.metrics_size() > 0) batch.metrics.set_next_after_id(batch.last_id);
  return batch;
}

absl::StatusOr<TrialLogsBatch> MasterCore::ReadTrialLogs(const apiv1::TrialLogsRequest& req, int64_t after_id,
                                                         int64_t max_lines) {
  DET_RETURN_IF_ERROR(ValidateTrialLogsRequest(req));
  DET_ASSIGN_OR_RETURN(TaskLogFilter filter, TaskLogFilterOf(req, after_id));
  TrialLogsBatch batch;
  {
    // "Ended" is read before the logs so that the last lines are never missed.
    std::lock_guard<std::mutex> l(mu_);
    DET_ASSIGN_OR_RETURN(TrialRuntime * t, FindTrial(req.trial_id()));
    batch.trial_ended = Terminal(t->row.state) && t->allocation_id.empty();
  }
  DET_ASSIGN_OR_RETURN(std::vector<TaskLogRow> rows, store_->ListTaskLogsFiltered(filter, max_lines));
  for (const auto& r : rows) *batch.logs.add_logs() = TaskLogProto(r);
  return batch;
}

absl::StatusOr<int64_t> MasterCore::TrialLogsStart(const apiv1::TrialLogsRequest& req) {
  DET_RETURN_IF_ERROR(ValidateTrialLogsRequest(req));
  if (req.tail() == 0) return req.after_id();
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_RETURN_IF_ERROR(FindTrial(req.trial_id()).status());
  }
  DET_ASSIGN_OR_RETURN(TaskLogFilter filter, TaskLogFilterOf(req, 0));
  DET_ASSIGN_OR_RETURN(int64_t start, store_->TaskLogTailStart(filter, req.tail()));
  return std::max(start, req.after_id());
}

namespace {

// Whether the trials of `exp` profile: profiling.enabled of the config text
// they receive (row.config_yaml), parsed as det-trial parses it, once per
// experiment (ExperimentRuntime::trial_profiling). Not exp.config: that is
// the stored resolved JSON, which can say otherwise (an experiment created
// by v0.2.0, which ignored `profiling:`). A YAML that does not parse makes
// the trial fail at start, so it profiles nothing.
bool TrialsProfile(ExperimentRuntime& exp) {
  if (!exp.trial_profiling.has_value()) {
    absl::StatusOr<ExperimentConfig> config = ParseExperimentConfig(exp.row.config_yaml, "experiment config");
    exp.trial_profiling = config.ok() && config->profiling.enabled;
  }
  return *exp.trial_profiling;
}

// A `profiling`/`system` report (the trial profiler's groups): only from a
// trial that profiles (TrialsProfile). The store checks the keys, values and
// bounds (metric_limits.h).
absl::Status CheckProfilerReport(const std::string& group, int64_t trial_id, bool profiling) {
  if (profiling) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "trial ", trial_id, ": metric group '", group, "' is the trial profiler's and its experiment has "
      "profiling.enabled false; set profiling.enabled: true in the experiment config, or report your own "
      "metrics in another group"));
}

// A `system` row's GPUs are the trial's own: keys gpu<I>_... with I >=
// `slots` (resources.slots_per_trial) are dropped, the rest of the row kept.
// The sampler keys every GPU of the node by its NVML index when it is not
// told the trial's (no DET_GPU_UUIDS nor CUDA_VISIBLE_DEVICES).
void DropOtherGpus(int64_t slots, std::map<std::string, double>* metrics) {
  for (auto it = metrics->begin(); it != metrics->end();) {
    const std::string& key = it->first;
    const bool gpu = key.size() >= 4 && key.compare(0, 3, "gpu") == 0 && key[3] >= '0' && key[3] <= '9';
    if (gpu && std::strtoll(key.c_str() + 3, nullptr, 10) >= slots) {
      it = metrics->erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

absl::StatusOr<trialv1::ReportMetricsResponse> MasterCore::ReportMetrics(const trialv1::ReportMetricsRequest& req,
                                                                         const std::string& token) {
  // Who is asking comes first: another allocation's token is refused
  // whatever else is wrong with the request.
  int64_t trial_id, run_id;
  absl::Status profiler_rows = absl::OkStatus();
  int64_t slots = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
    trial_id = alloc->trial_id;
    const TrialRow& trial = trials_.at(trial_id)->row;
    run_id = trial.run_id;
    if (IsProfilerGroup(req.group())) {
      DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(trial.experiment_id));
      profiler_rows = CheckProfilerReport(req.group(), trial_id, TrialsProfile(*exp));
      slots = exp->config.resources.slots_per_trial;
    }
  }
  DET_RETURN_IF_ERROR(profiler_rows);
  DET_RETURN_IF_ERROR(ValidateMetricGroup(req.group()));
  if (req.group() == "training" || req.group() == "validation") {
    return absl::InvalidArgumentError(absl::StrCat("group '", req.group(), "': use Report",
                                                   req.group() == "training" ? "Training" : "Validation",
                                                   "Metrics for it"));
  }
  if (req.rows_size() == 0 || req.rows_size() > kMaxMetricRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows: ", req.rows_size(), " rows; between 1 and ", kMaxMetricRows, " per call"));
  }
  std::vector<MetricRow> rows;
  const int64_t now_ms = WallMs();
  for (int i = 0; i < req.rows_size(); ++i) {
    const trialv1::MetricsRow& r = req.rows(i);
    // The number of metrics per row is bounded by the store
    // (--max-metric-values-per-report, RESOURCE_EXHAUSTED).
    if (r.total_batches() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("rows[", i, "]: total_batches ", r.total_batches(), " < 0"));
    }
    MetricRow m;
    m.trial_id = trial_id;
    m.trial_run_id = run_id;
    m.group = req.group();
    m.total_batches = r.total_batches();
    m.total_epochs = r.total_epochs();
    m.metrics.insert(r.metrics().begin(), r.metrics().end());
    m.time_ms = r.has_end_time() ? TimeMs(r.end_time()) : now_ms;
    if (m.group == "system") {
      DropOtherGpus(slots, &m.metrics);
      if (m.metrics.empty()) continue;  // only other GPUs: nothing of the trial's
    }
    rows.push_back(std::move(m));
  }
  DET_RETURN_IF_ERROR(store_->InsertMetrics(rows));
  return trialv1::ReportMetricsResponse();
}

}  // namespace det::master
