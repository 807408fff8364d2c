// Pure helpers behind the metric and log calls of MasterCore
// (master/core/metrics_logs.cc): metric group names, the validation history
// (best-so-far) and the translation of a TrialLogsRequest's filters to the
// store's TaskLogFilter. No I/O, no locks.
#ifndef DET_MASTER_CORE_METRICS_LOGS_H_
#define DET_MASTER_CORE_METRICS_LOGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "det/api/v1/experiment.pb.h"
#include "det/api/v1/log.pb.h"
#include "master/store/store.h"

namespace det::master {

// Ok when `group` matches [a-z0-9_]{1,64}; InvalidArgument naming `field`
// and the value otherwise.
absl::Status ValidateMetricGroup(const std::string& group, const char* field = "group");

// The validations (ordered by time) that improved on the best `metric` so
// far, respecting smaller_is_better; points without the metric or with NaN
// never improve. Ties are not improvements.
std::vector<::det::api::v1::ValidationHistoryEntry> BestSoFar(const std::vector<ValidationPoint>& points,
                                                              const std::string& metric, bool smaller_is_better);

// InvalidArgument for a negative offset/limit/tail, offset with tail, or a
// search_text over 1024 bytes.
absl::Status ValidateTrialLogsRequest(const ::det::api::v1::TrialLogsRequest& req);

// The store filter of req's filters (levels, stdtypes, ranks,
// allocation_ids, since/until, search_text), after_id = `after_id`.
// STD_TYPE_UNSPECIFIED selects the master's own lines ("system" and the
// "dropped" marker). InvalidArgument when a list holds more than 100 values.
absl::StatusOr<TaskLogFilter> TaskLogFilterOf(const ::det::api::v1::TrialLogsRequest& req, int64_t after_id);

}  // namespace det::master

#endif  // DET_MASTER_CORE_METRICS_LOGS_H_
