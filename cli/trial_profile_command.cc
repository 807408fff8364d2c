#include "cli/trial_profile_command.h"

#include <string>
#include <utility>
#include <vector>

#include "cli/trial_profile.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;

// Every report of `group` (at most `max_rows`; *capped says it left some
// out), page after page in (total_batches, id) order.
grpc::Status ReadGroup(Client& client, int64_t trial_id, const std::string& group, int32_t page_size,
                       int64_t max_rows, std::vector<v1::MetricsReport>* out, bool* capped) {
  v1::GetTrialMetricsRequest req;
  req.set_trial_id(trial_id);
  req.set_group(group);
  req.set_full_resolution(true);
  req.set_limit(page_size);
  *capped = false;
  for (;;) {
    v1::GetTrialMetricsResponse resp;
    grpc::Status status = client.Call(&Client::Stub::GetTrialMetrics, req, &resp);
    if (!status.ok()) return status;
    for (auto& r : *resp.mutable_metrics()) {
      if (static_cast<int64_t>(out->size()) >= max_rows) {
        *capped = true;
        return grpc::Status::OK;
      }
      out->push_back(std::move(r));
    }
    // A page that moves the cursor nowhere would ask for itself again.
    const bool moved = resp.next_after_total_batches() != req.after_total_batches() ||
                       resp.next_after_id() != req.after_id();
    if (!resp.has_more() || !moved) return grpc::Status::OK;
    req.set_after_total_batches(resp.next_after_total_batches());
    req.set_after_id(resp.next_after_id());
  }
}

}  // namespace

int TrialProfileCommand(Client& client, int64_t trial_id, const CommandIo& io, int32_t page_size,
                        int64_t max_rows) {
  std::vector<v1::MetricsReport> profiling;
  std::vector<v1::MetricsReport> system;
  for (auto [group, rows] : {std::pair{"profiling", &profiling}, std::pair{"system", &system}}) {
    bool capped = false;
    grpc::Status status = ReadGroup(client, trial_id, group, page_size, max_rows, rows, &capped);
    if (!status.ok()) return ReportError(client, status, io.err);
    if (capped) {
      io.err << "det-cli: note: trial " << trial_id << " has more than " << max_rows << " '" << group
             << "' rows; the summary covers the first " << max_rows << '\n';
    }
  }
  if (profiling.empty()) {
    io.err << "det-cli: error: trial " << trial_id
           << " has no profile: set profiling.enabled: true in the experiment config (docs/guides/profiling.md)\n";
    return 1;
  }
  const TrialProfile p = SummarizeProfile(profiling, system);
  if (io.json) {
    io.out << ProfileJson(trial_id, p).dump(2) << '\n';
  } else {
    io.out << FormatProfile(trial_id, p);
  }
  return 0;
}

}  // namespace det::cli
