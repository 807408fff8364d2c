// A gtest fixture shared by the Store's unit tests: a fresh Store in a temp
// dir of its own per test (dir_, its database path_), removed afterwards;
// RawExec and RawQuery* reach the database file on a second, raw connection.
#ifndef DET_MASTER_STORE_STORE_TEST_FIXTURE_H_
#define DET_MASTER_STORE_STORE_TEST_FIXTURE_H_

#include <sqlite3.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "master/store/store.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {

// Reaches the metric writer's group commit directly, so that a test decides
// which calls make up one group.
class StoreGroupPeer {
 public:
  static std::vector<absl::Status> CommitMetricGroup(Store* store, const std::vector<std::vector<MetricRow>>& calls) {
    std::vector<std::unique_ptr<Store::PendingMetrics>> group;
    for (const auto& rows : calls) {
      auto p = std::make_unique<Store::PendingMetrics>();
      p->rows = rows;
      for (const MetricRow& r : rows) p->encoded.push_back(store_internal::EncodeMetrics(r.metrics));
      group.push_back(std::move(p));
    }
    store->CommitMetricGroup(group);
    std::vector<absl::Status> statuses;
    for (const auto& p : group) statuses.push_back(p->status);
    return statuses;
  }
};

class TempStoreTest : public ::testing::Test {
 protected:
  // `prefix`: the temp dir's name before its random suffix.
  explicit TempStoreTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    std::string tmpl = "/tmp/" + prefix_ + "_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/master.db";
    auto store = Store::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Runs `sql` on a raw connection to path_.
  void RawExec(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  // The first column of the first row of `sql` on a raw connection: as an
  // integer (-1 when there is no row), as text ("" when there is none).
  int64_t RawQueryInt(const std::string& sql) {
    int64_t v = -1;
    RawQueryFirstRow(sql, [&v](sqlite3_stmt* st) { v = sqlite3_column_int64(st, 0); });
    return v;
  }
  std::string RawQueryText(const std::string& sql) {
    std::string v;
    RawQueryFirstRow(sql, [&v](sqlite3_stmt* st) {
      if (sqlite3_column_text(st, 0) != nullptr) v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    });
    return v;
  }
  // Hands the first row of `sql` (if any) on a raw connection to `read`.
  void RawQueryFirstRow(const std::string& sql, const std::function<void(sqlite3_stmt*)>& read) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    if (sqlite3_step(st) == SQLITE_ROW) read(st);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }

  std::string prefix_;
  std::string dir_;
  std::string path_;
  std::unique_ptr<Store> store_;
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_STORE_TEST_FIXTURE_H_
