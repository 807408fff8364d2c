// Unit tests of the metric and log helpers (metrics_logs.h), the store's
// filtered log and metric-stream queries, and MasterLogRing.
#include "master/core/metrics_logs.h"

#include <gtest/gtest.h>

#include <memory>

#include "master/core/master_log_ring.h"
#include "master/core/proto_convert.h"
#include "master/store/store.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;

TEST(MetricsLogsTest, MetricGroupNames) {
  for (const std::string& ok : {std::string("inference"), std::string("training"), std::string("a"),
                                std::string("x_1"), std::string(64, 'a')}) {
    EXPECT_TRUE(ValidateMetricGroup(ok).ok()) << ok;
  }
  for (const std::string& bad : {std::string(), std::string(65, 'a'), std::string("Inference"),
                                 std::string("a-b"), std::string("a b"), std::string("../x"), std::string("é")}) {
    absl::Status st = ValidateMetricGroup(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("group"), absl::string_view::npos);
  }
}

ValidationPoint Point(int64_t trial, int64_t time_ms, std::map<std::string, double> m) {
  ValidationPoint p;
  p.trial_id = trial;
  p.time_ms = time_ms;
  p.total_batches = time_ms * 10;
  p.metrics = std::move(m);
  return p;
}

TEST(MetricsLogsTest, BestSoFarKeepsOnlyImprovementsInTimeOrder) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<ValidationPoint> points = {
      Point(1, 1, {{"loss", 0.9}}), Point(2, 2, {{"loss", 1.2}}),   // worse
      Point(2, 3, {{"other", 0.1}}),                                // no searcher metric
      Point(1, 4, {{"loss", nan}}),                                 // NaN never improves
      Point(2, 5, {{"loss", 0.5}}), Point(1, 6, {{"loss", 0.5}}),   // a tie is no improvement
      Point(1, 7, {{"loss", 0.2}})};
  auto smaller = BestSoFar(points, "loss", /*smaller_is_better=*/true);
  ASSERT_EQ(smaller.size(), 3u);
  EXPECT_EQ(smaller[0].trial_id(), 1);
  EXPECT_DOUBLE_EQ(smaller[0].searcher_metric(), 0.9);
  EXPECT_EQ(smaller[1].trial_id(), 2);
  EXPECT_DOUBLE_EQ(smaller[1].searcher_metric(), 0.5);
  EXPECT_EQ(smaller[1].total_batches(), 50);
  EXPECT_EQ(TimeMs(smaller[1].end_time()), 5);
  EXPECT_DOUBLE_EQ(smaller[2].searcher_metric(), 0.2);

  auto larger = BestSoFar(points, "loss", /*smaller_is_better=*/false);
  ASSERT_EQ(larger.size(), 2u);
  EXPECT_DOUBLE_EQ(larger[0].searcher_metric(), 0.9);
  EXPECT_DOUBLE_EQ(larger[1].searcher_metric(), 1.2);
  EXPECT_TRUE(BestSoFar(points, "absent", true).empty());
}

TEST(MetricsLogsTest, TrialLogsRequestChecks) {
  apiv1::TrialLogsRequest req;
  req.set_trial_id(1);
  EXPECT_TRUE(ValidateTrialLogsRequest(req).ok());
  req.set_tail(-1);
  EXPECT_EQ(ValidateTrialLogsRequest(req).code(), absl::StatusCode::kInvalidArgument);
  req.set_tail(3);
  req.set_offset(2);
  EXPECT_EQ(ValidateTrialLogsRequest(req).code(), absl::StatusCode::kInvalidArgument);
  req.set_offset(0);
  req.set_search_text(std::string(1025, 'x'));
  EXPECT_EQ(ValidateTrialLogsRequest(req).code(), absl::StatusCode::kInvalidArgument);
  req.clear_search_text();
  for (int i = 0; i < 101; ++i) req.add_ranks(i);
  auto f = TaskLogFilterOf(req, 0);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("ranks"), absl::string_view::npos);
}

class StoreFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(dir_ / "det.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    ExperimentRow e;
    e.name = "e";
    e.state = "ACTIVE";
    exp_ = *store_->InsertExperiment(e);
    TrialRow t;
    t.experiment_id = exp_;
    t.state = "ACTIVE";
    trial_ = *store_->InsertTrial(t);
    other_ = *store_->InsertTrial(t);
  }
  void Log(int64_t trial, int rank, int64_t time_ms, const std::string& level, const std::string& stream,
           const std::string& message) {
    TaskLogRow r;
    r.trial_id = trial;
    r.allocation_id = "alloc-" + std::to_string(rank);
    r.rank = rank;
    r.time_ms = time_ms;
    r.level = level;
    r.stream = stream;
    r.message = message;
    ASSERT_TRUE(store_->InsertTaskLogs({r}).ok());
  }
  std::vector<std::string> Messages(const apiv1::TrialLogsRequest& req) {
    auto f = TaskLogFilterOf(req, 0);
    EXPECT_TRUE(f.ok()) << f.status();
    auto rows = store_->ListTaskLogsFiltered(*f, 0);
    EXPECT_TRUE(rows.ok()) << rows.status();
    std::vector<std::string> out;
    for (const auto& r : *rows) out.push_back(r.message);
    return out;
  }

  testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  int64_t exp_ = 0, trial_ = 0, other_ = 0;
};

TEST_F(StoreFilterTest, EachFilterSelectsItsLines) {
  Log(trial_, 0, 1000, "LOG_LEVEL_INFO", "stdout", "alpha 100% done");
  Log(trial_, 1, 2000, "LOG_LEVEL_ERROR", "stderr", "beta 1000 done");
  Log(trial_, 0, 3000, "LOG_LEVEL_WARNING", "system", "gamma_x");
  Log(trial_, 1, 4000, "LOG_LEVEL_UNSPECIFIED", "stdout", "delta 100 done");
  Log(other_, 0, 1000, "LOG_LEVEL_INFO", "stdout", "other trial 100% done");
  apiv1::TrialLogsRequest req;
  req.set_trial_id(trial_);
  EXPECT_EQ(Messages(req).size(), 4u);

  auto with = [&](auto set) {
    apiv1::TrialLogsRequest r = req;
    set(r);
    return Messages(r);
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(with([](auto& r) { r.add_ranks(1); }), (V{"beta 1000 done", "delta 100 done"}));
  EXPECT_EQ(with([](auto& r) { r.add_levels(apiv1::LOG_LEVEL_ERROR); r.add_levels(apiv1::LOG_LEVEL_WARNING); }),
            (V{"beta 1000 done", "gamma_x"}));
  EXPECT_EQ(with([](auto& r) { r.add_stdtypes(apiv1::STD_TYPE_STDERR); }), (V{"beta 1000 done"}));
  EXPECT_EQ(with([](auto& r) { r.add_stdtypes(apiv1::STD_TYPE_UNSPECIFIED); }), (V{"gamma_x"}));
  EXPECT_EQ(with([](auto& r) { r.add_allocation_ids("alloc-0"); }), (V{"alpha 100% done", "gamma_x"}));
  // A literal match: '%' and '_' are not LIKE wildcards.
  EXPECT_EQ(with([](auto& r) { r.set_search_text("100%"); }), (V{"alpha 100% done"}));
  EXPECT_EQ(with([](auto& r) { r.set_search_text("a_x"); }), (V{"gamma_x"}));
  EXPECT_EQ(with([](auto& r) { r.set_search_text("' OR 1=1 --"); }), V{});
  EXPECT_EQ(with([](auto& r) {
              SetTime(r.mutable_since(), 2000);
              SetTime(r.mutable_until(), 4000);
            }),
            (V{"beta 1000 done", "gamma_x"}));

  // tail: the after_id that leaves the last N matching lines.
  auto f = TaskLogFilterOf(req, 0);
  ASSERT_TRUE(f.ok());
  f->ranks = {0};
  auto start = store_->TaskLogTailStart(*f, 1);
  ASSERT_TRUE(start.ok()) << start.status();
  f->after_id = *start;
  auto rows = store_->ListTaskLogsFiltered(*f, 0);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].message, "gamma_x");
  EXPECT_EQ(*store_->TaskLogTailStart(*f, 10), 0);  // fewer lines than the tail: all
}

TEST_F(StoreFilterTest, MetricsAfterIdAcrossTrialsAndValidations) {
  auto row = [](int64_t trial, const std::string& group, int64_t batches, int64_t time_ms, double v) {
    MetricRow m;
    m.trial_id = trial;
    m.group = group;
    m.total_batches = batches;
    m.time_ms = time_ms;
    m.metrics = {{"validation_loss", v}};
    return m;
  };
  ASSERT_TRUE(store_->InsertMetrics({row(trial_, "training", 10, 1, 1.0), row(other_, "inference", 10, 2, 2.0),
                                     row(trial_, "validation", 10, 3, 0.5), row(other_, "validation", 10, 4, 0.7)})
                  .ok());
  auto all = store_->ListMetricsAfterId({trial_, other_}, "", 0, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);
  for (size_t i = 1; i < all->size(); ++i) EXPECT_LT((*all)[i - 1].id, (*all)[i].id);
  auto after = store_->ListMetricsAfterId({other_}, "", (*all)[1].id, 0);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].group, "validation");
  auto inference = store_->ListMetricsAfterId({trial_, other_}, "inference", 0, 0);
  ASSERT_EQ(inference->size(), 1u);
  std::vector<int64_t> too_many(1001, trial_);
  EXPECT_EQ(store_->ListMetricsAfterId(too_many, "", 0, 0).status().code(), absl::StatusCode::kInvalidArgument);

  auto validations = store_->ListExperimentValidations(exp_);
  ASSERT_TRUE(validations.ok()) << validations.status();
  ASSERT_EQ(validations->size(), 2u);
  EXPECT_EQ((*validations)[0].trial_id, trial_);
  EXPECT_EQ((*validations)[1].trial_id, other_);
  auto best = BestSoFar(*validations, "validation_loss", true);
  ASSERT_EQ(best.size(), 1u);  // 0.7 after 0.5 is no improvement
}

TEST(MasterLogRingTest, KeepsTheLastLinesAndFilters) {
  MasterLogRing ring(/*max_lines=*/3);
  for (int i = 1; i <= 5; ++i) {
    ring.Append(i, i % 2 ? apiv1::LOG_LEVEL_INFO : apiv1::LOG_LEVEL_WARNING, "line " + std::to_string(i));
  }
  apiv1::MasterLogsRequest req;
  auto lines = ring.Read(req, 0, 100);
  ASSERT_EQ(lines.size(), 3u);  // lines 1 and 2 dropped
  EXPECT_EQ(lines[0].id(), 3);
  EXPECT_EQ(lines[2].message(), "line 5");
  EXPECT_EQ(ring.Read(req, 4, 100).size(), 1u);
  req.add_levels(apiv1::LOG_LEVEL_WARNING);
  lines = ring.Read(req, 0, 100);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].message(), "line 4");
  req.clear_levels();
  req.set_search_text("line 3");
  EXPECT_EQ(ring.Read(req, 0, 100).size(), 1u);
  req.clear_search_text();
  EXPECT_EQ(ring.TailStart(req, 2), 3);  // reads lines 4 and 5
  EXPECT_EQ(ring.TailStart(req, 10), 0);
}

}  // namespace
}  // namespace det::master
