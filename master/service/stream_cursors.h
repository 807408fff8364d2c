// Cursors for the metric and master-log server streams (StreamTrialMetrics,
// MasterLogs): each walks what its request selects one batch at a time, for
// the gRPC stream (PollingStreamReactor, an alarm between waits) and the
// REST NDJSON stream (a blocking wait) alike; and the per-user bound on
// concurrent metric streams.
#ifndef DET_MASTER_SERVICE_STREAM_CURSORS_H_
#define DET_MASTER_SERVICE_STREAM_CURSORS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "det/api/v1/api.pb.h"
#include "master/core/master_core.h"

namespace det::master {

// One step of a stream cursor: a batch to send (maybe empty), then either
// the end (done) or, when following, a short wait before the next step.
// caught_up: the batch held everything there was, so the next step also
// waits (a stream that keeps up with many reporting trials then reads every
// poll interval, not again after each small batch).
template <typename Resp>
struct StreamStep {
  Resp batch;
  bool has_batch = false;
  bool done = false;
  bool wait = false;
  bool caught_up = false;
};

// Not thread-safe: one caller at a time (a stream's own sequence of calls).
class TrialMetricCursor {
 public:
  static constexpr int64_t kBatch = 1000;  // rows per message at most

  // `core` is not owned and must outlive the cursor.
  TrialMetricCursor(MasterCore* core, ::det::api::v1::StreamTrialMetricsRequest request)
      : core_(core), request_(std::move(request)), after_(request_.after_id()) {}

  // Errors: those of MasterCore::ReadTrialMetrics.
  absl::StatusOr<StreamStep<::det::api::v1::StreamTrialMetricsResponse>> Next();

 private:
  MasterCore* const core_;
  const ::det::api::v1::StreamTrialMetricsRequest request_;
  int64_t after_;
};

// Not thread-safe, as TrialMetricCursor. Reads MasterLogRing::Global().
class MasterLogCursor {
 public:
  static constexpr size_t kBatch = 1000;

  explicit MasterLogCursor(::det::api::v1::MasterLogsRequest request) : request_(std::move(request)) {}

  // InvalidArgument for a bad request (negative tail, more than 16 levels, a
  // search_text over 1024 bytes).
  absl::StatusOr<StreamStep<::det::api::v1::MasterLogsResponse>> Next();

 private:
  const ::det::api::v1::MasterLogsRequest request_;
  bool started_ = false;
  int64_t after_ = 0;
};

// At most kMaxPerUser metric streams of one user at a time: a Lease holds
// one slot while it lives. Thread-safe.
class MetricStreamLease {
 public:
  static constexpr int kMaxPerUser = 16;
  // ResourceExhausted (naming the user and the limit) when the user already
  // holds kMaxPerUser.
  static absl::StatusOr<std::unique_ptr<MetricStreamLease>> Acquire(const std::string& user);
  ~MetricStreamLease();
  MetricStreamLease(const MetricStreamLease&) = delete;
  MetricStreamLease& operator=(const MetricStreamLease&) = delete;

 private:
  explicit MetricStreamLease(std::string user) : user_(std::move(user)) {}
  std::string user_;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_STREAM_CURSORS_H_
