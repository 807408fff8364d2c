// Replacing a PAUSED experiment's trial.so (experiment_trial_so.cc,
// PatchExperimentRequest.trial_so_sha256; issue 47, upgrade): what is
// accepted and recorded, what is refused and why, and the activation of an
// experiment whose trial.so is missing.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "common/det_version.h"
#include "common/sha256.h"
#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

class ExperimentTrialSoTest : public MasterCoreFixture {
 protected:
  // Passes the master's ELF header check; `tag` makes the hash differ.
  static std::string TrialSo(const std::string& tag) { return det::testing::FakeTrialSo() + tag; }

  // An experiment of trial.so `bytes` (PAUSED unless `active`): its id.
  int64_t Create(const std::string& bytes, bool active = false) {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(det::testing::SingleTrialConfig("so", dir_ / "checkpoints"));
    req.set_trial_so(bytes);
    req.set_trial_so_name("old_trial.so");
    req.set_activate(active);
    auto resp = core_->CreateExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->experiment().id() : 0;
  }
  // Stores `bytes` as an artifact (as UploadArtifact would): its sha256.
  std::string Upload(const std::string& bytes) {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(det::testing::SingleTrialConfig("upload", dir_ / "checkpoints"));
    req.set_trial_so(bytes);
    req.set_validate_only(true);
    EXPECT_TRUE(core_->CreateExperiment(req).ok());
    return Sha256Hex(bytes);
  }
  absl::StatusOr<apiv1::PatchExperimentResponse> SetTrialSo(int64_t id, const std::string& sha,
                                                            const std::string& name = "new_trial.so") {
    apiv1::PatchExperimentRequest req;
    req.set_experiment_id(id);
    req.set_trial_so_sha256(sha);
    req.set_trial_so_name(name);
    return core_->PatchExperiment(req);
  }
  std::string StoredSha(int64_t id) {
    apiv1::GetExperimentRequest req;
    req.set_experiment_id(id);
    auto resp = core_->GetExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->experiment().trial_so().sha256() : "";
  }
  bool ArtifactStored(const std::string& sha) { return std::filesystem::exists(dir_ / ("artifacts/" + sha + ".so")); }
  // Runs `sql` on the master's database through a connection of its own.
  void Sql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2((dir_ / "det.db").c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "") << ": " << sql;
    sqlite3_free(err);
    sqlite3_close(db);
  }
  // Every later commit of a transaction that updates an experiment fails
  // (a deferred foreign key its trigger violates; SQLITE_FULL or an I/O
  // error in production), until DROP TRIGGER det_test_fail_commit.
  void FailCommitsThatUpdateAnExperiment() {
    Sql("CREATE TABLE det_test_parent(id INTEGER PRIMARY KEY);"
        "CREATE TABLE det_test_child(pid INTEGER REFERENCES det_test_parent(id) DEFERRABLE INITIALLY DEFERRED);"
        "CREATE TRIGGER det_test_fail_commit AFTER UPDATE ON experiments "
        "BEGIN INSERT INTO det_test_child(pid) VALUES (1); END;");
  }
};

TEST_F(ExperimentTrialSoTest, APausedExperimentGetsTheNewTrialSoRecordedAndTheUnusedOldOneRemoved) {
  const std::string old_bytes = TrialSo("old");
  const int64_t id = Create(old_bytes);
  const std::string old_sha = Sha256Hex(old_bytes);
  ASSERT_TRUE(ArtifactStored(old_sha));
  const std::string new_sha = Upload(TrialSo("new"));

  auto resp = SetTrialSo(id, new_sha);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->experiment().trial_so().sha256(), new_sha);
  EXPECT_FALSE(ArtifactStored(old_sha)) << "no other experiment uses it";
  EXPECT_TRUE(ArtifactStored(new_sha));
  EXPECT_EQ(core_->artifacts().Name(new_sha), "new_trial.so") << "no other experiment uses it";
  // Recorded in the database: a restarted master runs the new one.
  Restart();
  EXPECT_EQ(StoredSha(id), new_sha);
  apiv1::ActivateExperimentRequest activate;
  activate.set_experiment_id(id);
  EXPECT_TRUE(core_->ActivateExperiment(activate).ok());
}

TEST_F(ExperimentTrialSoTest, AnOldTrialSoAnotherExperimentUsesIsKept) {
  const std::string shared = TrialSo("shared");
  const int64_t a = Create(shared);
  const int64_t b = Create(shared);
  ASSERT_TRUE(SetTrialSo(a, Upload(TrialSo("new"))).ok());
  EXPECT_TRUE(ArtifactStored(Sha256Hex(shared)));
  EXPECT_EQ(StoredSha(b), Sha256Hex(shared));
}

// The name goes with the bytes (content-addressed): a trial.so that another
// experiment uses keeps the name it goes by there (its agents' load errors,
// DET_TRIAL_SO_NAME).
TEST_F(ExperimentTrialSoTest, ATrialSoAnotherExperimentUsesKeepsItsName) {
  const std::string shared = TrialSo("shared");
  Create(shared);  // named old_trial.so
  const int64_t b = Create(TrialSo("b"));
  ASSERT_TRUE(SetTrialSo(b, Sha256Hex(shared), "renamed.so").ok());
  EXPECT_EQ(StoredSha(b), Sha256Hex(shared));
  EXPECT_EQ(core_->artifacts().Name(Sha256Hex(shared)), "old_trial.so");
}

// A commit that fails leaves the experiment on its old trial.so (the core
// reloads it from the database): that file is still stored, and the new
// one's name is unchanged. Once commits succeed, the replacement goes
// through.
TEST_F(ExperimentTrialSoTest, AFailedCommitKeepsTheOldTrialSoStoredAndTheNewOnesName) {
  const std::string old_bytes = TrialSo("old");
  const int64_t id = Create(old_bytes);
  const std::string old_sha = Sha256Hex(old_bytes);
  const std::string new_sha = Upload(TrialSo("new"));
  ASSERT_EQ(core_->artifacts().Name(new_sha), "trial.so");
  FailCommitsThatUpdateAnExperiment();

  absl::Status st = SetTrialSo(id, new_sha).status();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(StoredSha(id), old_sha);
  EXPECT_TRUE(ArtifactStored(old_sha)) << "the experiment's trial.so was removed, but the commit failed";
  EXPECT_EQ(core_->artifacts().Name(new_sha), "trial.so") << "renamed, but the commit failed";

  Sql("DROP TRIGGER det_test_fail_commit");
  ASSERT_TRUE(SetTrialSo(id, new_sha).ok());
  EXPECT_EQ(StoredSha(id), new_sha);
  EXPECT_FALSE(ArtifactStored(old_sha));
  EXPECT_EQ(core_->artifacts().Name(new_sha), "new_trial.so");
}

TEST_F(ExperimentTrialSoTest, OnlyAPausedExperimentsTrialSoIsReplaced) {
  const int64_t active = Create(TrialSo("a"), /*active=*/true);
  const std::string new_sha = Upload(TrialSo("new"));
  auto st = SetTrialSo(active, new_sha).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("only a PAUSED experiment's trial.so can be replaced"));
  EXPECT_EQ(StoredSha(active), Sha256Hex(TrialSo("a")));
}

// Paused while its trial still runs (the agent has not reported the exit):
// refused until the allocation is gone.
TEST_F(ExperimentTrialSoTest, APausedExperimentWhoseTrialStillRunsIsRefused) {
  const int64_t id = Create(TrialSo("a"), /*active=*/true);
  agentv1::RegisterAgentRequest reg;
  reg.set_agent_id("a");
  reg.set_version(det::kDetVersion);
  reg.add_devices()->set_id(0);
  auto registered = core_->RegisterAgent(reg);
  ASSERT_TRUE(registered.ok()) << registered.status();
  auto session = core_->AttachAgent(registered->session_token());
  ASSERT_TRUE(session.ok()) << session.status();
  core_->RunBackgroundPass();
  ASSERT_EQ(Starts(**session).size(), 1u);
  apiv1::PauseExperimentRequest pause;
  pause.set_experiment_id(id);
  ASSERT_TRUE(core_->PauseExperiment(pause).ok());
  auto st = SetTrialSo(id, Upload(TrialSo("new"))).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("is PAUSED but its trial 1 still runs"));
  EXPECT_EQ(StoredSha(id), Sha256Hex(TrialSo("a")));
}

TEST_F(ExperimentTrialSoTest, BadRequestsAreRefusedNamingTheField) {
  const int64_t id = Create(TrialSo("old"));
  // A well-formed hash nothing was uploaded as.
  auto st = SetTrialSo(id, std::string(64, 'a')).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_THAT(st.message(), HasSubstr("upload the trial.so with UploadArtifact first"));
  for (const std::string& bad : std::vector<std::string>{"", "abc", std::string(64, 'A'), "../../etc/passwd"}) {
    st = SetTrialSo(id, bad).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr("trial_so_sha256")) << bad;
  }
  const std::string new_sha = Upload(TrialSo("new"));
  st = SetTrialSo(id, new_sha, "dir/x.so").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("trial_so_name"));
  apiv1::PatchExperimentRequest name_only;
  name_only.set_experiment_id(id);
  name_only.set_trial_so_name("x.so");
  st = core_->PatchExperiment(name_only).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("trial_so_name: only with trial_so_sha256"));
  st = SetTrialSo(999, new_sha).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(StoredSha(id), Sha256Hex(TrialSo("old")));
}

// A database upgraded or restored without its artifacts: activating is
// refused, naming the command that attaches a rebuilt trial.so.
TEST_F(ExperimentTrialSoTest, ActivatingAnExperimentWhoseTrialSoIsMissingNamesTheFix) {
  const int64_t id = Create(TrialSo("lost"));
  std::filesystem::remove(dir_ / ("artifacts/" + Sha256Hex(TrialSo("lost")) + ".so"));
  apiv1::ActivateExperimentRequest activate;
  activate.set_experiment_id(id);
  auto st = core_->ActivateExperiment(activate).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("is not in this master's artifact store"));
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("det-cli experiment set trial-so ", id, " TRIAL_SO")));
  ASSERT_TRUE(SetTrialSo(id, Upload(TrialSo("rebuilt"))).ok());
  EXPECT_TRUE(core_->ActivateExperiment(activate).ok());
}

}  // namespace
}  // namespace det::master
