#include "master/core/checkpoint_list.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"

namespace det::master {
namespace {

using Req = apiv1::GetExperimentCheckpointsRequest;

int64_t EndTimeNanos(const apiv1::Checkpoint& c) {
  return google::protobuf::util::TimeUtil::TimestampToNanoseconds(c.report_time());
}

// Strict weak order for ascending `sort_by`; ties by uuid.
bool Less(const CheckpointListQuery& q, const apiv1::Checkpoint& a, const apiv1::Checkpoint& b) {
  switch (q.sort_by) {
    case Req::SORT_BY_UUID: break;
    case Req::SORT_BY_TRIAL_ID:
      if (a.trial_id() != b.trial_id()) return a.trial_id() < b.trial_id();
      break;
    case Req::SORT_BY_TOTAL_BATCHES:
      if (a.total_batches() != b.total_batches()) return a.total_batches() < b.total_batches();
      break;
    case Req::SORT_BY_STATE:
      if (a.state() != b.state()) return a.state() < b.state();
      break;
    case Req::SORT_BY_SEARCHER_METRIC: break;  // handled by the caller
    default:
      if (EndTimeNanos(a) != EndTimeNanos(b)) return EndTimeNanos(a) < EndTimeNanos(b);
      break;
  }
  return a.uuid() < b.uuid();
}

}  // namespace

absl::Status SortFilterPageCheckpoints(const CheckpointListQuery& q, std::vector<apiv1::Checkpoint>* checkpoints,
                                       apiv1::Pagination* page) {
  if (q.offset < 0) return absl::InvalidArgumentError(absl::StrCat("offset: must be >= 0, got ", q.offset));
  if (q.limit < 0) return absl::InvalidArgumentError(absl::StrCat("limit: must be >= 0, got ", q.limit));
  if (!Req::SortBy_IsValid(q.sort_by)) {
    return absl::InvalidArgumentError(absl::StrCat("sort_by: unknown value ", static_cast<int>(q.sort_by)));
  }
  if (!apiv1::OrderBy_IsValid(q.order_by)) {
    return absl::InvalidArgumentError(absl::StrCat("order_by: unknown value ", static_cast<int>(q.order_by)));
  }
  auto& v = *checkpoints;
  if (!q.states.empty()) {
    v.erase(std::remove_if(v.begin(), v.end(),
                           [&](const apiv1::Checkpoint& c) {
                             return std::find(q.states.begin(), q.states.end(), c.state()) == q.states.end();
                           }),
            v.end());
  }
  const bool desc = q.order_by == apiv1::ORDER_BY_DESC;
  if (q.sort_by == Req::SORT_BY_SEARCHER_METRIC) {
    // Best first ascending; without a metric (or with NaN, which has no
    // order) last in either direction.
    auto with = std::stable_partition(v.begin(), v.end(), [](const apiv1::Checkpoint& c) {
      return c.has_searcher_metric() && !std::isnan(c.searcher_metric());
    });
    std::sort(v.begin(), with, [&](const apiv1::Checkpoint& a, const apiv1::Checkpoint& b) {
      if (a.searcher_metric() != b.searcher_metric()) {
        const bool better = q.smaller_is_better ? a.searcher_metric() < b.searcher_metric()
                                                : a.searcher_metric() > b.searcher_metric();
        return desc ? !better : better;
      }
      return a.uuid() < b.uuid();
    });
    std::sort(with, v.end(), [](const apiv1::Checkpoint& a, const apiv1::Checkpoint& b) { return a.uuid() < b.uuid(); });
  } else {
    std::sort(v.begin(), v.end(), [&](const apiv1::Checkpoint& a, const apiv1::Checkpoint& b) {
      return desc ? Less(q, b, a) : Less(q, a, b);
    });
  }
  const int total = static_cast<int>(v.size());
  const int start = std::min(q.offset, total);
  const int end = q.limit > 0 ? std::min<int64_t>(total, static_cast<int64_t>(start) + q.limit) : total;
  v.erase(v.begin() + end, v.end());
  v.erase(v.begin(), v.begin() + start);
  page->set_offset(q.offset);
  page->set_limit(q.limit);
  page->set_start_index(start);
  page->set_end_index(end);
  page->set_total(total);
  return absl::OkStatus();
}

}  // namespace det::master
