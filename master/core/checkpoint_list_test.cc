#include "master/core/checkpoint_list.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace det::master {
namespace {

using Req = apiv1::GetExperimentCheckpointsRequest;

apiv1::Checkpoint Cp(const std::string& uuid, int64_t trial, int64_t batches, int64_t seconds,
                     std::optional<double> metric, apiv1::CheckpointState state = apiv1::CHECKPOINT_STATE_COMPLETED) {
  apiv1::Checkpoint c;
  c.set_uuid(uuid);
  c.set_trial_id(trial);
  c.set_total_batches(batches);
  c.mutable_report_time()->set_seconds(seconds);
  if (metric) c.set_searcher_metric(*metric);
  c.set_state(state);
  return c;
}

std::vector<apiv1::Checkpoint> Sample() {
  return {Cp("a", 2, 300, 30, 0.5), Cp("b", 1, 100, 10, std::nullopt), Cp("c", 1, 200, 20, 0.2),
          Cp("d", 3, 400, 40, 0.9, apiv1::CHECKPOINT_STATE_DELETED)};
}

std::string Uuids(const std::vector<apiv1::Checkpoint>& v) {
  std::string s;
  for (const auto& c : v) s += c.uuid();
  return s;
}

std::string Listed(CheckpointListQuery q, apiv1::Pagination* page = nullptr) {
  auto v = Sample();
  apiv1::Pagination p;
  absl::Status st = SortFilterPageCheckpoints(q, &v, page ? page : &p);
  return st.ok() ? Uuids(v) : st.ToString();
}

TEST(CheckpointListTest, EverySortKeyInBothDirections) {
  CheckpointListQuery q;
  EXPECT_EQ(Listed(q), "bcad");  // end time
  q.order_by = apiv1::ORDER_BY_DESC;
  EXPECT_EQ(Listed(q), "dacb");
  q.order_by = apiv1::ORDER_BY_ASC;
  q.sort_by = Req::SORT_BY_TRIAL_ID;
  EXPECT_EQ(Listed(q), "bcad");
  q.sort_by = Req::SORT_BY_TOTAL_BATCHES;
  EXPECT_EQ(Listed(q), "bcad");
  q.sort_by = Req::SORT_BY_UUID;
  q.order_by = apiv1::ORDER_BY_DESC;
  EXPECT_EQ(Listed(q), "dcba");
  q.sort_by = Req::SORT_BY_STATE;
  q.order_by = apiv1::ORDER_BY_ASC;
  EXPECT_EQ(Listed(q), "abcd");
}

TEST(CheckpointListTest, SearcherMetricBestFirstAndMissingLast) {
  CheckpointListQuery q;
  q.sort_by = Req::SORT_BY_SEARCHER_METRIC;
  EXPECT_EQ(Listed(q), "cadb");
  q.order_by = apiv1::ORDER_BY_DESC;
  EXPECT_EQ(Listed(q), "dacb");
  q.smaller_is_better = false;
  q.order_by = apiv1::ORDER_BY_ASC;
  EXPECT_EQ(Listed(q), "dacb");
}

// NaN has no order: such a checkpoint is never "best", it sorts with those
// without a metric (by uuid, last), in both senses and directions. Before,
// NaN compared equal to every metric and left the list in no defined order.
TEST(CheckpointListTest, SearcherMetricNanSortsLastLikeNoMetric) {
  const double nan = std::nan("");
  std::vector<apiv1::Checkpoint> v = {Cp("n1", 1, 1, 1, nan), Cp("x", 1, 2, 2, 0.3), Cp("n0", 1, 3, 3, nan),
                                      Cp("y", 1, 4, 4, 0.1), Cp("m", 1, 5, 5, std::nullopt), Cp("z", 1, 6, 6, 0.2)};
  for (bool smaller : {true, false}) {
    for (auto order : {apiv1::ORDER_BY_ASC, apiv1::ORDER_BY_DESC}) {
      CheckpointListQuery q;
      q.sort_by = Req::SORT_BY_SEARCHER_METRIC;
      q.smaller_is_better = smaller;
      q.order_by = order;
      auto got = v;
      apiv1::Pagination page;
      ASSERT_TRUE(SortFilterPageCheckpoints(q, &got, &page).ok());
      const bool best_first = order == apiv1::ORDER_BY_ASC;
      EXPECT_EQ(Uuids(got), std::string(smaller == best_first ? "yzx" : "xzy") + "mn0n1")
          << "smaller_is_better " << smaller << " order " << order;
    }
  }
}

TEST(CheckpointListTest, StatesFilterAndPaging) {
  CheckpointListQuery q;
  q.states = {apiv1::CHECKPOINT_STATE_COMPLETED};
  q.offset = 1;
  q.limit = 1;
  apiv1::Pagination page;
  EXPECT_EQ(Listed(q, &page), "c");
  EXPECT_EQ(page.total(), 3);
  EXPECT_EQ(page.start_index(), 1);
  EXPECT_EQ(page.end_index(), 2);
  q.offset = 99;
  EXPECT_EQ(Listed(q, &page), "");
  EXPECT_EQ(page.end_index(), 3);
}

TEST(CheckpointListTest, BadRequestsNameTheirField) {
  CheckpointListQuery q;
  q.offset = -1;
  EXPECT_NE(Listed(q).find("offset"), std::string::npos);
  q.offset = 0;
  q.limit = -5;
  EXPECT_NE(Listed(q).find("limit"), std::string::npos);
  q.limit = 0;
  q.sort_by = static_cast<Req::SortBy>(77);
  EXPECT_NE(Listed(q).find("sort_by"), std::string::npos);
  q.sort_by = Req::SORT_BY_UUID;
  q.offset = 2147483647;
  q.limit = 2147483647;  // no overflow
  EXPECT_EQ(Listed(q), "");
}

}  // namespace
}  // namespace det::master
