// Sorting, filtering and paging of checkpoint lists (GetExperimentCheckpoints,
// GetTrialCheckpoints): a pure function over the listed checkpoints, so every
// field of the request is honoured the same way for both RPCs.
#ifndef DET_MASTER_CORE_CHECKPOINT_LIST_H_
#define DET_MASTER_CORE_CHECKPOINT_LIST_H_

#include <vector>

#include "absl/status/status.h"
#include "det/api/v1/checkpoint.pb.h"
#include "det/api/v1/common.pb.h"

namespace det::master {

namespace apiv1 = ::det::api::v1;

struct CheckpointListQuery {
  apiv1::GetExperimentCheckpointsRequest::SortBy sort_by = apiv1::GetExperimentCheckpointsRequest::SORT_BY_UNSPECIFIED;
  apiv1::OrderBy order_by = apiv1::ORDER_BY_UNSPECIFIED;
  int offset = 0;  // >= 0
  int limit = 0;   // >= 0; 0: all from offset
  std::vector<apiv1::CheckpointState> states;  // empty: all
  bool smaller_is_better = true;  // the experiment's searcher metric sense
};

// Keeps the checkpoints in one of `q.states`, sorts them by `q.sort_by`
// (UNSPECIFIED = END_TIME; SEARCHER_METRIC ascending = best first by
// `smaller_is_better`, those without a metric or with a NaN one last in
// either direction, by uuid; ties by uuid), reverses for
// ORDER_BY_DESC, then keeps [offset, offset + limit) and fills `page`.
// INVALID_ARGUMENT names offset, limit, sort_by or order_by when out of range
// (an unknown enum value).
absl::Status SortFilterPageCheckpoints(const CheckpointListQuery& q, std::vector<apiv1::Checkpoint>* checkpoints,
                                       apiv1::Pagination* page);

// The query of either request.
template <typename Request>
CheckpointListQuery CheckpointListQueryOf(const Request& req, bool smaller_is_better) {
  CheckpointListQuery q;
  q.sort_by = req.sort_by();
  q.order_by = req.order_by();
  q.offset = req.offset();
  q.limit = req.limit();
  for (int s : req.states()) q.states.push_back(static_cast<apiv1::CheckpointState>(s));
  q.smaller_is_better = smaller_is_better;
  return q;
}

}  // namespace det::master

#endif  // DET_MASTER_CORE_CHECKPOINT_LIST_H_
