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

}  // namespace det

#endif  // DET_COMMON_SEARCHER_FIELDS_H_
