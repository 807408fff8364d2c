#include "bench/search_tasks.h"

#include <cmath>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace det {
namespace bench {
namespace {

// A table of 2 x 3 points, 2 seeds, lengths 16..256: the value at length j
// of (point p, seed s) is p + s / 10 + j / 1000.
nlohmann::json SmallTable() {
  nlohmann::json t = {{"task", "fmnist"}, {"metric", "accuracy"}, {"smaller_is_better", false}, {"seeds", 2}};
  for (int l = 16; l <= 256; l += 16) t["lengths"].push_back(l);
  t["axes"] = {{{"name", "a"}, {"values", {1, 2}}}, {{"name", "b"}, {"values", {0.1, 0.2, 0.3}}}};
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 3; ++b) {
      for (int s = 0; s < 2; ++s) {
        nlohmann::json row = {{"point", {a, b}}, {"seed", s}};
        for (int j = 0; j < 16; ++j) row["values"].push_back((a * 3 + b) + s / 10.0 + j / 1000.0);
        t["rows"].push_back(row);
      }
    }
  }
  return t;
}

class SearchTasksTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    std::string path = dir_.path() + "/table.json";
    std::ofstream(path) << text;
    return path;
  }
  // The error of loading `t`; "" when it loads.
  std::string Error(const nlohmann::json& t) {
    auto task = LoadTableTask(Write(t.dump()));
    return task.ok() ? "" : std::string(task.status().message());
  }
  det::testing::TempDir dir_;
};

TEST_F(SearchTasksTest, TableTrialsReplayTheirRecordedCurve) {
  auto task = LoadTableTask(Write(SmallTable().dump()));
  ASSERT_TRUE(task.ok()) << task.status();
  const SearchTask& t = **task;
  EXPECT_EQ(t.name(), "fmnist");
  ASSERT_EQ(t.space().size(), 2u);
  EXPECT_EQ(t.space()[1].name, "b");
  EXPECT_EQ(t.space()[1].high, 2);
  // Point (1, 2) = 5; trial seed 7 -> seed index 1.
  auto s = t.Start({{"a", 1}, {"b", 2}}, 7);
  ASSERT_TRUE(s.ok()) << s.status();
  t.Train(*s, 16);
  EXPECT_DOUBLE_EQ(*t.Validate(*s), 5.1);
  t.Train(*s, 40);  // the largest recorded length <= 40: 32
  EXPECT_DOUBLE_EQ(*t.Validate(*s), 5.101);
  // PBT on a table: the child's own curve from the parent's length on.
  auto child = t.Fork(*s, {{"a", 0}, {"b", 1}}, 4);
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(child->trained, 40);
  EXPECT_DOUBLE_EQ(*t.Validate(*child), 1.001);
  // The target: the 98th percentile (nearest rank) of the 12 final values,
  // the 12th smallest: 5.1 + 0.015.
  EXPECT_DOUBLE_EQ(t.Target(), 5.115);
}

TEST_F(SearchTasksTest, ValidatingBeforeTheFirstLengthIsAnError) {
  auto task = LoadTableTask(Write(SmallTable().dump()));
  ASSERT_TRUE(task.ok());
  auto s = (*task)->Start({{"a", 0}, {"b", 0}}, 0);
  (*task)->Train(*s, 15);
  EXPECT_EQ((*task)->Validate(*s).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SearchTasksTest, HparamsOutsideTheGridAreRefusedNamingTheField) {
  auto task = LoadTableTask(Write(SmallTable().dump()));
  ASSERT_TRUE(task.ok());
  auto s = (*task)->Start({{"a", 0}, {"b", 3}}, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'b'"), std::string::npos) << s.status();
  s = (*task)->Start({{"a", 0}}, 0);
  EXPECT_NE(s.status().message().find("'b'"), std::string::npos) << s.status();
}

TEST_F(SearchTasksTest, BadTablesNameTheFileAndField) {
  nlohmann::json t = SmallTable();
  t["rows"].erase(3);
  EXPECT_NE(Error(t).find("'rows' must be an array of exactly 12 rows"), std::string::npos) << Error(t);
  EXPECT_NE(Error(t).find("table.json"), std::string::npos);
  t = SmallTable();
  t["rows"][3] = t["rows"][2];
  EXPECT_NE(Error(t).find("'rows[3]': its point and seed appear twice"), std::string::npos) << Error(t);
  t = SmallTable();
  t["rows"][1]["values"][4] = "x";
  EXPECT_NE(Error(t).find("'rows[1].values[4]' must be a finite number"), std::string::npos) << Error(t);
  t = SmallTable();
  t["lengths"][1] = 40;
  EXPECT_NE(Error(t).find("'lengths[1]'"), std::string::npos) << Error(t);
  t = SmallTable();
  t["rows"][0]["point"][1] = 3;
  EXPECT_NE(Error(t).find("'rows[0].point[1]' must be an integer in [0, 2]"), std::string::npos) << Error(t);
  t = SmallTable();
  t["smaller_is_better"] = true;
  EXPECT_NE(Error(t).find("'smaller_is_better'"), std::string::npos) << Error(t);
  t = SmallTable();
  for (int i = 0; i < 8; ++i) t["axes"].push_back({{"name", "x" + std::to_string(i)}, {"values", {1}}});
  EXPECT_NE(Error(t).find("'axes' must be an array of 1..8 axes"), std::string::npos) << Error(t);
  t = SmallTable();
  t["axes"][0]["values"] = nlohmann::json::array();
  for (int i = 0; i < 65; ++i) t["axes"][0]["values"].push_back(i);
  EXPECT_NE(Error(t).find("'axes[0].values' must be an array of 1..64 values"), std::string::npos) << Error(t);
  t = SmallTable();
  t["axes"][0]["values"] = nlohmann::json::array();
  t["axes"][1]["values"] = nlohmann::json::array();
  for (int i = 0; i < 64; ++i) t["axes"][0]["values"].push_back(i);
  for (int i = 0; i < 64; ++i) t["axes"][1]["values"].push_back(i);
  t["seeds"] = 3;  // 64 x 64 x 3 = 12288 rows
  EXPECT_NE(Error(t).find("more than 10000 rows"), std::string::npos) << Error(t);
  EXPECT_NE(LoadTableTask(Write("{")).status().message().find("not valid JSON"), std::string::npos);
  EXPECT_NE(LoadTableTask(Write(std::string(kMaxTableBytes + 1, ' '))).status().message().find("larger than"),
            std::string::npos);
  EXPECT_FALSE(LoadTableTask(dir_.path() + "/missing.json").ok());
}

TEST_F(SearchTasksTest, SimulatedTrialsAreDeterministicAndBounded) {
  auto task = MakeSimulatedTask("rare");
  ASSERT_TRUE(task.ok());
  const SearchTask& t = **task;
  nlohmann::json hp = {{"lr", 0.006}, {"wd", 6e-5}, {"width", 181}};
  auto a = t.Start(hp, 11), b = t.Start(hp, 11);
  ASSERT_TRUE(a.ok() && b.ok());
  t.Train(*a, 256);
  t.Train(*b, 256);
  EXPECT_EQ(*t.Validate(*a), *t.Validate(*b));
  // The plateau of the best corner (0.92) with the luck of seed 11, within 0.05.
  EXPECT_NEAR(*t.Validate(*a), 0.92, 0.05);
  // A PBT child keeps its parent's quality and length.
  auto child = t.Fork(*a, {{"lr", 1e-4}, {"wd", 1e-6}, {"width", 16}}, 12);
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(child->q, a->q);
  EXPECT_EQ(child->trained, 256);
  EXPECT_FALSE(t.Start({{"lr", 2.0}, {"wd", 1e-3}, {"width", 20}}, 1).ok());
  EXPECT_FALSE(t.Start({{"lr", 0.01}, {"wd", 1e-3}, {"width", 20.5}}, 1).ok());
  EXPECT_FALSE(MakeSimulatedTask("fmnist").ok());
  // The target: above the median plateau, below the best.
  EXPECT_GT(t.Target(), 0.7);
  EXPECT_LT(t.Target(), 0.93);
}

TEST(SearchTasksTestQuantile, NearestRankIsTheCeilPnthSmallest) {
  EXPECT_EQ(NearestRankQuantile({5, 1, 4, 2, 3}, 0.5), 3);
  EXPECT_EQ(NearestRankQuantile({5, 1, 4, 2, 3}, 0.98), 5);
  EXPECT_EQ(NearestRankQuantile({5, 1, 4, 2, 3}, 0.2), 1);
  EXPECT_EQ(NearestRankQuantile({5, 1, 4, 2, 3}, 0.21), 2);
}

}  // namespace
}  // namespace bench
}  // namespace det
