// PreviewSearch (det.api.v1): what a config's searcher would do, without
// running anything. Pure: parses the config and simulates the search.
#ifndef DET_MASTER_SERVICE_PREVIEW_SEARCH_H_
#define DET_MASTER_SERVICE_PREVIEW_SEARCH_H_

#include "absl/status/statusor.h"
#include "det/api/v1/searcher.pb.h"

namespace det::master {

// InvalidArgument naming the field (and line) for a config that does not
// parse or whose lengths cannot be converted to batches; errors of
// PreviewSearch (master/search/preview.h).
absl::StatusOr<det::api::v1::PreviewSearchResponse> PreviewSearchFor(
    const det::api::v1::PreviewSearchRequest& request);

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_PREVIEW_SEARCH_H_
