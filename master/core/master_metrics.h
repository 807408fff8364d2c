// The master's Prometheus series (GET /metrics; docs/operations/
// monitoring.md has the table). State (slots, agents, experiments and
// trials by state, queue depth, process stats) is read from the core and
// the store at scrape time, so it cannot drift; counters and histograms are
// counted where the event happens: the Store's events (store_events.h), the
// gRPC interceptor (metrics_interceptor.h) and the REST server.
//
// Labels are bounded: pool and agent (the cluster's agents), state (fixed
// enums), kind (five values), method (the services' RPCs, else "other"),
// route (route patterns, else "other"), code (gRPC status names, HTTP
// status codes), stream (the streaming RPCs' names). No label comes from a
// trial, experiment or user id or name.
//
// Thread-safe.
#ifndef DET_MASTER_CORE_MASTER_METRICS_H_
#define DET_MASTER_CORE_MASTER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/proc_stats.h"
#include "master/store/store_events.h"

namespace det::master {

class MasterCore;

// The Content-Type of the text exposition format 0.0.4.
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// The `kind` label of det_metric_rows_ingested_total for metric group
// `group`: training, validation, profiling, system, else other.
const char* MetricRowKind(absl::string_view group);

// The name of a gRPC status code ("OK", "NOT_FOUND", ...; "UNKNOWN" for a
// number outside 0..16).
const char* GrpcCodeName(int code);

// The standard process_* families of `stats`; process_open_fds and
// process_max_fds are left out when unknown (-1).
std::vector<prometheus::MetricFamily> ProcessFamilies(const ProcStats& stats);

class MasterMetrics final : public StoreEvents {
 public:
  // `core` (not owned, may be null: no state series) must outlive this.
  explicit MasterMetrics(MasterCore* core);
  ~MasterMetrics() override;

  // gRPC call of `method` (its full name, "/det.api.v1.Determined/GetMe")
  // ended with status `code` after `seconds`. A method of no det service
  // counts as "other".
  void ObserveGrpc(absl::string_view method, int code, double seconds);
  // REST request of route pattern `route` ("" or unknown: "other") answered
  // `status` after `seconds`.
  void ObserveRest(absl::string_view route, int status, double seconds);
  // A streaming call of `method` (full name) opened / ended.
  void StreamOpened(absl::string_view method);
  void StreamClosed(absl::string_view method);

  // StoreEvents.
  void WriteTransactionDone(double seconds) override;
  void MetricRowsStored(int kind, int64_t rows) override;
  void LogLinesStored(int64_t lines) override;
  void CheckpointBytesStored(int64_t bytes) override;
  void CheckpointBytesDeleted(CheckpointDeletion reason, int64_t bytes) override;

  // Every series in the text format 0.0.4. One scrape at a time (another
  // waits); the output's size follows from the label bounds above.
  std::string Scrape();

 private:
  class StateCollector;
  // The short name of a det service's RPC `method` (a full name), else "other".
  std::string MethodLabel(absl::string_view method) const;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<StateCollector> state_;
  prometheus::Counter* rows_[kMetricRowKinds];  // by kind (kMetricRowKindNames)
  prometheus::Counter* log_lines_;
  prometheus::Counter* checkpoint_written_;
  prometheus::Counter* checkpoint_deleted_[3];  // by CheckpointDeletion
  prometheus::Family<prometheus::Histogram>* grpc_;
  prometheus::Family<prometheus::Histogram>* rest_;
  prometheus::Histogram* sqlite_;
  prometheus::Family<prometheus::Gauge>* streams_;
  std::mutex scrape_mu_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_MASTER_METRICS_H_
