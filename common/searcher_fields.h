// Which searcher reads which `searcher.*` field.
//
// The parser accepts every searcher field whatever `searcher.name` is (a
// field's own checks still apply: `divisor: 1` is refused under `random`
// too). A config that sets a field its searcher does not read is accepted
// with one warning line per such field, which `det-cli experiment create`
// and `det-cli preview-search` print:
//
//   field 'searcher.divisor' is accepted but not used by searcher 'random'
//   (it is read by adaptive_asha and async_halving)
//
// Fields every searcher reads (name, metric, max_length, ...) have no row.
// Pure functions over constant data; thread-safe.
#ifndef DET_COMMON_SEARCHER_FIELDS_H_
#define DET_COMMON_SEARCHER_FIELDS_H_

#include <optional>
#include <string>
#include <vector>

#include "common/experiment_config.h"
#include "nlohmann/json.hpp"

namespace det {

// One warning per field set in `raw_searcher` (the config's `searcher` map as
// written; null counts as absent) that `searcher` does not read, in the
// order of the table in searcher_fields.cc. Empty when `raw_searcher` is not
// a map.
std::vector<std::string> SearcherFieldWarnings(const SearcherConfig& searcher, const nlohmann::json& raw_searcher);

// searcher pbt without `explore`: a child may change every search
// hyperparameter, and a changed width makes it fail to restore its parent's
// checkpoint (the runtime refuses a tensor of another shape). When the space
// has top-level int, categorical or nested search hyperparameters (the kinds
// that set shapes), one warning naming them (at most 8, then a count) and
// suggesting an `explore` list of the double/log ones; else, and for every
// other searcher, nullopt.
std::optional<std::string> PbtExploreWarning(const ExperimentConfig& config);

}  // namespace det

#endif  // DET_COMMON_SEARCHER_FIELDS_H_
