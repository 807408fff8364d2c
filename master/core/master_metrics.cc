#include "master/core/master_metrics.h"

#include <sqlite3.h>
#include <unistd.h>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/det_version.h"
#include "common/proc_stats.h"
#include "master/core/master_core.h"
#include "master/service/api_handlers.h"

namespace det::master {
namespace {

namespace pm = prometheus;

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> buckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                           0.25,  0.5,    1,     2.5,  5,    10,   30};
  return buckets;
}

// The states det_experiments and det_trials list (common.proto's State
// without "STATE_"; experiments are never WAITING, trials never DELETING).
const std::vector<std::string>& ExperimentStates() {
  static const std::vector<std::string> states{
      "ACTIVE",   "PAUSED", "STOPPING_COMPLETED", "STOPPING_CANCELED", "STOPPING_KILLED", "STOPPING_ERROR",
      "COMPLETED", "CANCELED", "ERROR", "DELETING"};
  return states;
}
const std::vector<std::string>& TrialStates() {
  static const std::vector<std::string> states{
      "ACTIVE",   "PAUSED", "STOPPING_COMPLETED", "STOPPING_CANCELED", "STOPPING_KILLED", "STOPPING_ERROR",
      "COMPLETED", "CANCELED", "ERROR", "WAITING"};
  return states;
}
// det_agents' states: lost (known, no Connect stream), disabled, draining,
// connected (enabled and not draining).
const std::vector<std::string>& AgentStates() {
  static const std::vector<std::string> states{"connected", "draining", "disabled", "lost"};
  return states;
}

std::string AgentState(const apiv1::Agent& a) {
  if (!a.connected()) return "lost";
  if (a.draining()) return "draining";
  if (!a.enabled()) return "disabled";
  return "connected";
}

pm::ClientMetric GaugeValue(std::vector<pm::ClientMetric::Label> labels, double value) {
  pm::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

pm::MetricFamily NewFamily(std::string name, std::string help, pm::MetricType type = pm::MetricType::Gauge) {
  pm::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

// One gauge series per state of `states` (zeros included) from `counts`;
// states not listed are left out (bounded).
pm::MetricFamily ByState(std::string name, std::string help, const std::vector<std::string>& states,
                         const std::map<std::string, int64_t>& counts) {
  pm::MetricFamily f = NewFamily(std::move(name), std::move(help));
  for (const std::string& s : states) {
    auto it = counts.find(s);
    f.metric.push_back(GaugeValue({{"state", s}}, it == counts.end() ? 0 : static_cast<double>(it->second)));
  }
  return f;
}

// SELECT state, COUNT(*) FROM `table` GROUP BY state.
std::map<std::string, int64_t> CountByState(Store* store, const char* sql) {
  std::map<std::string, int64_t> counts;
  absl::Status st = store->WithConnection([&](sqlite3* db) -> absl::Status {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK) return absl::InternalError(sqlite3_errmsg(db));
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* state = sqlite3_column_text(stmt, 0);
      if (state != nullptr) counts[reinterpret_cast<const char*>(state)] = sqlite3_column_int64(stmt, 1);
    }
    sqlite3_finalize(stmt);
    return absl::OkStatus();
  });
  (void)st;  // a failed count shows zeros; the health check reports the store
  return counts;
}

}  // namespace

const char* MetricRowKind(absl::string_view group) { return kMetricRowKindNames[MetricRowKindIndex(group)]; }

const char* GrpcCodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
}

std::vector<pm::MetricFamily> ProcessFamilies(const ProcStats& stats) {
  std::vector<pm::MetricFamily> out;
  pm::MetricFamily cpu = NewFamily("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                                   pm::MetricType::Counter);
  pm::ClientMetric c;
  c.counter.value = stats.cpu_seconds;
  cpu.metric.push_back(c);
  out.push_back(std::move(cpu));
  auto gauge = [&](const char* name, const char* help, double v) {
    pm::MetricFamily f = NewFamily(name, help);
    f.metric.push_back(GaugeValue({}, v));
    out.push_back(std::move(f));
  };
  gauge("process_resident_memory_bytes", "Resident memory size in bytes.", static_cast<double>(stats.rss_bytes));
  // Unknown (-1: an unreadable fd directory, an unlimited RLIMIT_NOFILE): left out, as the agent does.
  if (stats.open_fds >= 0) {
    gauge("process_open_fds", "Number of open file descriptors.", static_cast<double>(stats.open_fds));
  }
  if (stats.max_fds >= 0) {
    gauge("process_max_fds", "Maximum number of open file descriptors.", static_cast<double>(stats.max_fds));
  }
  gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
        stats.start_time_seconds);
  return out;
}

// The state series, built at each scrape from the core and the store.
class MasterMetrics::StateCollector final : public pm::Collectable {
 public:
  explicit StateCollector(MasterCore* core) : core_(core) {}
  std::vector<pm::MetricFamily> Collect() const override {
    std::vector<pm::MetricFamily> out;
    if (core_ != nullptr) {
      // Every configured pool ("default" without a pools file), and every
      // pool an agent or a queued job names.
      std::map<std::string, int64_t> pools;
      const ResourcePoolsConfig& configured = core_->options().resource_pools;
      if (configured.declared()) {
        for (const ResourcePoolConfig& p : configured.pools) pools[p.name] = 0;
      } else {
        pools["default"] = 0;
      }
      CollectAgents(&out, &pools);
      CollectQueue(&out, &pools);
      out.push_back(ByState("det_experiments", "Experiments by state.", ExperimentStates(),
                            CountByState(core_->store(), "SELECT state, COUNT(*) FROM experiments GROUP BY state")));
      // As trial lists show them: a trial waiting for the searcher is stored
      // ACTIVE and shown WAITING.
      out.push_back(ByState("det_trials", "Trials by state, as det-cli shows them (WAITING: waiting for the searcher, no slot).", TrialStates(),
                            core_->TrialCountsByShownState()));
      CollectRollups(&out);
    }
    CollectProcess(&out);
    pm::MetricFamily build = NewFamily("det_build_info", "det-cpp's version; always 1.");
    build.metric.push_back(GaugeValue({{"version", kDetVersion}}, 1));
    out.push_back(std::move(build));
    return out;
  }

 private:
  void CollectAgents(std::vector<pm::MetricFamily>* out, std::map<std::string, int64_t>* pools) const {
    pm::MetricFamily slots = NewFamily("det_slots", "Slots an agent offers.");
    pm::MetricFamily used = NewFamily("det_slots_used", "Slots of an agent that an allocation holds.");
    std::map<std::string, int64_t> states;
    auto agents = core_->GetAgents(apiv1::GetAgentsRequest());
    if (agents.ok()) {
      for (const apiv1::Agent& a : agents->agents()) {
        int64_t n_used = 0;
        for (const apiv1::Slot& s : a.slots()) n_used += s.allocation_id().empty() ? 0 : 1;
        std::vector<pm::ClientMetric::Label> labels{{"agent", a.id()}, {"pool", a.resource_pool()}};
        slots.metric.push_back(GaugeValue(labels, a.slots_size()));
        used.metric.push_back(GaugeValue(labels, static_cast<double>(n_used)));
        ++states[AgentState(a)];
        (*pools)[a.resource_pool()] += 0;
      }
    }
    out->push_back(std::move(slots));
    out->push_back(std::move(used));
    out->push_back(ByState("det_agents", "Agents by state (lost: known, not connected).", AgentStates(), states));
  }

  // Chart rollup series the store rebuilt from its rows: loaded (first seen
  // since the master started, or evicted) or behind a report that arrived
  // out of order (each costs a read of up to 4,096 rows).
  void CollectRollups(std::vector<pm::MetricFamily>* out) const {
    const Store& store = *core_->store();
    pm::MetricFamily f = NewFamily("det_metric_rollup_rebuilds_total",
                                   "Chart rollup series rebuilt from their stored rows, by reason (load, out_of_order).",
                                   pm::MetricType::Counter);
    for (const auto& [reason, n] : {std::pair<const char*, uint64_t>{"load", store.RollupLoads()},
                                    std::pair<const char*, uint64_t>{"out_of_order", store.RollupOutOfOrderRebuilds()}}) {
      pm::ClientMetric c;
      c.label.push_back({"reason", reason});
      c.counter.value = static_cast<double>(n);
      f.metric.push_back(std::move(c));
    }
    out->push_back(std::move(f));
  }

  // Queued jobs per pool: GetJobQueue's JOB_STATE_QUEUED jobs, what
  // `det-cli job list` shows as QUEUED.
  void CollectQueue(std::vector<pm::MetricFamily>* out, std::map<std::string, int64_t>* pools) const {
    constexpr int kPage = 1000, kMaxPages = 100;
    apiv1::GetJobQueueRequest req;
    req.add_states(apiv1::JOB_STATE_QUEUED);
    req.set_limit(kPage);
    for (int page = 0; page < kMaxPages; ++page) {
      req.set_offset(page * kPage);
      auto resp = core_->GetJobQueue(req);
      if (!resp.ok()) break;
      for (const apiv1::Job& j : resp->jobs()) ++(*pools)[j.resource_pool()];
      if (resp->jobs_size() < kPage) break;
    }
    pm::MetricFamily depth = NewFamily("det_job_queue_depth", "Jobs waiting for slots (QUEUED) per pool.");
    for (const auto& [pool, n] : *pools) depth.metric.push_back(GaugeValue({{"pool", pool}}, static_cast<double>(n)));
    out->push_back(std::move(depth));
  }

  static void CollectProcess(std::vector<pm::MetricFamily>* out) {
    auto stats = ReadProcStats(::getpid());
    if (!stats.ok()) return;
    std::vector<pm::MetricFamily> process = ProcessFamilies(*stats);
    out->insert(out->end(), std::make_move_iterator(process.begin()), std::make_move_iterator(process.end()));
  }

  MasterCore* core_;
};

MasterMetrics::MasterMetrics(MasterCore* core)
    : registry_(std::make_shared<pm::Registry>()), state_(std::make_shared<StateCollector>(core)) {
  auto& rows = pm::BuildCounter()
                   .Name("det_metric_rows_ingested_total")
                   .Help("Metric rows committed, by kind (training, validation, profiling, system, other).")
                   .Register(*registry_);
  for (int k = 0; k < kMetricRowKinds; ++k) rows_[k] = &rows.Add({{"kind", kMetricRowKindNames[k]}});
  log_lines_ = &pm::BuildCounter()
                    .Name("det_log_lines_ingested_total")
                    .Help("Trial log lines stored.")
                    .Register(*registry_)
                    .Add({});
  checkpoint_written_ = &pm::BuildCounter()
                             .Name("det_checkpoint_bytes_written_total")
                             .Help("Bytes of the checkpoints committed (their files, as the trial reported them).")
                             .Register(*registry_)
                             .Add({});
  auto& deleted = pm::BuildCounter()
                      .Name("det_checkpoint_bytes_deleted_total")
                      .Help("Bytes of the checkpoints deleted, by reason (gc, user, experiment_delete).")
                      .Register(*registry_);
  for (CheckpointDeletion r : {CheckpointDeletion::kGc, CheckpointDeletion::kUser, CheckpointDeletion::kExperimentDelete}) {
    checkpoint_deleted_[static_cast<int>(r)] = &deleted.Add({{"reason", CheckpointDeletionName(r)}});
  }
  grpc_ = &pm::BuildHistogram()
               .Name("det_grpc_request_duration_seconds")
               .Help("gRPC calls by method and status code, in seconds (streams: their whole life).")
               .Register(*registry_);
  rest_ = &pm::BuildHistogram()
               .Name("det_rest_request_duration_seconds")
               .Help("REST requests by route pattern and HTTP status, in seconds.")
               .Register(*registry_);
  sqlite_ = &pm::BuildHistogram()
                 .Name("det_sqlite_write_transaction_duration_seconds")
                 .Help("SQLite write transactions, from BEGIN to COMMIT or ROLLBACK, in seconds.")
                 .Register(*registry_)
                 .Add({}, LatencyBuckets());
  streams_ = &pm::BuildGauge()
                  .Name("det_stream_subscribers")
                  .Help("Open streaming gRPC calls by RPC (log, metric and agent streams).")
                  .Register(*registry_);
}

MasterMetrics::~MasterMetrics() = default;

std::string MasterMetrics::MethodLabel(absl::string_view method) const {
  std::vector<absl::string_view> parts = absl::StrSplit(method, '/');
  if (parts.size() != 3 || !parts[0].empty()) return "other";
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(parts[1]));
  if (service == nullptr || !absl::StartsWith(parts[1], "det.")) return "other";
  const auto* m = service->FindMethodByName(std::string(parts[2]));
  return m == nullptr ? "other" : m->name();
}

void MasterMetrics::ObserveGrpc(absl::string_view method, int code, double seconds) {
  grpc_->Add({{"method", MethodLabel(method)}, {"code", GrpcCodeName(code)}}, LatencyBuckets()).Observe(seconds);
}

void MasterMetrics::ObserveRest(absl::string_view route, int status, double seconds) {
  rest_->Add({{"route", route.empty() ? "other" : std::string(route)}, {"code", absl::StrCat(status)}},
             LatencyBuckets())
      .Observe(seconds);
}

void MasterMetrics::StreamOpened(absl::string_view method) { streams_->Add({{"stream", MethodLabel(method)}}).Increment(); }
void MasterMetrics::StreamClosed(absl::string_view method) { streams_->Add({{"stream", MethodLabel(method)}}).Decrement(); }

void MasterMetrics::WriteTransactionDone(double seconds) { sqlite_->Observe(seconds); }
void MasterMetrics::MetricRowsStored(int kind, int64_t rows) {
  if (kind >= 0 && kind < kMetricRowKinds && rows > 0) rows_[kind]->Increment(static_cast<double>(rows));
}
void MasterMetrics::LogLinesStored(int64_t lines) { log_lines_->Increment(static_cast<double>(lines)); }
void MasterMetrics::CheckpointBytesStored(int64_t bytes) {
  if (bytes > 0) checkpoint_written_->Increment(static_cast<double>(bytes));
}
void MasterMetrics::CheckpointBytesDeleted(CheckpointDeletion reason, int64_t bytes) {
  if (bytes > 0) checkpoint_deleted_[static_cast<int>(reason)]->Increment(static_cast<double>(bytes));
}

std::string MasterMetrics::Scrape() {
  std::lock_guard<std::mutex> l(scrape_mu_);
  std::vector<pm::MetricFamily> families = registry_->Collect();
  std::vector<pm::MetricFamily> state = state_->Collect();
  families.insert(families.end(), std::make_move_iterator(state.begin()), std::make_move_iterator(state.end()));
  return pm::TextSerializer().Serialize(families);
}

}  // namespace det::master
