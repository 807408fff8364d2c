// MetricTail (metric_tail.h): what a stream may read from the committed tail.
#include "master/store/metric_tail.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace det {
namespace master {
namespace {

MetricRow Row(int64_t id, int64_t trial, const std::string& group = "training") {
  MetricRow r;
  r.id = id;
  r.trial_id = trial;
  r.group = group;
  r.total_batches = id * 10;
  r.time_ms = 1000 + id;
  return r;
}

std::vector<int64_t> Ids(MetricTail& tail, const std::vector<int64_t>& trials, int64_t after_id,
                         const std::string& group = "", int64_t limit = 0) {
  std::vector<MetricTail::RowPtr> rows;
  if (!tail.Read(trials, group, after_id, limit, &rows)) return {-1};  // not covered
  std::vector<int64_t> out;
  for (const auto& r : rows) out.push_back(r->id);
  return out;
}

void Commit(MetricTail& tail, const std::vector<MetricRow>& rows) {
  for (const MetricRow& r : rows) tail.Stage(r, "{\"loss\":" + std::to_string(r.id) + "}");
  tail.Commit();
}

TEST(MetricTailTest, CommittedRowsInIdOrderPerTrialAndGroupWithLimit) {
  MetricTail tail;
  EXPECT_EQ(Ids(tail, {1}, 0), std::vector<int64_t>{-1}) << "no coverage before anything is known";
  Commit(tail, {Row(5, 1), Row(6, 2, "validation"), Row(7, 1, "validation"), Row(8, 3), Row(9, 2)});
  EXPECT_EQ(tail.covered_after(), 4);
  EXPECT_EQ(Ids(tail, {1, 2}, 4), (std::vector<int64_t>{5, 6, 7, 9}));
  EXPECT_EQ(Ids(tail, {2, 1, 2}, 5), (std::vector<int64_t>{6, 7, 9})) << "duplicate trial ids";
  EXPECT_EQ(Ids(tail, {1, 2}, 4, "validation"), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(Ids(tail, {1, 2, 3}, 4, "", 2), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(Ids(tail, {1, 2, 3}, 9), std::vector<int64_t>{});
  EXPECT_EQ(Ids(tail, {1, 2, 3}, 100), std::vector<int64_t>{}) << "after every committed row: nothing";
  EXPECT_EQ(Ids(tail, {1}, 3), std::vector<int64_t>{-1}) << "row 4 may be in SQLite only";
  EXPECT_EQ(Ids(tail, {42}, 4), std::vector<int64_t>{});
  std::vector<MetricTail::RowPtr> rows;
  ASSERT_TRUE(tail.Read({3}, "", 4, 0, &rows));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]->encoded, "{\"loss\":8}");
  EXPECT_EQ(rows[0]->total_batches, 80);
  EXPECT_EQ(rows[0]->time_ms, 1008);
}

TEST(MetricTailTest, StagedRowsAreInvisibleAndAbortDropsThem) {
  MetricTail tail;
  tail.SetBaseline(10);
  EXPECT_EQ(Ids(tail, {1}, 10), std::vector<int64_t>{});
  tail.Stage(Row(11, 1), "{}");
  EXPECT_EQ(Ids(tail, {1}, 10), std::vector<int64_t>{}) << "staged, not committed";
  tail.Abort();
  tail.Commit();
  EXPECT_EQ(Ids(tail, {1}, 10), std::vector<int64_t>{});
  Commit(tail, {Row(11, 1)});
  EXPECT_EQ(Ids(tail, {1}, 10), std::vector<int64_t>{11});
}

TEST(MetricTailTest, ASavepointRolledBackKeepsOnlyTheRowsBeforeIt) {
  MetricTail tail;
  tail.SetBaseline(0);
  const size_t outer = tail.Mark();
  tail.Stage(Row(1, 1), "{}");
  const size_t inner = tail.Mark();
  tail.Stage(Row(2, 1), "{}");
  tail.Stage(Row(3, 1), "{}");
  tail.RollbackTo(inner);
  const size_t inner2 = tail.Mark();
  tail.Stage(Row(4, 1), "{}");
  tail.RollbackTo(inner2 + 5);  // a mark past the end changes nothing
  tail.Commit();
  EXPECT_EQ(Ids(tail, {1}, 0), (std::vector<int64_t>{1, 4}));
  (void)outer;
  // A savepoint rolled back after an invalidation inside the same
  // transaction drops what was staged after the mark, not an index of the
  // rows the invalidation dropped.
  tail.Stage(Row(5, 1), "{}");
  tail.Stage(Row(6, 1), "{}");
  const size_t mark = tail.Mark();
  tail.Invalidate();
  tail.Stage(Row(7, 1), "{}");
  tail.RollbackTo(mark);
  tail.Commit();
  EXPECT_EQ(tail.covered_after(), 6);
  EXPECT_EQ(Ids(tail, {1}, 6), std::vector<int64_t>{}) << "row 7 was rolled back";
  EXPECT_EQ(Ids(tail, {1}, 5), std::vector<int64_t>{-1});
}

TEST(MetricTailTest, BoundedByRowsAndBytesAndEvictionMovesCoverage) {
  MetricTail by_rows(3, 1 << 20);
  Commit(by_rows, {Row(1, 1), Row(2, 2), Row(3, 1), Row(4, 2), Row(5, 1)});
  EXPECT_EQ(by_rows.stats().rows, 3u);
  EXPECT_EQ(by_rows.stats().evicted, 2u);
  EXPECT_EQ(by_rows.covered_after(), 2);
  EXPECT_EQ(Ids(by_rows, {1, 2}, 1), std::vector<int64_t>{-1}) << "row 2 was evicted";
  EXPECT_EQ(Ids(by_rows, {1, 2}, 2), (std::vector<int64_t>{3, 4, 5}));
  const size_t row_cost = MetricTail::kRowOverhead + 8 + 10;  // "training" + {"loss":N}
  MetricTail by_bytes(1000, 2 * row_cost);
  Commit(by_bytes, {Row(1, 1), Row(2, 1), Row(3, 1)});
  EXPECT_EQ(by_bytes.stats().rows, 2u);
  EXPECT_LE(by_bytes.stats().bytes, 2 * row_cost);
  EXPECT_EQ(Ids(by_bytes, {1}, 1), (std::vector<int64_t>{2, 3}));
  // A single row larger than the bound is not kept; coverage moves past it.
  MetricTail tiny(1000, 10);
  Commit(tiny, {Row(1, 1)});
  EXPECT_EQ(tiny.stats().rows, 0u);
  EXPECT_EQ(Ids(tiny, {1}, 1), std::vector<int64_t>{});
  EXPECT_EQ(Ids(tiny, {1}, 0), std::vector<int64_t>{-1});
}

TEST(MetricTailTest, InvalidateDropsEverythingAndCoverageRestartsAfterTheLargestId) {
  MetricTail tail;
  Commit(tail, {Row(1, 1), Row(2, 1)});
  tail.Invalidate();
  EXPECT_EQ(tail.stats().rows, 0u);
  EXPECT_EQ(Ids(tail, {1}, 0), std::vector<int64_t>{-1});
  EXPECT_EQ(Ids(tail, {1}, 2), std::vector<int64_t>{});
  tail.SetBaseline(1);  // coverage already known: no-op
  EXPECT_EQ(tail.covered_after(), 2);
  Commit(tail, {Row(3, 1)});
  EXPECT_EQ(Ids(tail, {1}, 2), std::vector<int64_t>{3});
  // Ids that break the contract (not after the kept rows) empty the tail.
  Commit(tail, {Row(3, 2)});
  EXPECT_EQ(tail.stats().rows, 0u);
  EXPECT_EQ(Ids(tail, {1, 2}, 2), std::vector<int64_t>{-1});
  // Before any row was seen an invalidation leaves no coverage.
  MetricTail fresh;
  fresh.Invalidate();
  EXPECT_FALSE(fresh.has_coverage());
}

// Many trials, one poll: the read costs the rows of the asked trials, not
// the tail's size (the index per trial).
TEST(MetricTailTest, AReadStepsOnlyOverTheAskedTrialsRows) {
  MetricTail tail;
  std::vector<MetricRow> rows;
  for (int64_t id = 1; id <= 100000; ++id) rows.push_back(Row(id, id % 1000));
  Commit(tail, rows);
  EXPECT_EQ(Ids(tail, {7}, 99000), (std::vector<int64_t>{99007}));
  EXPECT_EQ(Ids(tail, {7, 8}, 0, "", 3), (std::vector<int64_t>{7, 8, 1007}));
}

}  // namespace
}  // namespace master
}  // namespace det
