#include "master/service/stream_cursors.h"

#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/core/master_log_ring.h"

namespace det::master {

namespace apiv1 = ::det::api::v1;

absl::StatusOr<StreamStep<apiv1::StreamTrialMetricsResponse>> TrialMetricCursor::Next() {
  while (true) {
    DET_ASSIGN_OR_RETURN(TrialMetricsBatch read, core_->ReadTrialMetrics(request_, after_, kBatch));
    after_ = read.last_id;
    StreamStep<apiv1::StreamTrialMetricsResponse> step;
    const bool full = read.rows_read == kBatch;
    if (read.metrics.metrics_size() > 0) {
      step.batch = std::move(read.metrics);
      step.has_batch = true;
      step.done = !full && (!request_.follow() || read.trials_ended);
      step.caught_up = !full;
      return step;
    }
    if (full) continue;  // every row read was filtered out: read on
    step.done = !request_.follow() || read.trials_ended;
    step.wait = !step.done;
    return step;
  }
}

absl::StatusOr<StreamStep<apiv1::MasterLogsResponse>> MasterLogCursor::Next() {
  if (!started_) {
    if (request_.tail() < 0) return absl::InvalidArgumentError("tail must be >= 0");
    if (request_.levels_size() > 16) return absl::InvalidArgumentError("levels: at most 16");
    if (request_.search_text().size() > 1024) return absl::InvalidArgumentError("search_text: at most 1024 bytes");
    after_ = request_.after_id();
    if (request_.tail() > 0) after_ = std::max(after_, MasterLogRing::Global().TailStart(request_, request_.tail()));
    started_ = true;
  }
  StreamStep<apiv1::MasterLogsResponse> step;
  for (auto& e : MasterLogRing::Global().Read(request_, after_, kBatch)) {
    after_ = e.id();
    *step.batch.add_logs() = std::move(e);
  }
  if (step.batch.logs_size() > 0) {
    step.batch.set_next_after_id(after_);
    step.has_batch = true;
    return step;
  }
  step.done = !request_.follow();
  step.wait = !step.done;
  return step;
}

namespace {
std::mutex leases_mu;
std::map<std::string, int>& Leases() {
  static auto* m = new std::map<std::string, int>();
  return *m;
}
}  // namespace

absl::StatusOr<std::unique_ptr<MetricStreamLease>> MetricStreamLease::Acquire(const std::string& user) {
  std::lock_guard<std::mutex> l(leases_mu);
  int& n = Leases()[user];
  if (n >= kMaxPerUser) {
    return absl::ResourceExhaustedError(
        absl::StrCat("user '", user, "' already has ", n, " metric streams open (at most ", kMaxPerUser, ")"));
  }
  ++n;
  return std::unique_ptr<MetricStreamLease>(new MetricStreamLease(user));
}

MetricStreamLease::~MetricStreamLease() {
  std::lock_guard<std::mutex> l(leases_mu);
  auto it = Leases().find(user_);
  if (it != Leases().end() && --it->second <= 0) Leases().erase(it);
}

}  // namespace det::master
