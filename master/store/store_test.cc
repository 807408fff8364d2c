#include "master/store/store.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "master/store/store_test_fixture.h"

namespace det {
namespace master {
namespace {

// A training report of `trial` at `batches`.
MetricRow Metric(int64_t trial, int64_t batches) {
  MetricRow m;
  m.trial_id = trial;
  m.group = "training";
  m.total_batches = batches;
  m.metrics = {{"loss", 0.5}};
  return m;
}

// Polls (every millisecond, for up to 10 s) until thread `tid` of this
// process (0: not started yet) is blocked in futex(2) on a word inside
// [object, object + size), as /proc/self/task/TID/syscall shows it: the
// syscall number, then its arguments, the futex word's address first.
bool WaitUntilBlockedOnFutexIn(const std::atomic<pid_t>& tid, const void* object, size_t size) {
  const auto base = reinterpret_cast<uintptr_t>(object);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (tid.load() != 0) {
      std::ifstream in("/proc/self/task/" + std::to_string(tid.load()) + "/syscall");
      long nr = -1;
      std::string addr;
      if (in >> nr >> addr && nr == SYS_futex) {
        const uintptr_t word = std::stoull(addr, nullptr, 16);
        if (word >= base && word < base + size) return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

class StoreTest : public TempStoreTest {
 protected:
  StoreTest() : TempStoreTest("det_store_test") {}

  int64_t AddExperiment(const std::string& name = "exp", const std::string& state = "ACTIVE") {
    ExperimentRow e;
    e.name = name;
    e.state = state;
    auto id = store_->InsertExperiment(e);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }
  int64_t AddTrial(int64_t experiment_id, const std::string& state = "ACTIVE") {
    TrialRow t;
    t.experiment_id = experiment_id;
    t.state = state;
    auto id = store_->InsertTrial(t);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }
};

TEST_F(StoreTest, MigrationsApplyOnceAndReopenIsIdempotent) {
  ASSERT_GE(Store::LatestSchemaVersion(), 1);
  auto v = store_->SchemaVersion();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, Store::LatestSchemaVersion());
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM schema_migrations"), Store::LatestSchemaVersion());
  EXPECT_GT(RawQueryInt("SELECT MIN(applied_at) FROM schema_migrations"), 1600000000000);
  int64_t id = AddExperiment("persisted");

  store_.reset();
  auto reopened = Store::Open(path_);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  store_ = std::move(*reopened);
  EXPECT_EQ(store_->SchemaVersion().value_or(-1), Store::LatestSchemaVersion());
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM schema_migrations"), Store::LatestSchemaVersion());
  auto e = store_->GetExperiment(id);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->name, "persisted");
}

TEST_F(StoreTest, UsesWalJournal) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST_F(StoreTest, NewerSchemaIsRefusedNamingTheFile) {
  store_.reset();
  RawExec("INSERT INTO schema_migrations(version, applied_at) VALUES (9999, 0)");
  auto s = Store::Open(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find(path_), std::string::npos) << s.status();
}

TEST_F(StoreTest, OpenErrorsNameTheFile) {
  const std::string bad = dir_ + "/no/such/dir/master.db";
  auto s = Store::Open(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(bad), std::string::npos) << s.status();

  const std::string garbage = dir_ + "/garbage.db";
  FILE* f = fopen(garbage.c_str(), "w");
  ASSERT_NE(f, nullptr);
  for (int i = 0; i < 200; ++i) fputs("this is not an sqlite database file. ", f);
  fclose(f);
  auto g = Store::Open(garbage);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find(garbage), std::string::npos) << g.status();
}

TEST_F(StoreTest, ExperimentRoundTrip) {
  ExperimentRow e;
  e.id = 777;  // ignored
  e.name = "mnist";
  e.description = "a description with 'quotes' and \"double quotes\"";
  e.labels = {"vision", "baseline", "ünïcode"};
  e.state = "ACTIVE";
  e.config_yaml = "name: mnist\n";
  e.config_json = R"({"name":"mnist"})";
  e.trial_so_sha256 = std::string(64, 'a');
  e.searcher_state_json = R"({"kind":"single"})";
  e.owner = "alice";
  e.archived = false;
  e.progress = 0.25;
  e.created_ms = 1700000000123;
  auto id = store_->InsertExperiment(e);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_NE(*id, 777);

  auto got = store_->GetExperiment(*id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->id, *id);
  EXPECT_EQ(got->name, e.name);
  EXPECT_EQ(got->description, e.description);
  EXPECT_EQ(got->labels, e.labels);
  EXPECT_EQ(got->state, e.state);
  EXPECT_EQ(got->config_yaml, e.config_yaml);
  EXPECT_EQ(got->config_json, e.config_json);
  EXPECT_EQ(got->trial_so_sha256, e.trial_so_sha256);
  EXPECT_EQ(got->searcher_state_json, e.searcher_state_json);
  EXPECT_EQ(got->owner, e.owner);
  EXPECT_EQ(got->archived, false);
  EXPECT_DOUBLE_EQ(got->progress, 0.25);
  EXPECT_EQ(got->created_ms, e.created_ms);
  EXPECT_EQ(got->ended_ms, 0);
  EXPECT_EQ(got->checkpoint_gc_policy_json, "");

  ExperimentRow u = *got;
  u.state = "COMPLETED";
  u.progress = 1.0;
  u.archived = true;
  u.labels = {};
  u.ended_ms = 1700000009999;
  u.checkpoint_gc_policy_json = R"({"save_trial_best":0})";
  u.created_ms = 1;  // immutable: not updated
  ASSERT_TRUE(store_->UpdateExperiment(u).ok());
  got = store_->GetExperiment(*id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->checkpoint_gc_policy_json, u.checkpoint_gc_policy_json);
  EXPECT_EQ(got->state, "COMPLETED");
  EXPECT_DOUBLE_EQ(got->progress, 1.0);
  EXPECT_TRUE(got->archived);
  EXPECT_TRUE(got->labels.empty());
  EXPECT_EQ(got->ended_ms, 1700000009999);
  EXPECT_EQ(got->created_ms, e.created_ms);
}

// The job knobs UpdateJob stores: NULL (the config's) until set, then
// written by UpdateExperiment and read back; NULL again when cleared.
TEST_F(StoreTest, ExperimentJobKnobsRoundTrip) {
  ExperimentRow e;
  e.name = "jobs";
  e.state = "ACTIVE";
  e.labels = {};
  auto id = store_->InsertExperiment(e);
  ASSERT_TRUE(id.ok()) << id.status();
  auto got = store_->GetExperiment(*id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->job_priority.has_value());
  EXPECT_FALSE(got->job_weight.has_value());
  EXPECT_FALSE(got->job_max_slots.has_value());
  EXPECT_FALSE(got->job_queue_position.has_value());
  ExperimentRow u = *got;
  u.job_priority = 7;
  u.job_weight = 2.5;
  u.job_max_slots = 0;
  u.job_queue_position = 1.75;
  ASSERT_TRUE(store_->UpdateExperiment(u).ok());
  got = store_->GetExperiment(*id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->job_priority, std::optional<int64_t>(7));
  EXPECT_EQ(got->job_weight, std::optional<double>(2.5));
  EXPECT_EQ(got->job_max_slots, std::optional<int64_t>(0));
  EXPECT_EQ(got->job_queue_position, std::optional<double>(1.75));
  u.job_weight.reset();
  ASSERT_TRUE(store_->UpdateExperiment(u).ok());
  got = store_->GetExperiment(*id);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->job_weight.has_value());
  EXPECT_EQ(got->job_priority, std::optional<int64_t>(7));
}

TEST_F(StoreTest, NotFoundErrorsNameTheId) {
  auto e = store_->GetExperiment(42);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(e.status().message(), "experiment 42 not found");

  ExperimentRow er;
  er.id = 43;
  auto ue = store_->UpdateExperiment(er);
  EXPECT_EQ(ue.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ue.message(), "experiment 43 not found");

  auto t = store_->GetTrial(7);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.status().message(), "trial 7 not found");

  TrialRow tr;
  tr.id = 8;
  auto ut = store_->UpdateTrial(tr);
  EXPECT_EQ(ut.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ut.message(), "trial 8 not found");

  auto c = store_->GetCheckpoint("abc-123");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(), "checkpoint abc-123 not found");

  auto uc = store_->UpdateCheckpointState("abc-124", "DELETED");
  EXPECT_EQ(uc.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(uc.message(), "checkpoint abc-124 not found");
}

TEST_F(StoreTest, ExperimentFiltersAndPagination) {
  // ids 1..10; even ids PAUSED, odd ACTIVE; id % 3 == 0 archived; labels.
  for (int i = 1; i <= 10; ++i) {
    ExperimentRow e;
    e.name = i <= 5 ? "alpha-" + std::to_string(i) : "beta-" + std::to_string(i);
    e.state = i % 2 == 0 ? "PAUSED" : "ACTIVE";
    e.archived = i % 3 == 0;
    if (i % 4 == 0) e.labels = {"four", "x"};
    ASSERT_EQ(store_->InsertExperiment(e).value_or(-1), i);
  }
  auto ids = [&](const ExperimentFilter& f) {
    std::vector<int64_t> out;
    auto rows = store_->ListExperiments(f);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (rows.ok()) {
      for (const auto& r : *rows) out.push_back(r.id);
    }
    return out;
  };
  ExperimentFilter all;
  EXPECT_EQ(ids(all), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(store_->CountExperiments(all).value_or(-1), 10);

  ExperimentFilter paused;
  paused.states = {"PAUSED"};
  EXPECT_EQ(ids(paused), (std::vector<int64_t>{2, 4, 6, 8, 10}));

  ExperimentFilter two_states;
  two_states.states = {"PAUSED", "ACTIVE"};
  EXPECT_EQ(store_->CountExperiments(two_states).value_or(-1), 10);

  ExperimentFilter name;
  name.name_contains = "beta";
  EXPECT_EQ(ids(name), (std::vector<int64_t>{6, 7, 8, 9, 10}));
  name.name_contains = "a-1";  // substring, not a LIKE pattern
  EXPECT_EQ(ids(name), (std::vector<int64_t>{1, 10}));
  name.name_contains = "%";
  EXPECT_TRUE(ids(name).empty());

  ExperimentFilter label;
  label.label = "four";
  EXPECT_EQ(ids(label), (std::vector<int64_t>{4, 8}));
  label.label = "fou";
  EXPECT_TRUE(ids(label).empty());

  ExperimentFilter unarchived;
  unarchived.include_archived = false;
  EXPECT_EQ(ids(unarchived), (std::vector<int64_t>{1, 2, 4, 5, 7, 8, 10}));

  ExperimentFilter combined;
  combined.states = {"PAUSED"};
  combined.include_archived = false;
  combined.name_contains = "beta";
  EXPECT_EQ(ids(combined), (std::vector<int64_t>{8, 10}));
  EXPECT_EQ(store_->CountExperiments(combined).value_or(-1), 2);

  ExperimentFilter page;
  page.limit = 3;
  EXPECT_EQ(ids(page), (std::vector<int64_t>{1, 2, 3}));
  page.offset = 3;
  EXPECT_EQ(ids(page), (std::vector<int64_t>{4, 5, 6}));
  page.offset = 9;
  EXPECT_EQ(ids(page), (std::vector<int64_t>{10}));
  EXPECT_EQ(store_->CountExperiments(page).value_or(-1), 10);  // ignores paging
  page.offset = 2;
  page.order_desc = true;
  EXPECT_EQ(ids(page), (std::vector<int64_t>{8, 7, 6}));
  ExperimentFilter offset_only;
  offset_only.offset = 8;
  EXPECT_EQ(ids(offset_only), (std::vector<int64_t>{9, 10}));
}

TEST_F(StoreTest, TrialRoundTripAndStates) {
  int64_t exp = AddExperiment();
  TrialRow t;
  t.experiment_id = exp;
  t.request_id = 12345678901;
  t.state = "ACTIVE";
  t.hparams_json = R"({"lr":0.01})";
  t.seed = 4000000000u;
  t.restarts = 2;
  t.run_id = 3;
  t.total_batches = 937;
  t.latest_checkpoint_uuid = "ckpt-1";
  t.best_validation = 0.5;
  t.sequencer_state_json = "{}";
  t.created_ms = 1700000000000;
  auto id = store_->InsertTrial(t);
  ASSERT_TRUE(id.ok()) << id.status();
  auto got = store_->GetTrial(*id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->id, *id);
  EXPECT_EQ(got->experiment_id, exp);
  EXPECT_EQ(got->request_id, 12345678901);
  EXPECT_EQ(got->state, "ACTIVE");
  EXPECT_EQ(got->hparams_json, t.hparams_json);
  EXPECT_EQ(got->seed, 4000000000u);
  EXPECT_EQ(got->restarts, 2);
  EXPECT_EQ(got->run_id, 3);
  EXPECT_EQ(got->total_batches, 937);
  EXPECT_EQ(got->latest_checkpoint_uuid, "ckpt-1");
  ASSERT_TRUE(got->best_validation.has_value());
  EXPECT_DOUBLE_EQ(*got->best_validation, 0.5);
  EXPECT_FALSE(got->latest_validation.has_value());
  EXPECT_EQ(got->sequencer_state_json, "{}");
  EXPECT_EQ(got->created_ms, 1700000000000);
  EXPECT_EQ(got->ended_ms, 0);

  TrialRow u = *got;
  u.state = "COMPLETED";
  u.best_validation.reset();
  u.latest_validation = -1.5;
  u.total_batches = 2000;
  u.ended_ms = 1700000005000;
  ASSERT_TRUE(store_->UpdateTrial(u).ok());
  got = store_->GetTrial(*id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, "COMPLETED");
  EXPECT_FALSE(got->best_validation.has_value());
  EXPECT_DOUBLE_EQ(got->latest_validation.value_or(0), -1.5);
  EXPECT_EQ(got->total_batches, 2000);
  EXPECT_EQ(got->ended_ms, 1700000005000);

  int64_t exp2 = AddExperiment();
  int64_t t2 = AddTrial(exp2, "PAUSED");
  int64_t t3 = AddTrial(exp, "ACTIVE");
  int64_t t4 = AddTrial(exp2, "STOPPING_CANCELED");
  auto list = store_->ListTrials(exp);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].id, *id);
  EXPECT_EQ((*list)[1].id, t3);
  EXPECT_TRUE(store_->ListTrials(9999).value().empty());

  auto recovering = store_->ListTrialsInStates({"ACTIVE", "PAUSED", "STOPPING_CANCELED"});
  ASSERT_TRUE(recovering.ok()) << recovering.status();
  std::vector<int64_t> ids;
  for (const auto& r : *recovering) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<int64_t>{t2, t3, t4}));
  EXPECT_TRUE(store_->ListTrialsInStates({}).value().empty());

  // Foreign key: a trial of an unknown experiment.
  TrialRow orphan;
  orphan.experiment_id = 4242;
  orphan.state = "ACTIVE";
  auto bad = store_->InsertTrial(orphan);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition) << bad.status();
  EXPECT_NE(bad.status().message().find("4242"), std::string::npos);
}

TEST_F(StoreTest, MetricsRoundTripWithNonFiniteValues) {
  int64_t trial = AddTrial(AddExperiment());
  MetricRow m;
  m.trial_id = trial;
  m.trial_run_id = 1;
  m.group = "training";
  m.total_batches = 100;
  m.total_epochs = 0.5;
  m.metrics = {{"loss", std::numeric_limits<double>::quiet_NaN()},
               {"big", std::numeric_limits<double>::infinity()},
               {"small", -std::numeric_limits<double>::infinity()},
               {"acc", 0.1 + 0.2},
               {"int", 3.0},
               {"tiny", 1e-300},
               {"name \"quoted\"", -0.0}};
  m.time_ms = 1700000000000;
  ASSERT_TRUE(store_->InsertMetrics({m}).ok());
  auto rows = store_->ListMetrics(trial, "", false);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  const MetricRow& r = (*rows)[0];
  EXPECT_GT(r.id, 0);
  EXPECT_EQ(r.trial_id, trial);
  EXPECT_EQ(r.trial_run_id, 1);
  EXPECT_EQ(r.group, "training");
  EXPECT_EQ(r.total_batches, 100);
  EXPECT_DOUBLE_EQ(r.total_epochs, 0.5);
  EXPECT_EQ(r.time_ms, 1700000000000);
  EXPECT_FALSE(r.archived);
  ASSERT_EQ(r.metrics.size(), m.metrics.size());
  EXPECT_TRUE(std::isnan(r.metrics.at("loss")));
  EXPECT_EQ(r.metrics.at("big"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(r.metrics.at("small"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(r.metrics.at("acc"), 0.1 + 0.2);  // exact round trip
  EXPECT_EQ(r.metrics.at("int"), 3.0);
  EXPECT_EQ(r.metrics.at("tiny"), 1e-300);
  EXPECT_EQ(r.metrics.at("name \"quoted\""), 0.0);
}

TEST_F(StoreTest, ListMetricsFiltersAndArchive) {
  int64_t trial = AddTrial(AddExperiment());
  int64_t other = AddTrial(AddExperiment());
  std::vector<MetricRow> rows;
  for (int b = 100; b <= 500; b += 100) {
    for (const char* g : {"training", "validation"}) {
      MetricRow m;
      m.trial_id = trial;
      m.trial_run_id = 1;
      m.group = g;
      m.total_batches = b;
      m.metrics = {{"loss", 1.0 / b}};
      rows.push_back(m);
    }
  }
  MetricRow o;
  o.trial_id = other;
  o.group = "training";
  o.total_batches = 1;
  rows.push_back(o);
  // Inserted out of order: listing sorts by total_batches then id.
  std::swap(rows[0], rows[8]);
  ASSERT_TRUE(store_->InsertMetrics(rows).ok());

  auto batches = [](const std::vector<MetricRow>& v) {
    std::vector<int64_t> out;
    for (const auto& m : v) out.push_back(m.total_batches);
    return out;
  };
  auto all = store_->ListMetrics(trial, "", true);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 10u);
  for (size_t i = 1; i < all->size(); ++i) {
    EXPECT_TRUE((*all)[i - 1].total_batches < (*all)[i].total_batches ||
                ((*all)[i - 1].total_batches == (*all)[i].total_batches && (*all)[i - 1].id < (*all)[i].id));
  }
  auto val = store_->ListMetrics(trial, "validation", true);
  ASSERT_TRUE(val.ok());
  EXPECT_EQ(batches(*val), (std::vector<int64_t>{100, 200, 300, 400, 500}));
  for (const auto& m : *val) EXPECT_EQ(m.group, "validation");
  auto after = store_->ListMetrics(trial, "training", true, /*after_batches=*/200);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(batches(*after), (std::vector<int64_t>{300, 400, 500}));
  auto limited = store_->ListMetrics(trial, "training", true, 200, /*limit=*/2);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(batches(*limited), (std::vector<int64_t>{300, 400}));

  ASSERT_TRUE(store_->ArchiveMetricsAfter(trial, 300).ok());
  auto live = store_->ListMetrics(trial, "training", false);
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(batches(*live), (std::vector<int64_t>{100, 200, 300}));
  auto with_archived = store_->ListMetrics(trial, "training", true);
  ASSERT_TRUE(with_archived.ok());
  EXPECT_EQ(batches(*with_archived), (std::vector<int64_t>{100, 200, 300, 400, 500}));
  EXPECT_FALSE((*with_archived)[2].archived);
  EXPECT_TRUE((*with_archived)[3].archived);
  EXPECT_TRUE((*with_archived)[4].archived);
  // The other trial is untouched.
  auto o_rows = store_->ListMetrics(other, "", false);
  ASSERT_TRUE(o_rows.ok());
  EXPECT_EQ(o_rows->size(), 1u);
  EXPECT_TRUE(store_->ArchiveMetricsAfter(9999, 0).ok());
}

TEST_F(StoreTest, InsertMetricsIsAllOrNothing) {
  int64_t trial = AddTrial(AddExperiment());
  std::vector<MetricRow> rows(3);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].trial_id = trial;
    rows[i].group = "training";
    rows[i].total_batches = static_cast<int64_t>(i);
  }
  rows[2].trial_id = 9999;  // unknown trial: foreign key violation
  auto s = store_->InsertMetrics(rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(store_->ListMetrics(trial, "", true).value().empty());
  // The store is still usable after the rollback.
  rows.pop_back();
  ASSERT_TRUE(store_->InsertMetrics(rows).ok());
  EXPECT_EQ(store_->ListMetrics(trial, "", true).value().size(), 2u);
  EXPECT_TRUE(store_->InsertMetrics({}).ok());
}

// A validation sets the searcher metric of its own run's checkpoint at its
// batches only: a checkpoint of an earlier run at the same batches (before a
// rewind to an older checkpoint) keeps none.
TEST_F(StoreTest, SearcherMetricIsSetOnTheRunsOwnCheckpoint) {
  const int64_t exp = AddExperiment();
  const int64_t trial = AddTrial(exp);
  CheckpointRow c;
  c.trial_id = trial;
  c.experiment_id = exp;
  c.state = "COMPLETED";
  c.total_batches = 100;
  c.storage_path = "/checkpoints/x";
  for (int64_t run : {1, 2}) {
    c.uuid = absl::StrCat("run", run);
    c.trial_run_id = run;
    c.time_ms = run * 1000;
    ASSERT_TRUE(store_->InsertCheckpoint(c).ok());
  }
  ASSERT_TRUE(store_->SetCheckpointSearcherMetric(trial, 2, 100, 0.5).ok());
  EXPECT_DOUBLE_EQ(store_->GetCheckpoint("run2").value().searcher_metric.value_or(-1), 0.5);
  EXPECT_FALSE(store_->GetCheckpoint("run1").value().searcher_metric.has_value());
}

TEST_F(StoreTest, CheckpointRoundTripDuplicateAndList) {
  int64_t exp = AddExperiment();
  int64_t t1 = AddTrial(exp);
  int64_t t2 = AddTrial(exp);
  int64_t exp2 = AddExperiment();
  int64_t t3 = AddTrial(exp2);

  CheckpointRow c;
  c.uuid = "11111111-2222-3333-4444-555555555555";
  c.trial_id = t1;
  c.experiment_id = exp;
  c.trial_run_id = 2;
  c.state = "COMPLETED";
  c.total_batches = 937;
  c.total_epochs = 1.0;
  c.resources = {{"model.pt", 123456789012}, {"optimizer.pt", 42}};
  c.metadata_json = R"({"framework":"torch"})";
  c.storage_path = "/checkpoints/1111";
  c.time_ms = 3000;
  c.searcher_metric = 0.123;
  ASSERT_TRUE(store_->InsertCheckpoint(c).ok());
  auto got = store_->GetCheckpoint(c.uuid);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->uuid, c.uuid);
  EXPECT_EQ(got->trial_id, t1);
  EXPECT_EQ(got->experiment_id, exp);
  EXPECT_EQ(got->trial_run_id, 2);
  EXPECT_EQ(got->state, "COMPLETED");
  EXPECT_EQ(got->total_batches, 937);
  EXPECT_DOUBLE_EQ(got->total_epochs, 1.0);
  EXPECT_EQ(got->resources, c.resources);
  EXPECT_EQ(got->metadata_json, c.metadata_json);
  EXPECT_EQ(got->storage_path, c.storage_path);
  EXPECT_EQ(got->time_ms, 3000);
  EXPECT_DOUBLE_EQ(got->searcher_metric.value_or(0), 0.123);

  auto dup = store_->InsertCheckpoint(c);
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists) << dup;
  EXPECT_NE(dup.message().find(c.uuid), std::string::npos);

  CheckpointRow c2 = c;
  c2.uuid = "c2";
  c2.time_ms = 1000;
  c2.searcher_metric.reset();
  c2.resources.clear();
  ASSERT_TRUE(store_->InsertCheckpoint(c2).ok());
  CheckpointRow c3 = c;
  c3.uuid = "c3";
  c3.trial_id = t2;
  c3.time_ms = 2000;
  ASSERT_TRUE(store_->InsertCheckpoint(c3).ok());
  CheckpointRow c4 = c;
  c4.uuid = "c4";
  c4.trial_id = t3;
  c4.experiment_id = exp2;
  c4.time_ms = 500;
  ASSERT_TRUE(store_->InsertCheckpoint(c4).ok());

  auto uuids = [&](std::optional<int64_t> e, std::optional<int64_t> t) {
    std::vector<std::string> out;
    auto rows = store_->ListCheckpoints(e, t);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (rows.ok()) {
      for (const auto& r : *rows) out.push_back(r.uuid);
    }
    return out;
  };
  EXPECT_EQ(uuids(std::nullopt, std::nullopt), (std::vector<std::string>{"c4", "c2", "c3", c.uuid}));
  EXPECT_EQ(uuids(exp, std::nullopt), (std::vector<std::string>{"c2", "c3", c.uuid}));
  EXPECT_EQ(uuids(std::nullopt, t1), (std::vector<std::string>{"c2", c.uuid}));
  EXPECT_EQ(uuids(exp, t2), (std::vector<std::string>{"c3"}));
  EXPECT_TRUE(uuids(exp2, t1).empty());
  auto c2_got = store_->GetCheckpoint("c2");
  ASSERT_TRUE(c2_got.ok());
  EXPECT_FALSE(c2_got->searcher_metric.has_value());
  EXPECT_TRUE(c2_got->resources.empty());

  ASSERT_TRUE(store_->UpdateCheckpointState("c2", "DELETED").ok());
  EXPECT_EQ(store_->GetCheckpoint("c2").value().state, "DELETED");

  CheckpointRow orphan = c;
  orphan.uuid = "orphan";
  orphan.trial_id = 9999;
  EXPECT_EQ(store_->InsertCheckpoint(orphan).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(StoreTest, TaskLogsRoundTripAndPaging) {
  int64_t trial = AddTrial(AddExperiment());
  int64_t other = AddTrial(AddExperiment());
  std::vector<TaskLogRow> logs;
  for (int i = 0; i < 10; ++i) {
    TaskLogRow l;
    l.trial_id = i == 5 ? other : trial;
    l.allocation_id = "alloc-1";
    l.rank = i % 2;
    l.time_ms = 1000 + i;
    l.level = "INFO";
    l.stream = i % 3 == 0 ? "stderr" : "stdout";
    l.message = "line " + std::to_string(i) + "\nwith newline";
    logs.push_back(l);
  }
  ASSERT_TRUE(store_->InsertTaskLogs(logs).ok());
  auto all = store_->ListTaskLogs(trial, 0, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 9u);
  EXPECT_EQ((*all)[0].message, "line 0\nwith newline");
  EXPECT_EQ((*all)[0].stream, "stderr");
  EXPECT_EQ((*all)[0].allocation_id, "alloc-1");
  EXPECT_EQ((*all)[0].level, "INFO");
  EXPECT_EQ((*all)[1].rank, 1);
  EXPECT_EQ((*all)[1].time_ms, 1001);
  for (size_t i = 1; i < all->size(); ++i) EXPECT_LT((*all)[i - 1].id, (*all)[i].id);

  // Poll in pages of 4.
  std::vector<std::string> seen;
  int64_t after = 0;
  for (;;) {
    auto page = store_->ListTaskLogs(trial, after, 4);
    ASSERT_TRUE(page.ok());
    if (page->empty()) break;
    EXPECT_LE(page->size(), 4u);
    for (const auto& l : *page) seen.push_back(l.message);
    after = page->back().id;
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_EQ(store_->ListTaskLogs(other, 0, 0).value().size(), 1u);

  TaskLogRow bad = logs[0];
  bad.trial_id = 9999;
  EXPECT_EQ(store_->InsertTaskLogs({logs[0], bad}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->ListTaskLogs(trial, 0, 0).value().size(), 9u);  // rolled back
}

// A line longer than the limit is cut (at a character boundary) with a
// marker; a trial over its volume loses its oldest lines, and one marker line
// (its oldest) counts them; other trials keep theirs.
TEST_F(StoreTest, TaskLogsAreBoundedPerLineAndPerTrial) {
  TaskLogLimits limits;
  limits.max_line_bytes = 100;
  limits.max_trial_bytes = 10000;
  store_->set_task_log_limits(limits);
  int64_t trial = AddTrial(AddExperiment());
  int64_t quiet = AddTrial(AddExperiment());
  auto line = [](int64_t t, std::string message) {
    TaskLogRow l;
    l.trial_id = t;
    l.allocation_id = "a";
    l.level = "LOG_LEVEL_INFO";
    l.stream = "stdout";
    l.message = std::move(message);
    return l;
  };
  // 99 ASCII bytes, then a 2-byte character across the limit.
  ASSERT_TRUE(store_->InsertTaskLogs({line(trial, std::string(99, 'x') + "\xc3\xa9" + std::string(500, 'y')),
                                      line(quiet, "quiet")})
                  .ok());
  auto first = store_->ListTaskLogs(trial, 0, 0).value();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].message, std::string(99, 'x') + " ... [line truncated: 601 bytes]");

  // A flood: 300 batches of 10 lines of 36 bytes (+64 counted each).
  for (int b = 0; b < 300; ++b) {
    std::vector<TaskLogRow> batch;
    for (int i = 0; i < 10; ++i) batch.push_back(line(trial, absl::StrCat("flood line ", 10000 + b * 10 + i, " ", std::string(20, 'z'))));
    ASSERT_TRUE(store_->InsertTaskLogs(batch).ok());
  }
  auto all = store_->ListTaskLogs(trial, 0, 0).value();
  int64_t bytes = 0;
  for (const auto& l : all) bytes += static_cast<int64_t>(l.message.size()) + TaskLogLimits::kLineOverhead;
  EXPECT_LE(bytes, limits.max_trial_bytes);
  ASSERT_GT(all.size(), 10u);
  EXPECT_EQ(all[0].stream, "dropped");
  const int64_t kept = static_cast<int64_t>(all.size()) - 1;
  EXPECT_EQ(all[0].message, absl::StrCat("... ", 3001 - kept, " earlier lines dropped (log limit of 10000 bytes per trial)"));
  // The newest lines are the ones kept, in order, after the marker.
  EXPECT_EQ(all.back().message, absl::StrCat("flood line ", 10000 + 2999, " ", std::string(20, 'z')));
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1].id, all[i].id);
  EXPECT_EQ(store_->ListTaskLogs(quiet, 0, 0).value().size(), 1u);
  // A reopened store (counts lost) still holds the trial to its limit.
  store_.reset();
  store_ = std::move(Store::Open(path_).value());
  store_->set_task_log_limits(limits);
  for (int b = 0; b < 50; ++b) ASSERT_TRUE(store_->InsertTaskLogs({line(trial, std::string(90, 'w'))}).ok());
  all = store_->ListTaskLogs(trial, 0, 0).value();
  bytes = 0;
  for (const auto& l : all) bytes += static_cast<int64_t>(l.message.size()) + TaskLogLimits::kLineOverhead;
  EXPECT_LE(bytes, limits.max_trial_bytes);
  EXPECT_EQ(all[0].stream, "dropped");
  EXPECT_EQ(RawQueryInt(absl::StrCat("SELECT COUNT(*) FROM task_logs WHERE stream = 'dropped' AND trial_id = ", trial)), 1);
}

TEST_F(StoreTest, AgentsUpsert) {
  AgentRow a;
  a.id = "agent-b";
  a.hostname = "host-b";
  a.resource_pool = "default";
  a.devices_json = R"([{"type":"cpu"}])";
  a.version = "0.1.0";
  a.registered_ms = 100;
  a.last_seen_ms = 200;
  ASSERT_TRUE(store_->UpsertAgent(a).ok());
  AgentRow b = a;
  b.id = "agent-a";
  b.enabled = false;
  ASSERT_TRUE(store_->UpsertAgent(b).ok());
  a.last_seen_ms = 300;
  a.hostname = "host-b2";
  ASSERT_TRUE(store_->UpsertAgent(a).ok());

  auto agents = store_->ListAgents();
  ASSERT_TRUE(agents.ok()) << agents.status();
  ASSERT_EQ(agents->size(), 2u);
  EXPECT_EQ((*agents)[0].id, "agent-a");
  EXPECT_FALSE((*agents)[0].enabled);
  EXPECT_EQ((*agents)[1].id, "agent-b");
  EXPECT_TRUE((*agents)[1].enabled);
  EXPECT_EQ((*agents)[1].hostname, "host-b2");
  EXPECT_EQ((*agents)[1].resource_pool, "default");
  EXPECT_EQ((*agents)[1].devices_json, a.devices_json);
  EXPECT_EQ((*agents)[1].version, "0.1.0");
  EXPECT_EQ((*agents)[1].registered_ms, 100);
  EXPECT_EQ((*agents)[1].last_seen_ms, 300);
}

TEST_F(StoreTest, KeyValue) {
  auto missing = store_->GetValue("cluster_id");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  ASSERT_TRUE(store_->PutValue("cluster_id", "abc").ok());
  EXPECT_EQ(store_->GetValue("cluster_id").value().value_or(""), "abc");
  ASSERT_TRUE(store_->PutValue("cluster_id", "def").ok());
  EXPECT_EQ(store_->GetValue("cluster_id").value().value_or(""), "def");
  ASSERT_TRUE(store_->PutValue("empty", "").ok());
  auto empty = store_->GetValue("empty");
  ASSERT_TRUE(empty.ok());
  ASSERT_TRUE(empty->has_value());
  EXPECT_EQ(**empty, "");
  std::string binary("a\0b", 3);
  ASSERT_TRUE(store_->PutValue("binary", binary).ok());
  EXPECT_EQ(store_->GetValue("binary").value().value_or(""), binary);
}

// A metric stream's poll seeks each trial's rows after its cursor: its plan
// never reads a trial's whole history (before migration 11 it did, then
// sorted it, on every poll of every open stream).
TEST_F(StoreTest, MetricStreamPollSeeksEachTrialsRowsAfterTheCursor) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  for (bool by_group : {false, true}) {
    const std::string sql = "EXPLAIN QUERY PLAN " + Store::MetricsAfterIdSql(1000, by_group);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    std::string plan;
    while (sqlite3_step(st) == SQLITE_ROW) {
      plan += std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 3))) + "\n";
    }
    sqlite3_finalize(st);
    EXPECT_NE(plan.find("USING INDEX metrics_trial_id_id (trial_id=? AND id>?)"), std::string::npos) << plan;
  }
  sqlite3_close(db);
  // And it returns the rows after the cursor, of those trials only, in id order.
  const int64_t exp = AddExperiment("stream");
  const int64_t a = AddTrial(exp), b = AddTrial(exp), c = AddTrial(exp);
  std::vector<MetricRow> rows;
  for (int i = 1; i <= 30; ++i) {
    MetricRow m;
    m.trial_id = i % 3 == 0 ? a : i % 3 == 1 ? b : c;
    m.group = "training";
    m.total_batches = i;
    m.metrics = {{"loss", 1.0 / i}};
    rows.push_back(m);
  }
  ASSERT_TRUE(store_->InsertMetrics(rows).ok());
  auto all = store_->ListMetricsAfterId({a, b}, "", 0, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 20u);
  auto after = store_->ListMetricsAfterId({a, b}, "training", (*all)[9].id, 4);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), 4u);
  for (size_t i = 0; i < after->size(); ++i) EXPECT_EQ((*after)[i].id, (*all)[10 + i].id);
}

// Metric ids are never reused (migration 12: AUTOINCREMENT). A stream over
// several trials resumes after the last id it sent; when the trial that held
// the newest ids is deleted, the next report of another trial must still get
// an id after that cursor, or the stream skips it for good.
TEST_F(StoreTest, MetricIdsAreNeverReusedAfterTheNewestAreDeleted) {
  const int64_t keep = AddExperiment("keep"), gone = AddExperiment("gone", "COMPLETED");
  const int64_t a = AddTrial(keep), b = AddTrial(gone, "COMPLETED");
  ASSERT_TRUE(store_->InsertMetrics({Metric(a, 1), Metric(b, 1), Metric(b, 2), Metric(b, 3)}).ok());
  auto cursor = store_->MaxMetricId();  // what a stream over {a, b} sent last: b's newest
  ASSERT_TRUE(cursor.ok()) << cursor.status();
  for (;;) {
    auto n = store_->DeleteExperimentDataBatch(gone, 1000);
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
  }
  ASSERT_TRUE(store_->DeleteExperimentRow(gone).ok());
  ASSERT_TRUE(store_->InsertMetrics({Metric(a, 2)}).ok());
  auto after = store_->ListMetricsAfterId({a, b}, "", *cursor, 0);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), 1u) << "trial a's new report got an id at or before the stream's cursor";
  EXPECT_EQ((*after)[0].total_batches, 2);
}

// Migration 12 rebuilds a version-11 metrics table: ids, rows and indexes
// kept, and ids above the largest kept one are not handed out again.
TEST_F(StoreTest, Migration12KeepsMetricRowsAndIndexes) {
  const int64_t exp = AddExperiment("old");
  const int64_t t = AddTrial(exp);
  store_.reset();
  // The version-11 table, as an older master left it, with rows 5 and 7.
  RawExec("DROP TABLE metric_rollups;"  // migration 16's
          "DROP TABLE metrics;"
          "CREATE TABLE metrics (id INTEGER PRIMARY KEY, trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE "
          "CASCADE, trial_run_id INTEGER NOT NULL, metric_group TEXT NOT NULL, total_batches INTEGER NOT NULL, "
          "total_epochs REAL, metrics TEXT NOT NULL, time_ms INTEGER NOT NULL, archived INTEGER NOT NULL);"
          "CREATE UNIQUE INDEX metrics_trial_id_total_batches_run ON metrics(trial_id, total_batches, "
          "metric_group, trial_run_id);"
          "CREATE INDEX metrics_trial_group_batches ON metrics(trial_id, metric_group, total_batches);"
          "CREATE INDEX metrics_trial_id_id ON metrics(trial_id, id);"
          "DROP TRIGGER users_agent_uid_given; DROP TABLE agent_uids_given;"                  // migration 14's
          "ALTER TABLE users DROP COLUMN agent_uid; ALTER TABLE users DROP COLUMN agent_gid;"  // migration 13's
          "DELETE FROM schema_migrations WHERE version >= 12;" +
          absl::StrCat("INSERT INTO metrics VALUES (5, ", t, ", 0, 'training', 10, 0.5, '{\"loss\":1}', 1, 0);",
                       "INSERT INTO metrics VALUES (7, ", t, ", 0, 'validation', 20, 1, '{\"loss\":2}', 2, 1);"));
  auto reopened = Store::Open(path_);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  store_ = std::move(*reopened);
  EXPECT_EQ(store_->SchemaVersion().value_or(-1), Store::LatestSchemaVersion());
  auto rows = store_->ListMetrics(t, "", /*include_archived=*/true);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].id, 5);
  EXPECT_EQ((*rows)[1].id, 7);
  EXPECT_EQ((*rows)[1].group, "validation");
  EXPECT_TRUE((*rows)[1].archived);
  // Migration 15 then rebuilt it again (store_metric_storage_test.cc).
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'metrics' AND name IN "
                        "('metrics_trial_id_total_batches_run', 'metrics_trial_other_groups', 'metrics_trial_id_id')"),
            3);
  RawExec("DELETE FROM metrics WHERE id = 7");
  ASSERT_TRUE(store_->InsertMetrics({Metric(t, 30)}).ok());
  EXPECT_EQ(RawQueryInt("SELECT MAX(id) FROM metrics"), 8);  // not 7 again
  RawExec("DELETE FROM metrics WHERE id = 8");
  store_.reset();
  auto again = Store::Open(path_);
  ASSERT_TRUE(again.ok()) << again.status();
  store_ = std::move(*again);
  ASSERT_TRUE(store_->InsertMetrics({Metric(t, 40)}).ok());
  EXPECT_EQ(RawQueryInt("SELECT MAX(id) FROM metrics"), 9);  // not 8 again, after a restart
}

// Group commit: callers waiting while a group is written share the next
// transaction, and a caller whose rows fail (no such trial) fails alone: the
// others' rows in that transaction are stored, none of its own.
TEST_F(StoreTest, GroupedMetricInsertsShareATransactionAndFailAlone) {
  const int64_t exp = AddExperiment();
  const int64_t a = AddTrial(exp), c = AddTrial(exp);
  auto rows_of = [](int64_t trial) {
    std::vector<MetricRow> rows;
    for (int i = 1; i <= 5; ++i) {
      MetricRow m;
      m.trial_id = trial;
      m.group = "training";
      m.total_batches = i;
      m.metrics = {{"loss", 1.0 / i}};
      rows.push_back(m);
    }
    return rows;
  };
  const std::vector<MetricRow> rows_a = rows_of(a), rows_c = rows_of(c);
  // b: rows of trial a at later batches, then one of a trial that does not
  // exist: none of them may stay.
  std::vector<MetricRow> rows_b = rows_of(a);
  for (MetricRow& m : rows_b) m.total_batches += 10;
  rows_b.back().trial_id = 9999;
  absl::Status status_a, status_b, status_c;
  auto wait_for = [&](size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (store_->MetricCallersWaiting() != n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    return store_->MetricCallersWaiting() == n;
  };
  std::vector<std::thread> threads;
  {
    // Holding the store: a's group (a alone) waits for it, b and c queue.
    Store::Transaction hold(store_.get());
    threads.emplace_back([&] { status_a = store_->InsertMetricsGrouped(rows_a); });
    ASSERT_TRUE(wait_for(1));
    // ... and the writer has taken a's group and blocks on the Store's lock:
    // until then b would join a's group instead of queueing behind it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (store_->LockWaitersForTest() != 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_EQ(store_->LockWaitersForTest(), 1);
    threads.emplace_back([&] { status_b = store_->InsertMetricsGrouped(rows_b); });
    ASSERT_TRUE(wait_for(2));
    threads.emplace_back([&] { status_c = store_->InsertMetricsGrouped(rows_c); });
    ASSERT_TRUE(wait_for(3));
    ASSERT_TRUE(hold.Commit().ok());
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(status_a.ok()) << status_a;
  EXPECT_EQ(status_b.code(), absl::StatusCode::kFailedPrecondition) << status_b;
  EXPECT_NE(status_b.message().find("trial 9999"), std::string::npos) << status_b;
  EXPECT_TRUE(status_c.ok()) << status_c;
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics WHERE trial_id = " + std::to_string(a)), 5);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics WHERE trial_id = " + std::to_string(c)), 5);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics"), 10);
  // Retried reports (the same rows again) are skipped, not doubled.
  EXPECT_TRUE(store_->InsertMetricsGrouped(rows_c).ok());
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics"), 10);
}

TEST_F(StoreTest, ConcurrentInsertMetricsLosesNothing) {
  int64_t exp = AddExperiment();
  std::vector<int64_t> trials;
  for (int i = 0; i < 4; ++i) trials.push_back(AddTrial(exp));
  constexpr int kBatches = 50;
  constexpr int kRowsPerBatch = 20;
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int b = 0; b < kBatches; ++b) {
        std::vector<MetricRow> rows;
        for (int r = 0; r < kRowsPerBatch; ++r) {
          MetricRow m;
          m.trial_id = trials[t];
          m.group = "training";
          m.total_batches = b * kRowsPerBatch + r;
          m.metrics = {{"loss", b + r * 0.01}};
          rows.push_back(std::move(m));
        }
        absl::Status s = store_->InsertMetrics(rows);
        if (!s.ok()) {
          results[t] = s;
          return;
        }
        // Interleave reads with the writes.
        if (b % 10 == 0 && !store_->ListMetrics(trials[t], "", true, -1, 5).ok()) {
          results[t] = absl::InternalError("read failed");
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
  for (int t = 0; t < 4; ++t) {
    auto rows = store_->ListMetrics(trials[t], "", true);
    ASSERT_TRUE(rows.ok());
    ASSERT_EQ(rows->size(), static_cast<size_t>(kBatches * kRowsPerBatch));
    for (size_t i = 0; i < rows->size(); ++i) EXPECT_EQ((*rows)[i].total_batches, static_cast<int64_t>(i));
  }
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics"), 4 * kBatches * kRowsPerBatch);
}

TEST_F(StoreTest, RetriedMetricsReportIsStoredOnce) {
  int64_t trial = AddTrial(AddExperiment());
  MetricRow m;
  m.trial_id = trial;
  m.trial_run_id = 1;
  m.group = "training";
  m.total_batches = 10;
  m.metrics = {{"loss", 0.5}};
  ASSERT_TRUE(store_->InsertMetrics({m}).ok());
  ASSERT_TRUE(store_->InsertMetrics({m}).ok());  // the same report, retried
  MetricRow validation = m;
  validation.group = "validation";
  MetricRow next_run = m;
  next_run.trial_run_id = 2;  // a restart reports batch 10 again: kept
  ASSERT_TRUE(store_->InsertMetrics({validation, next_run}).ok());
  auto rows = store_->ListMetrics(trial, "", true);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 3u);
}

TEST_F(StoreTest, TransactionCommitsAllOrNothingAtCrash) {
  int64_t exp = AddExperiment();
  int64_t trial = AddTrial(exp);
  {
    Store::Transaction txn(store_.get());
    TrialRow t = store_->GetTrial(trial).value();
    t.state = "COMPLETED";
    ASSERT_TRUE(store_->UpdateTrial(t).ok());
    MetricRow good;
    good.trial_id = trial;
    good.group = "training";
    ASSERT_TRUE(store_->InsertMetrics({good}).ok());
    {
      Store::Transaction nested(store_.get());
      ASSERT_TRUE(store_->PutValue("k", "v").ok());
      // A nested commit stores nothing yet.
      ASSERT_TRUE(nested.Commit().ok());
    }
    // Nothing is visible to another connection before the commit.
    EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics"), 0);
    EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM kv WHERE key = 'k'"), 0);
    EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM trials WHERE state = 'COMPLETED'"), 0);
    ASSERT_TRUE(txn.Commit().ok());
  }
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics"), 1);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM kv WHERE key = 'k'"), 1);
  EXPECT_EQ(store_->GetTrial(trial).value().state, "COMPLETED");
  // Another thread's call waits for the transaction instead of joining it:
  // once that thread is seen blocked on a lock inside the Store, this
  // transaction rolls back. Had the call joined it, it would have returned
  // before the rollback (`ended` still false) and its row would be gone.
  const std::string other_key = "other", one = "1";
  std::atomic<pid_t> other_tid{0};
  std::atomic<bool> ended{false};
  bool other_ok = false, ended_first = false;
  std::thread other;
  {
    Store::Transaction txn(store_.get());
    ASSERT_TRUE(store_->PutValue("mine", "1").ok());
    other = std::thread([&] {
      other_tid = static_cast<pid_t>(syscall(SYS_gettid));
      other_ok = store_->PutValue(other_key, one).ok();  // first blocking point: the Store's lock
      ended_first = ended.load();
    });
    const bool blocked = WaitUntilBlockedOnFutexIn(other_tid, store_.get(), sizeof(Store));
    EXPECT_TRUE(blocked) << "the other thread's PutValue never waited on the Store's lock";
    ended = true;
    // Rolled back (no Commit) at the end of this scope.
  }
  other.join();
  EXPECT_TRUE(other_ok);
  EXPECT_TRUE(ended_first) << "the other thread's PutValue returned inside this thread's transaction";
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM kv WHERE key = 'mine'"), 0);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM kv WHERE key = 'other'"), 1);
}

// Rows of every kind that a transaction writes, for the rollback tests: what
// RowCounts() reads back.
struct RowCounts {
  int64_t experiments = 0;
  int64_t trials = 0;
  int64_t metrics = 0;
  int64_t checkpoints = 0;
  int64_t task_logs = 0;
  int64_t kv = 0;
  bool operator==(const RowCounts& o) const {
    return experiments == o.experiments && trials == o.trials && metrics == o.metrics &&
           checkpoints == o.checkpoints && task_logs == o.task_logs && kv == o.kv;
  }
};

std::ostream& operator<<(std::ostream& os, const RowCounts& c) {
  return os << "{experiments " << c.experiments << ", trials " << c.trials << ", metrics " << c.metrics
            << ", checkpoints " << c.checkpoints << ", task_logs " << c.task_logs << ", kv " << c.kv << "}";
}

class StoreTransactionTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    // Committed before any test transaction: must survive every rollback.
    exp_ = AddExperiment("committed");
    trial_ = AddTrial(exp_);
    ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("ck-committed", trial_, exp_)).ok());
    ASSERT_TRUE(store_->InsertMetrics({Metric(trial_, 1)}).ok());
    committed_ = Counts();
  }

  // Counted on a second connection: what a restarted master would see.
  RowCounts Counts() {
    RowCounts c;
    c.experiments = RawQueryInt("SELECT COUNT(*) FROM experiments");
    c.trials = RawQueryInt("SELECT COUNT(*) FROM trials");
    c.metrics = RawQueryInt("SELECT COUNT(*) FROM metrics");
    c.checkpoints = RawQueryInt("SELECT COUNT(*) FROM checkpoints");
    c.task_logs = RawQueryInt("SELECT COUNT(*) FROM task_logs");
    c.kv = RawQueryInt("SELECT COUNT(*) FROM kv");
    return c;
  }

  static CheckpointRow Checkpoint(const std::string& uuid, int64_t trial, int64_t exp) {
    CheckpointRow c;
    c.uuid = uuid;
    c.trial_id = trial;
    c.experiment_id = exp;
    c.state = "COMPLETED";
    return c;
  }
  static TaskLogRow Log(int64_t trial) {
    TaskLogRow l;
    l.trial_id = trial;
    l.stream = "stdout";
    l.message = "hello";
    return l;
  }

  // Inside an open transaction: a new experiment, a trial of it, metrics,
  // a checkpoint, a log line and a value, all of which must succeed. Returns
  // the new trial's id.
  int64_t WriteOneOfEach(const std::string& tag) {
    ExperimentRow e;
    e.name = "in-txn-" + tag;
    e.state = "ACTIVE";
    auto exp = store_->InsertExperiment(e);
    EXPECT_TRUE(exp.ok()) << exp.status();
    TrialRow t;
    t.experiment_id = exp.value_or(0);
    t.state = "ACTIVE";
    auto trial = store_->InsertTrial(t);
    EXPECT_TRUE(trial.ok()) << trial.status();
    EXPECT_TRUE(store_->InsertMetrics({Metric(*trial, 1), Metric(*trial, 2)}).ok());
    EXPECT_TRUE(store_->InsertCheckpoint(Checkpoint("ck-" + tag, *trial, *exp)).ok());
    EXPECT_TRUE(store_->InsertTaskLogs({Log(*trial)}).ok());
    EXPECT_TRUE(store_->PutValue("k-" + tag, "v").ok());
    return trial.value_or(0);
  }

  // The rows of SetUp are intact and the store still writes (outside any
  // transaction, committed at once).
  void ExpectCommittedIntactAndStoreUsable() {
    auto exp = store_->GetExperiment(exp_);
    ASSERT_TRUE(exp.ok()) << exp.status();
    EXPECT_EQ(exp->name, "committed");
    auto ck = store_->GetCheckpoint("ck-committed");
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_EQ(ck->trial_id, trial_);
    ASSERT_TRUE(store_->PutValue("after", "1").ok());
    EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM kv WHERE key = 'after'"), 1);
  }

  int64_t exp_ = 0;
  int64_t trial_ = 0;
  RowCounts committed_;
};

TEST_F(StoreTransactionTest, DuplicateCheckpointInTheMiddleLeavesNoRowOfTheTransaction) {
  absl::Status commit;
  {
    Store::Transaction txn(store_.get());
    int64_t trial = WriteOneOfEach("a");
    // The middle statement fails: a checkpoint uuid that exists.
    EXPECT_EQ(store_->InsertCheckpoint(Checkpoint("ck-committed", trial, exp_)).code(),
              absl::StatusCode::kAlreadyExists);
    // Later writes are refused and do not reach the database.
    EXPECT_EQ(store_->InsertMetrics({Metric(trial, 3)}).code(), absl::StatusCode::kAborted);
    EXPECT_EQ(store_->PutValue("late", "v").code(), absl::StatusCode::kAborted);
    // Reads still work and see the transaction's own writes.
    auto ck = store_->GetCheckpoint("ck-a");
    EXPECT_TRUE(ck.ok()) << ck.status();
    commit = txn.Commit();
    // Commit() again returns the same result.
    EXPECT_EQ(txn.Commit(), commit);
  }
  // Commit() returns the failed statement's error.
  EXPECT_EQ(commit.code(), absl::StatusCode::kAlreadyExists) << commit;
  EXPECT_NE(commit.message().find("ck-committed"), std::string::npos) << commit;
  EXPECT_EQ(Counts(), committed_);
  EXPECT_EQ(store_->GetCheckpoint("ck-a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetValue("k-a").value(), std::nullopt);
  ExpectCommittedIntactAndStoreUsable();
}

TEST_F(StoreTransactionTest, UnknownForeignKeyInTheMiddleLeavesNoRowOfTheTransaction) {
  absl::Status commit;
  {
    Store::Transaction txn(store_.get());
    WriteOneOfEach("a");
    // A trial of an experiment that does not exist.
    TrialRow orphan;
    orphan.experiment_id = 9999;
    orphan.state = "ACTIVE";
    EXPECT_EQ(store_->InsertTrial(orphan).status().code(), absl::StatusCode::kFailedPrecondition);
    commit = txn.Commit();
  }
  EXPECT_EQ(commit.code(), absl::StatusCode::kFailedPrecondition) << commit;
  EXPECT_EQ(Counts(), committed_);
  ExpectCommittedIntactAndStoreUsable();
}

TEST_F(StoreTransactionTest, FailedBatchInsertInTheMiddleLeavesNoRowOfTheTransaction) {
  absl::Status commit;
  {
    Store::Transaction txn(store_.get());
    int64_t trial = WriteOneOfEach("a");
    // A metrics batch whose last row names no trial: InsertMetrics' own
    // savepoint undoes its first row, and the transaction fails.
    EXPECT_EQ(store_->InsertMetrics({Metric(trial, 10), Metric(9999, 10)}).code(),
              absl::StatusCode::kFailedPrecondition);
    commit = txn.Commit();
  }
  EXPECT_EQ(commit.code(), absl::StatusCode::kFailedPrecondition) << commit;
  EXPECT_EQ(Counts(), committed_);
  ExpectCommittedIntactAndStoreUsable();
}

TEST_F(StoreTransactionTest, UpdateOfAMissingRowFailsTheTransaction) {
  absl::Status commit;
  {
    Store::Transaction txn(store_.get());
    WriteOneOfEach("a");
    TrialRow missing;
    missing.id = 9999;
    EXPECT_EQ(store_->UpdateTrial(missing).code(), absl::StatusCode::kNotFound);
    commit = txn.Commit();
  }
  EXPECT_EQ(commit.code(), absl::StatusCode::kNotFound) << commit;
  EXPECT_EQ(Counts(), committed_);
}

TEST_F(StoreTransactionTest, FailedReadDoesNotFailTheTransaction) {
  {
    Store::Transaction txn(store_.get());
    WriteOneOfEach("a");
    EXPECT_EQ(store_->GetExperiment(9999).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(store_->GetCheckpoint("missing").status().code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE(txn.Commit().ok());
  }
  RowCounts expected = committed_;
  expected.experiments += 1;
  expected.trials += 1;
  expected.metrics += 2;
  expected.checkpoints += 1;
  expected.task_logs += 1;
  expected.kv += 1;
  EXPECT_EQ(Counts(), expected);
}

TEST_F(StoreTransactionTest, DestroyedWithoutCommitLeavesNothing) {
  {
    Store::Transaction txn(store_.get());
    WriteOneOfEach("a");
    WriteOneOfEach("b");
    // Every write succeeded, but Commit() is never called.
  }
  EXPECT_EQ(Counts(), committed_);
  EXPECT_EQ(store_->GetCheckpoint("ck-a").status().code(), absl::StatusCode::kNotFound);
  // The connection is not left inside the transaction: a later write is
  // visible to another connection at once, and a later transaction commits.
  ExpectCommittedIntactAndStoreUsable();
  {
    Store::Transaction txn(store_.get());
    ASSERT_TRUE(store_->PutValue("later", "1").ok());
    ASSERT_TRUE(txn.Commit().ok());
  }
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM kv WHERE key = 'later'"), 1);
}

TEST_F(StoreTransactionTest, EarlyReturnWithoutCommitLeavesNothing) {
  // The pattern the destructor exists for: a caller that returns an error
  // between writes.
  auto write_two_users = [&]() -> absl::Status {
    Store::Transaction txn(store_.get());
    UserRow u;
    u.username = "first";
    absl::Status st = store_->InsertUser(u).status();
    if (!st.ok()) return st;
    return absl::InvalidArgumentError("the caller gives up");
  };
  EXPECT_EQ(write_two_users().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetUserByName("first").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM users"), 0);
}

TEST_F(StoreTransactionTest, UncommittedNestedTransactionRollsBackTheOutermost) {
  absl::Status commit;
  {
    Store::Transaction outer(store_.get());
    WriteOneOfEach("outer");
    {
      Store::Transaction inner(store_.get());
      WriteOneOfEach("inner");
      // Ends without Commit(), although every write succeeded.
    }
    // The outermost has failed: further writes are refused...
    EXPECT_EQ(store_->PutValue("after-inner", "v").code(), absl::StatusCode::kAborted);
    // ...and its Commit() rolls everything back.
    commit = outer.Commit();
  }
  EXPECT_EQ(commit.code(), absl::StatusCode::kAborted) << commit;
  EXPECT_NE(commit.message().find("nested"), std::string::npos) << commit;
  EXPECT_EQ(Counts(), committed_);
  ExpectCommittedIntactAndStoreUsable();
}

TEST_F(StoreTransactionTest, NestedCommitReportsTheFailureAndStoresNothing) {
  absl::Status inner_commit;
  {
    Store::Transaction outer(store_.get());
    WriteOneOfEach("outer");
    {
      Store::Transaction inner(store_.get());
      EXPECT_EQ(store_->InsertCheckpoint(Checkpoint("ck-committed", trial_, exp_)).code(),
                absl::StatusCode::kAlreadyExists);
      inner_commit = inner.Commit();
    }
    EXPECT_EQ(inner_commit.code(), absl::StatusCode::kAlreadyExists) << inner_commit;
    EXPECT_EQ(outer.Commit().code(), absl::StatusCode::kAlreadyExists);
  }
  EXPECT_EQ(Counts(), committed_);
  // A committed nested transaction inside an outermost one that is not
  // committed stores nothing either.
  {
    Store::Transaction outer(store_.get());
    {
      Store::Transaction inner(store_.get());
      WriteOneOfEach("inner");
      ASSERT_TRUE(inner.Commit().ok());
    }
  }
  EXPECT_EQ(Counts(), committed_);
  ExpectCommittedIntactAndStoreUsable();
}

TEST_F(StoreTest, AllocationsUpsertListDelete) {
  int64_t exp = AddExperiment();
  int64_t trial = AddTrial(exp);
  AllocationRow a;
  a.id = "trial-1.1.abcd";
  a.trial_id = trial;
  a.experiment_id = exp;
  a.token = "secret";
  a.placements_json = R"([{"agent_id":"a","slots":[0]}])";
  a.processes = 1;
  a.created_ms = 5;
  ASSERT_TRUE(store_->UpsertAllocation(a).ok());
  a.terminated = 1;
  ASSERT_TRUE(store_->UpsertAllocation(a).ok());
  AllocationRow b = a;
  b.id = "trial-1.2.ef01";
  b.created_ms = 6;
  ASSERT_TRUE(store_->UpsertAllocation(b).ok());
  auto all = store_->ListAllocations();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, a.id);
  EXPECT_EQ((*all)[0].token, "secret");
  EXPECT_EQ((*all)[0].placements_json, a.placements_json);
  EXPECT_EQ((*all)[0].terminated, 1);
  EXPECT_EQ((*all)[1].id, b.id);
  ASSERT_TRUE(store_->DeleteAllocation(a.id).ok());
  ASSERT_TRUE(store_->DeleteAllocation("missing").ok());
  EXPECT_EQ(store_->ListAllocations().value().size(), 1u);
  AllocationRow orphan = a;
  orphan.trial_id = 9999;
  EXPECT_EQ(store_->UpsertAllocation(orphan).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(StoreTest, IntegrityCheckOk) {
  int64_t trial = AddTrial(AddExperiment());
  MetricRow m;
  m.trial_id = trial;
  m.group = "validation";
  ASSERT_TRUE(store_->InsertMetrics({m, m, m}).ok());
  EXPECT_TRUE(store_->IntegrityCheck().ok());
}

// Not a pass/fail benchmark: prints InsertMetrics throughput so regressions
// on the hot path are visible in the test log.
TEST_F(StoreTest, InsertMetricsThroughput) {
  int64_t trial = AddTrial(AddExperiment());
  auto make = [&](int n, int start) {
    std::vector<MetricRow> rows;
    for (int i = 0; i < n; ++i) {
      MetricRow m;
      m.trial_id = trial;
      m.trial_run_id = 1;
      m.group = "training";
      m.total_batches = start + i;
      m.total_epochs = (start + i) / 937.0;
      m.metrics = {{"loss", 0.5 / (i + 1)}, {"accuracy", 0.9}, {"lr", 1e-3}};
      m.time_ms = 1700000000000 + i;
      rows.push_back(std::move(m));
    }
    return rows;
  };
  using Clock = std::chrono::steady_clock;
  for (int batch : {1, 100, 1000}) {
    const int total = batch == 1 ? 2000 : 20000;
    std::vector<std::vector<MetricRow>> batches;
    for (int start = 0; start < total; start += batch) batches.push_back(make(batch, start));
    auto t0 = Clock::now();
    for (const auto& rows : batches) ASSERT_TRUE(store_->InsertMetrics(rows).ok());
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("[ perf     ] InsertMetrics batch=%d: %d rows in %.3f s = %.0f rows/s (%.1f us/call)\n", batch,
                total, secs, total / secs, 1e6 * secs / batches.size());
  }
  auto t0 = Clock::now();
  auto rows = store_->ListMetrics(trial, "training", true);
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(rows.ok());
  std::printf("[ perf     ] ListMetrics: %zu rows in %.3f s\n", rows->size(), secs);
}

TEST_F(StoreTest, UsersAndTokens) {
  UserRow u;
  u.username = "alice";
  u.password_hash = "pbkdf2-sha256$1$00$00";
  u.created_ms = u.modified_ms = 1000;
  auto id = store_->InsertUser(u);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(store_->InsertUser(u).status().code(), absl::StatusCode::kAlreadyExists);
  auto got = store_->GetUserByName("alice");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->id, *id);
  EXPECT_TRUE(got->active);
  EXPECT_FALSE(got->admin);
  got->admin = true;
  got->display_name = "Alice";
  ASSERT_TRUE(store_->UpdateUser(*got).ok());
  EXPECT_TRUE(store_->GetUser(*id)->admin);
  EXPECT_EQ(store_->GetUser(999).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetUserByName("bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->ListUsers()->size(), 1u);

  ASSERT_TRUE(store_->InsertUserToken({"h1", *id, 1000, 2000}).ok());
  ASSERT_TRUE(store_->InsertUserToken({"h2", *id, 1000, 5000}).ok());
  EXPECT_EQ(store_->InsertUserToken({"h3", 999, 1000, 2000}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetUserToken("h1")->expires_ms, 2000);
  ASSERT_TRUE(store_->DeleteExpiredUserTokens(2000).ok());
  EXPECT_EQ(store_->GetUserToken("h1").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_->InsertUserToken({"h4", *id, 1000, 5000}).ok());
  ASSERT_TRUE(store_->DeleteUserTokens(*id, "h4").ok());
  EXPECT_EQ(store_->GetUserToken("h2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->GetUserToken("h4").ok());
  ASSERT_TRUE(store_->DeleteUserToken("h4").ok());
  EXPECT_EQ(store_->GetUserToken("h4").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace master
}  // namespace det
