// The Slurm resource manager without Slurm: its config, batch script, the
// parsing of sbatch and squeue, what a job's end means for its ranks, and
// MasterCore driving jobs through a fake command runner (sbatch, squeue,
// scancel played by the test) with a FakeClock: submission, pending shown
// as QUEUED, a rank killed by SIGKILL restarting the trial, pause of a
// pending job cancelling it, and a restarted master reattaching by job id.
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/det_version.h"
#include "master/core/core_test_fixture.h"
#include "master/core/slurm_driver.h"
#include "master/core/slurm_jobs.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

TEST(SlurmConfigTest, ParsesSlurmSectionAndDefaultsToAgents) {
  auto none = ParseResourceManagerConfig("port: 8080\n", "master.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->slurm_managed());
  auto rm = ParseResourceManagerConfig(
      "resource_manager:\n  type: slurm\n  partition_pools: {default: debug, gpu: a100}\n"
      "  gpu_partitions: [a100]\n  time_limit_minutes: 30\n  job_storage_root: /shared/jobs\n"
      "  rendezvous_ports: {first: 30000, last: 30009}\n",
      "master.yaml");
  ASSERT_TRUE(rm.ok()) << rm.status();
  EXPECT_TRUE(rm->slurm_managed());
  EXPECT_EQ(rm->slurm.partition_pools.at("gpu"), "a100");
  EXPECT_EQ(rm->slurm.time_limit_minutes, 30);
  EXPECT_EQ(rm->slurm.rendezvous_first, 30000);
}

TEST(SlurmConfigTest, TheShippedExampleParses) {
  auto rm = LoadResourceManagerFile(std::string(DET_SOURCE_DIR) + "/deploy/config/slurm.yaml");
  ASSERT_TRUE(rm.ok()) << rm.status();
  EXPECT_TRUE(rm->slurm_managed());
  EXPECT_EQ(rm->slurm.partition_pools.at("default"), "debug");
}

TEST(SlurmConfigTest, BadFieldsNameTheFieldAndLine) {
  auto typo = ParseResourceManagerConfig("resource_manager:\n  type: slurm\n  partition_pool: {}\n", "m.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(std::string(typo.status().message()), HasSubstr("m.yaml:3"));
  EXPECT_THAT(std::string(typo.status().message()), HasSubstr("partition_pool"));
  auto pbs = ParseResourceManagerConfig("resource_manager: {type: pbs}\n", "m.yaml");
  ASSERT_FALSE(pbs.ok());
  EXPECT_THAT(std::string(pbs.status().message()), HasSubstr("not supported"));
  // A partition name that would escape the script's #SBATCH line.
  auto inject = ParseResourceManagerConfig(
      "resource_manager:\n  type: slurm\n  partition_pools: {default: \"x\\n#SBATCH --uid=0\"}\n", "m.yaml");
  ASSERT_FALSE(inject.ok());
  auto relative = ParseResourceManagerConfig("resource_manager: {type: slurm, job_storage_root: jobs}\n", "m.yaml");
  ASSERT_FALSE(relative.ok());
  EXPECT_THAT(std::string(relative.status().message()), HasSubstr("absolute"));
}

TEST(SlurmScriptTest, RanksThroughSrunWithGresTimeAndPartition) {
  SlurmJobSpec spec;
  spec.allocation_id = "trial-3.1.ab12";
  spec.job_dir = "/shared/jobs/trial-3.1.ab12";
  spec.partition = "a100";
  spec.ntasks = 2;
  spec.gpus = true;
  spec.time_limit_minutes = 90;
  spec.det_trial = "/opt/det/det-trial";
  auto script = SlurmBatchScript(spec);
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_THAT(*script, HasSubstr("#SBATCH --job-name=det-trial-3.1.ab12\n"));
  EXPECT_THAT(*script, HasSubstr("#SBATCH --ntasks=2\n"));
  EXPECT_THAT(*script, HasSubstr("#SBATCH --partition=a100\n"));
  EXPECT_THAT(*script, HasSubstr("#SBATCH --time=90\n"));
  EXPECT_THAT(*script, HasSubstr("#SBATCH --gres=gpu:2\n"));
  EXPECT_THAT(*script, HasSubstr("#SBATCH --no-requeue\n"));
  EXPECT_THAT(*script, HasSubstr("scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1"));
  EXPECT_THAT(*script, HasSubstr("srun --kill-on-bad-exit=1 --ntasks=2"));
  EXPECT_THAT(*script, HasSubstr("'/opt/det/det-trial' --managed --slurm-job-file \"$DET_JOB_DIR/job.json\""));
  // The token never appears in the script (it is in the 0600 job.json).
  spec.gpus = false;
  auto cpu = SlurmBatchScript(spec);
  ASSERT_TRUE(cpu.ok());
  EXPECT_THAT(*cpu, Not(HasSubstr("--gres")));
  spec.gpus = true;
  spec.ntasks = 12;
  spec.gpus_per_node = 8;
  EXPECT_FALSE(SlurmBatchScript(spec).ok());  // 12 GPUs do not fill whole 8-GPU nodes
  spec.allocation_id = "x;rm -rf /";
  EXPECT_FALSE(SlurmBatchScript(spec).ok());
}

TEST(SlurmParseTest, SbatchAndSqueue) {
  EXPECT_EQ(ParseSbatchOutput("42\n").value_or(""), "42");
  EXPECT_EQ(ParseSbatchOutput("42;cluster\n").value_or(""), "42");
  EXPECT_FALSE(ParseSbatchOutput("sbatch: error: invalid partition\n").ok());
  auto jobs = ParseSqueue("7|det-trial-1.1.aa|PENDING|Resources\n8|det-trial-2.1.bb|RUNNING|None\ngarbage\n");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs.at("det-trial-1.1.aa").reason, "Resources");
  EXPECT_EQ(PhaseOfState("PENDING"), SlurmPhase::kPending);
  EXPECT_EQ(PhaseOfState("COMPLETING"), SlurmPhase::kRunning);
  EXPECT_EQ(PhaseOfState("FAILED"), SlurmPhase::kEnded);
  EXPECT_EQ(AllocationOfJobName("det-trial-1.1.aa"), "trial-1.1.aa");
}

TEST(SlurmParseTest, RankEnds) {
  SqueueJob failed{"9", "det-x", "FAILED", ""};
  auto ends = DecideRankEnds(failed, {std::nullopt, 137});
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[0].exit_code, 1);
  EXPECT_EQ(ends[1].exit_code, 137);
  EXPECT_THAT(ends[1].why, HasSubstr("signal 9"));
  auto gone = DecideRankEnds(std::nullopt, {std::nullopt});
  EXPECT_TRUE(gone[0].lost);
  SqueueJob canceled{"9", "det-x", "CANCELLED", ""};
  EXPECT_EQ(DecideRankEnds(canceled, {std::nullopt})[0].exit_code, 143);
  SqueueJob done{"9", "det-x", "COMPLETED", ""};
  EXPECT_EQ(DecideRankEnds(done, {0})[0].exit_code, 0);
}

// Plays sbatch, squeue and scancel: jobs get ids from 100, and the test sets
// their states.
class FakeSlurm final : public CommandRunner {
 public:
  absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv) override {
    std::lock_guard<std::mutex> l(mu_);
    calls.push_back(absl::StrJoin(argv, " "));
    CommandResult r;
    if (argv[0] == "sbatch") {
      const std::string id = std::to_string(next_id_++);
      std::ifstream in(argv.back());
      std::string line, name;
      while (std::getline(in, line)) {
        if (line.rfind("#SBATCH --job-name=", 0) == 0) name = line.substr(19);
      }
      jobs[name] = {id, "PENDING"};
      scripts[name] = argv.back();
      r.out = id + "\n";
    } else if (argv[0] == "squeue") {
      for (const auto& [name, job] : jobs) absl::StrAppend(&r.out, job.first, "|", name, "|", job.second, "|None\n");
    } else if (argv[0] == "scancel") {
      canceled.push_back(argv.back());
      if (jobs.count(argv.back())) jobs[argv.back()].second = "CANCELLED";
    }
    return r;
  }
  std::mutex mu_;
  int next_id_ = 100;
  std::map<std::string, std::pair<std::string, std::string>> jobs;  // name -> (id, state)
  std::map<std::string, std::string> scripts;
  std::vector<std::string> calls;
  std::vector<std::string> canceled;
};

// A job directory that exists already (here a symlink planted where the
// next one would go) is refused: nothing is written through it and sbatch
// is not run.
TEST(SlurmDriverTest, AnExistingJobDirectoryIsRefused) {
  det::testing::TempDir dir;
  auto slurm = std::make_shared<FakeSlurm>();
  fs::create_directories(dir / "elsewhere");
  fs::create_directories(dir / "jobs");
  fs::create_symlink(dir / "elsewhere", dir / "jobs/trial-1.1.aaaa");
  std::ofstream(dir / "trial.so") << "so";
  SlurmDriver driver(SlurmConfig(), slurm);
  SlurmWork work;
  SlurmSubmission sub;
  sub.allocation_id = "trial-1.1.aaaa";
  sub.job_dir = dir / "jobs/trial-1.1.aaaa";
  sub.script = "#!/bin/sh\n";
  sub.job_json = "{}";
  sub.trial_so_path = dir / "trial.so";
  work.submit.push_back(sub);
  SlurmResults res = driver.Run(work);
  ASSERT_EQ(res.submit_errors.count("trial-1.1.aaaa"), 1u);
  EXPECT_THAT(res.submit_errors["trial-1.1.aaaa"], HasSubstr("must not exist yet"));
  EXPECT_TRUE(fs::is_empty(dir / "elsewhere"));
  EXPECT_TRUE(slurm->scripts.empty());
}

class SlurmCoreTest : public MasterCoreFixture {
 protected:
  void Customize(MasterOptions* options) override {
    options->resource_manager.type = ResourceManagerType::kSlurm;
    options->resource_manager.slurm.det_trial = "/opt/det/det-trial";
    options->resource_manager.runner = slurm_;
  }
  void Opened() override { core_->set_trial_master_address("127.0.0.1:8090"); }
  int64_t CreateExperiment(int slots) {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(det::testing::SingleTrialConfig("slurm", dir_ / "checkpoints", slots));
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(true);
    auto resp = core_->CreateExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->experiment().id() : 0;
  }
  void Pass() {
    clock_->AdvanceMs(2000);
    core_->RunBackgroundPass();
  }
  std::string JobState(int64_t experiment_id) {
    auto q = core_->GetJobQueue(apiv1::GetJobQueueRequest());
    EXPECT_TRUE(q.ok()) << q.status();
    for (const auto& j : q->jobs()) {
      if (j.job_id() == absl::StrCat("exp-", experiment_id)) return apiv1::JobState_Name(j.state());
    }
    return "";
  }
  apiv1::Trial OnlyTrial(int64_t experiment_id) {
    apiv1::GetExperimentTrialsRequest req;
    req.set_experiment_id(experiment_id);
    auto trials = core_->GetExperimentTrials(req);
    EXPECT_TRUE(trials.ok() && trials->trials_size() == 1);
    return trials.ok() && trials->trials_size() > 0 ? trials->trials(0) : apiv1::Trial();
  }

  std::shared_ptr<FakeSlurm> slurm_ = std::make_shared<FakeSlurm>();
};

TEST_F(SlurmCoreTest, SubmitsAJobPendingIsQueuedRunningIsScheduled) {
  int64_t exp = CreateExperiment(2);
  Pass();
  ASSERT_EQ(slurm_->jobs.size(), 1u);
  const std::string name = slurm_->jobs.begin()->first;
  const fs::path job_dir = fs::path(slurm_->scripts[name]).parent_path();
  std::ifstream script(job_dir / "job.sh");
  std::string text((std::istreambuf_iterator<char>(script)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("--ntasks=2"));
  struct stat st;
  ASSERT_EQ(stat((job_dir / "job.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(job_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::ifstream job_json(job_dir / "job.json");
  nlohmann::json job = nlohmann::json::parse(job_json);
  EXPECT_EQ(job["master"], "127.0.0.1:8090");
  EXPECT_EQ(job["token"].get<std::string>().size(), 32u);
  EXPECT_NE(job["chief_port"].get<int>(), 0);
  EXPECT_TRUE(fs::exists(job_dir / "trial.so"));
  EXPECT_EQ(JobState(exp), "JOB_STATE_QUEUED");
  slurm_->jobs[name].second = "RUNNING";
  Pass();
  EXPECT_EQ(JobState(exp), "JOB_STATE_SCHEDULED");
}

TEST_F(SlurmCoreTest, ARankKilledBySigkillRestartsTheTrial) {
  int64_t exp = CreateExperiment(2);
  Pass();
  const std::string name = slurm_->jobs.begin()->first;
  const fs::path job_dir = fs::path(slurm_->scripts[name]).parent_path();
  slurm_->jobs[name].second = "RUNNING";
  Pass();
  std::ofstream(job_dir / "exit.1") << "137\n";
  slurm_->jobs[name].second = "FAILED";
  Pass();  // the job ends: restart 1 of max_restarts, a new job submitted
  EXPECT_FALSE(fs::exists(job_dir / "trial.so"));  // no copy left behind
  EXPECT_FALSE(fs::exists(job_dir / "job.json"));
  EXPECT_TRUE(fs::exists(job_dir / "job.sh"));
  apiv1::Trial trial = OnlyTrial(exp);
  EXPECT_EQ(trial.restarts(), 1);
  Pass();
  EXPECT_EQ(slurm_->jobs.size(), 2u);
}

TEST_F(SlurmCoreTest, PausingAPendingJobCancelsIt) {
  int64_t exp = CreateExperiment(1);
  Pass();
  const std::string name = slurm_->jobs.begin()->first;
  apiv1::PauseExperimentRequest pause;
  pause.set_experiment_id(exp);
  ASSERT_TRUE(core_->PauseExperiment(pause).ok());
  Pass();
  EXPECT_THAT(slurm_->canceled, ::testing::Contains(name));
  Pass();  // squeue: CANCELLED, no exit status -> stopped, paused
  EXPECT_EQ(apiv1::State_Name(OnlyTrial(exp).state()), "STATE_PAUSED");
  EXPECT_EQ(OnlyTrial(exp).restarts(), 0);
}

// A running job asked to stop checkpoints through ShouldPreempt; when it
// has not ended within the stop timeout, the escalation is scancel.
TEST_F(SlurmCoreTest, AStopThatTimesOutIsScancel) {
  int64_t exp = CreateExperiment(1);
  Pass();
  const std::string name = slurm_->jobs.begin()->first;
  slurm_->jobs[name].second = "RUNNING";
  Pass();
  apiv1::PauseExperimentRequest pause;
  pause.set_experiment_id(exp);
  ASSERT_TRUE(core_->PauseExperiment(pause).ok());
  Pass();
  EXPECT_TRUE(slurm_->canceled.empty());  // running: it checkpoints first
  clock_->AdvanceMs(core_->options().stop_timeout_ms + 1000);
  core_->RunBackgroundPass();
  Pass();
  EXPECT_THAT(slurm_->canceled, ::testing::Contains(name));
  Pass();  // CANCELLED: paused, not a restart
  EXPECT_EQ(apiv1::State_Name(OnlyTrial(exp).state()), "STATE_PAUSED");
  EXPECT_EQ(OnlyTrial(exp).restarts(), 0);
}

// Review item 7: a kill the database cannot record (here another connection
// holds its write lock; in the review, a full disk) still scancels the
// experiment's Slurm job at once, as agents' processes are killed.
TEST_F(SlurmCoreTest, AKillTheDatabaseCannotRecordStillScancels) {
  int64_t exp = CreateExperiment(1);
  Pass();
  const std::string name = slurm_->jobs.begin()->first;
  slurm_->jobs[name].second = "RUNNING";
  Pass();
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "det.db").c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  apiv1::KillExperimentRequest kill;
  kill.set_experiment_id(exp);
  auto killed = core_->KillExperiment(kill);  // waits out the store's busy timeout (10 s)
  EXPECT_EQ(killed.status().code(), absl::StatusCode::kUnavailable) << killed.status();
  EXPECT_THAT(std::string(killed.status().message()), HasSubstr("1 process group(s) told to stop"));
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  Pass();
  EXPECT_THAT(slurm_->canceled, ::testing::Contains(name));
}

TEST_F(SlurmCoreTest, ARestartedMasterReattachesToItsRunningJob) {
  int64_t exp = CreateExperiment(1);
  Pass();
  const std::string name = slurm_->jobs.begin()->first;
  slurm_->jobs[name].second = "RUNNING";
  Pass();
  Restart();
  Pass();
  Pass();
  EXPECT_EQ(slurm_->jobs.size(), 1u);  // no second submission
  EXPECT_EQ(JobState(exp), "JOB_STATE_SCHEDULED");
  EXPECT_EQ(apiv1::State_Name(OnlyTrial(exp).state()), "STATE_ACTIVE");
}

TEST_F(SlurmCoreTest, AgentsAreRefused) {
  agentv1::RegisterAgentRequest req;
  req.set_agent_id("slurm");
  req.set_version(det::kDetVersion);
  req.add_devices()->set_id(0);
  auto resp = core_->RegisterAgent(req);
  ASSERT_FALSE(resp.ok());
  EXPECT_THAT(std::string(resp.status().message()), HasSubstr("resource manager is slurm"));
}

}  // namespace
}  // namespace det::master
