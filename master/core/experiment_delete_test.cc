// MasterCore's archive, unarchive and delete without processes: experiments
// are ended by KillExperiment before any agent exists, their metrics, logs
// and checkpoints written straight to the store, and the deletion runs in
// RunBackgroundPass (no background thread), so every step is deterministic.
#include <sqlite3.h>

#include <filesystem>
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ExperimentDeleteTest : public MasterCoreFixture {
 protected:
  ExperimentDeleteTest() { clock_ = nullptr; }  // the system clock

  // An experiment with one trial (never scheduled: no agent); killed unless
  // `running`, which leaves it ACTIVE.
  int64_t Experiment(bool running = false) {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(det::testing::SingleTrialConfig("delete-test", dir_ / "checkpoints"));
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(true);
    auto resp = core_->CreateExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    const int64_t id = resp->experiment().id();
    if (!running) {
      apiv1::KillExperimentRequest kill;
      kill.set_experiment_id(id);
      EXPECT_TRUE(core_->KillExperiment(kill).ok());
    }
    return id;
  }
  int64_t TrialOf(int64_t experiment_id) {
    auto trials = core_->store()->ListTrials(experiment_id);
    EXPECT_TRUE(trials.ok() && trials->size() == 1u);
    return trials.ok() && !trials->empty() ? (*trials)[0].id : 0;
  }
  // A checkpoint directory with a file, its row, a metric and a log line.
  std::string AddData(int64_t experiment_id, const std::string& uuid) {
    const int64_t trial = TrialOf(experiment_id);
    const std::string path = (dir_ / "checkpoints") + "/" + uuid;
    fs::create_directories(path);
    det::testing::WriteFile(path + "/model.pt", "weights");
    CheckpointRow c;
    c.uuid = uuid;
    c.trial_id = trial;
    c.experiment_id = experiment_id;
    c.state = "COMPLETED";
    c.storage_path = path;
    c.total_batches = 10;
    EXPECT_TRUE(core_->store()->InsertCheckpoint(c).ok());
    MetricRow m;
    m.trial_id = trial;
    m.group = "validation";
    m.total_batches = 10;
    m.metrics = {{"loss", 0.5}};
    EXPECT_TRUE(core_->store()->InsertMetrics({m}).ok());
    TaskLogRow l;
    l.trial_id = trial;
    l.level = "LOG_LEVEL_INFO";
    l.stream = "stdout";
    l.message = "hello";
    EXPECT_TRUE(core_->store()->InsertTaskLogs({l}).ok());
    return path;
  }
  // Rows of `table` WHERE `where`, read through a second connection.
  int64_t Count(const std::string& table, const std::string& where) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open_v2((dir_ / "det.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    std::string sql = absl::StrCat("SELECT COUNT(*) FROM ", table, " WHERE ", where);
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
    int64_t n = -1;
    if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
  }
  absl::Status Delete(int64_t id) {
    apiv1::DeleteExperimentRequest req;
    req.set_experiment_id(id);
    return core_->DeleteExperiment(req).status();
  }
  absl::Status Archive(int64_t id, bool archive) {
    if (archive) {
      apiv1::ArchiveExperimentRequest req;
      req.set_experiment_id(id);
      return core_->ArchiveExperiment(req).status();
    }
    apiv1::UnarchiveExperimentRequest req;
    req.set_experiment_id(id);
    return core_->UnarchiveExperiment(req).status();
  }
  absl::StatusOr<apiv1::Experiment> Get(int64_t id) {
    apiv1::GetExperimentRequest req;
    req.set_experiment_id(id);
    auto resp = core_->GetExperiment(req);
    if (!resp.ok()) return resp.status();
    return resp->experiment();
  }
  std::vector<int64_t> List(std::optional<bool> archived) {
    apiv1::GetExperimentsRequest req;
    if (archived) req.set_archived(*archived);
    auto resp = core_->GetExperiments(req);
    EXPECT_TRUE(resp.ok());
    std::vector<int64_t> ids;
    for (const auto& e : resp->experiments()) ids.push_back(e.id());
    return ids;
  }

};

TEST_F(ExperimentDeleteTest, ArchiveHidesTerminalExperimentsOnly) {
  const int64_t done = Experiment();
  const int64_t running = Experiment(/*running=*/true);
  absl::Status st = Archive(running, true);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("experiment ", running, " is ACTIVE")));
  ASSERT_TRUE(Archive(done, true).ok());
  ASSERT_TRUE(Archive(done, true).ok());  // idempotent
  EXPECT_THAT(List(std::nullopt), ::testing::ElementsAre(running));
  EXPECT_THAT(List(true), ::testing::ElementsAre(done));
  EXPECT_THAT(List(false), ::testing::ElementsAre(running));
  EXPECT_TRUE(Get(done)->archived());
  Restart();  // stored
  EXPECT_THAT(List(true), ::testing::ElementsAre(done));
  ASSERT_TRUE(Archive(done, false).ok());
  EXPECT_THAT(List(std::nullopt), ::testing::ElementsAre(done, running));
  EXPECT_EQ(Archive(999, true).code(), absl::StatusCode::kNotFound);
}

TEST_F(ExperimentDeleteTest, DeleteRemovesOnlyThatExperimentAndResumesAfterRestart) {
  const int64_t a = Experiment();
  const int64_t b = Experiment();
  const int64_t running = Experiment(/*running=*/true);
  const int64_t trial_a = TrialOf(a);
  const int64_t trial_b = TrialOf(b);
  const std::string dir_a = AddData(a, "11111111-1111-4111-8111-111111111111");
  const std::string dir_b = AddData(b, "22222222-2222-4222-8222-222222222222");
  const std::string sha = Get(a)->trial_so().sha256();

  absl::Status st = Delete(running);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("experiment ", running, " is ACTIVE")));

  ASSERT_TRUE(Delete(a).ok());
  EXPECT_EQ(Get(a)->state(), apiv1::STATE_DELETING);
  ASSERT_TRUE(Delete(a).ok());  // idempotent while DELETING
  // Every mutation is refused while DELETING.
  apiv1::PatchExperimentRequest patch;
  patch.set_experiment_id(a);
  patch.set_name("x");
  EXPECT_EQ(core_->PatchExperiment(patch).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Archive(a, true).code(), absl::StatusCode::kFailedPrecondition);
  apiv1::KillExperimentRequest kill;
  kill.set_experiment_id(a);
  EXPECT_EQ(core_->KillExperiment(kill).status().code(), absl::StatusCode::kFailedPrecondition);

  // The master stops before the background task ran: DELETING is stored.
  Restart();
  EXPECT_EQ(Get(a)->state(), apiv1::STATE_DELETING);
  EXPECT_TRUE(fs::exists(dir_a));
  core_->RunBackgroundPass();

  EXPECT_EQ(Get(a).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir_a));
  EXPECT_EQ(Count("experiments", absl::StrCat("id = ", a)), 0);
  EXPECT_EQ(Count("trials", absl::StrCat("experiment_id = ", a)), 0);
  EXPECT_EQ(Count("metrics", absl::StrCat("trial_id = ", trial_a)), 0);
  EXPECT_EQ(Count("task_logs", absl::StrCat("trial_id = ", trial_a)), 0);
  EXPECT_EQ(Count("checkpoints", absl::StrCat("experiment_id = ", a)), 0);
  // b untouched, and the trial.so it shares with a kept.
  EXPECT_TRUE(fs::exists(dir_b + "/model.pt"));
  EXPECT_EQ(Count("metrics", absl::StrCat("trial_id = ", trial_b)), 1);
  EXPECT_EQ(Count("task_logs", absl::StrCat("trial_id = ", trial_b)), 1);
  EXPECT_EQ(Count("checkpoints", absl::StrCat("experiment_id = ", b)), 1);
  EXPECT_TRUE(core_->artifacts().Has(sha));
  EXPECT_EQ(Get(b)->state(), apiv1::STATE_CANCELED);

  // The last experiments using the trial.so go: so does the trial.so.
  ASSERT_TRUE(core_->KillExperiment([&] {
                      apiv1::KillExperimentRequest k;
                      k.set_experiment_id(running);
                      return k;
                    }())
                  .ok());
  ASSERT_TRUE(Delete(b).ok());
  ASSERT_TRUE(Delete(running).ok());
  core_->RunBackgroundPass();
  EXPECT_EQ(Get(b).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir_b));
  EXPECT_FALSE(core_->artifacts().Has(sha));
  EXPECT_EQ(Count("trials", "1"), 0);
  EXPECT_EQ(Delete(b).code(), absl::StatusCode::kNotFound);
}

TEST_F(ExperimentDeleteTest, DeleteOfManyRowsRunsInBatches) {
  const int64_t a = Experiment();
  const int64_t trial = TrialOf(a);
  std::vector<MetricRow> rows;
  for (int i = 1; i <= 5000; ++i) {
    MetricRow m;
    m.trial_id = trial;
    m.group = "training";
    m.total_batches = i;
    m.metrics = {{"loss", 1.0 / i}};
    rows.push_back(m);
  }
  ASSERT_TRUE(core_->store()->InsertMetrics(rows).ok());
  // One store call deletes at most the batch it is given.
  auto n = core_->store()->DeleteExperimentDataBatch(a, 2000);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2000);
  EXPECT_EQ(Count("metrics", absl::StrCat("trial_id = ", trial)), 3000);
  ASSERT_TRUE(Delete(a).ok());
  core_->RunBackgroundPass();
  EXPECT_EQ(Count("metrics", "1"), 0);
  EXPECT_EQ(Get(a).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ExperimentDeleteTest, PatchIsBounded) {
  const int64_t a = Experiment();
  apiv1::PatchExperimentRequest req;
  req.set_experiment_id(a);
  req.set_description(std::string(16 * 1024 + 1, 'x'));
  absl::Status st = core_->PatchExperiment(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("description"));
  req.clear_description();
  for (int i = 0; i < 101; ++i) req.mutable_labels()->add_labels(absl::StrCat("l", i));
  st = core_->PatchExperiment(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("labels"));
  req.mutable_labels()->clear_labels();
  req.mutable_labels()->add_labels("a");
  req.set_name(std::string(256, 'n'));
  EXPECT_THAT(core_->PatchExperiment(req).status().message(), HasSubstr("name"));
  req.set_name("ok");
  req.set_description("text");
  auto resp = core_->PatchExperiment(req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->experiment().name(), "ok");
  EXPECT_EQ(resp->experiment().description(), "text");
  EXPECT_THAT(resp->experiment().labels(), ::testing::ElementsAre("a"));
}

}  // namespace
}  // namespace det::master
