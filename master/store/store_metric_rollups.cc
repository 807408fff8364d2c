// Store: metric rollups at ingestion (metric_rollups.h; issue 50).
#include "master/store/metric_rollups.h"

#include "master/store/store.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {

absl::Status Store::RollupRowLocked(const MetricRow& row) {
  (void)row;
  return absl::OkStatus();
}

}  // namespace master
}  // namespace det
