// The Slurm resource manager against a real single-node Slurm
// (deploy/slurm-local.sh: munged, slurmctld, slurmd in a temp dir, started
// once for the suite): no agents, every allocation a Slurm job whose ranks
// run det-trial through srun. The synthetic experiment (1 and 2 slots)
// completes with the metrics of an agent-based run; det-cli, REST and the
// dashboard work unchanged; pause and activate; kill -9 of a rank restarts
// the trial from its checkpoint; a master kill -9 mid-trial reattaches.
// Each claim about a Slurm job is checked in Slurm itself (squeue).
// Skipped (with the reason) only when the Slurm daemons cannot start here.
// DET_SLURM_CPUS=N runs them on a node of N CPUs (deploy/slurm-local.sh).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kBin = DET_BIN_DIR;
const std::string kSlurmLocal = std::string(DET_SOURCE_DIR) + "/deploy/slurm-local.sh";
constexpr auto kLong = std::chrono::seconds(150);

struct Extra {
  int batch_delay_ms = 0;
  int max_restarts = 0;
  int checkpoint_period = 0;
  int batches = 40;
};

// The synthetic experiment of distributed_test (dropout 0, one seed), so
// that 1- and 2-rank runs on agents and on Slurm can be compared.
std::string Yaml(const std::string& name, int slots, const std::string& checkpoint_dir, const Extra& extra = {}) {
  std::string out = absl::StrCat("name: ", name,
                                 "\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n"
                                 "  hidden_size: 16\n  dropout: 0.0\n");
  if (extra.batch_delay_ms > 0) absl::StrAppend(&out, "  batch_delay_ms: ", extra.batch_delay_ms, "\n");
  if (extra.checkpoint_period > 0) {
    absl::StrAppend(&out, "min_checkpoint_period:\n  batches: ", extra.checkpoint_period, "\n");
  }
  absl::StrAppend(&out, "searcher:\n  name: single\n  metric: validation_loss\n  smaller_is_better: true\n",
                  "  max_length:\n    batches: ", extra.batches,
                  "\nmin_validation_period:\n  batches: 20\nscheduling_unit: 10\nmax_restarts: ", extra.max_restarts,
                  "\nresources:\n  slots_per_trial: ", slots,
                  "\ncheckpoint_storage:\n  type: shared_fs\n  host_path: ", checkpoint_dir,
                  "\nreproducibility:\n  experiment_seed: 11\n"
                  "environment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
                  "data:\n  train_size: 256\n  val_size: 64\n  features: 16\n");
  return out;
}

// One Slurm for the whole suite (starting it takes seconds).
class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    slurm_dir_ = new TempDir();
    std::string out, err;
    // Not installed is a failure, not a reason to skip: deploy/install-deps.sh
    // installs slurm-wlm and munge.
    if (RunProcess({"/bin/sh", "-c", "command -v slurmctld && command -v slurmd && command -v munged && command -v sbatch"},
                   &out, &err) != 0) {
      *missing_ = "slurm-wlm or munge is not installed (deploy/install-deps.sh installs them): " + out + err;
      return;
    }
    int rc = RunProcess({"/bin/bash", kSlurmLocal, "start", slurm_dir_->path()}, &out, &err, std::chrono::seconds(90));
    if (rc != 0) {
      *skip_reason_ = absl::StrCat("the Slurm daemons did not start here (deploy/slurm-local.sh exited ", rc,
                                   "):\n", out, err);
      return;
    }
    setenv("SLURM_CONF", (fs::path(slurm_dir_->path()) / "slurm.conf").c_str(), 1);
  }
  static void TearDownTestSuite() {
    std::string out, err;
    RunProcess({"/bin/bash", kSlurmLocal, "stop", slurm_dir_->path()}, &out, &err, std::chrono::seconds(30));
    delete slurm_dir_;
    slurm_dir_ = nullptr;
  }
  void SetUp() override {
    if (!missing_->empty()) GTEST_FAIL() << *missing_;
    if (!skip_reason_->empty()) GTEST_SKIP() << *skip_reason_;
  }

  // A master whose resource manager is this Slurm.
  std::unique_ptr<TestCluster> SlurmCluster() {
    const std::string rm = dir_ / "resource-manager.yaml";
    WriteFile(rm, absl::StrCat("resource_manager:\n  type: slurm\n  partition_pools:\n    default: debug\n",
                               "  job_storage_root: ", dir_ / "jobs", "\n  det_trial: ", kBin, "/det-trial\n",
                               "  time_limit_minutes: 30\n  poll_interval_ms: 300\n"));
    return std::make_unique<TestCluster>(
        dir_, TestClusterOptions().add_master_flags({"--resource-manager", rm, "--stop-timeout-s", "20"}));
  }
  static std::string WaitUntilEnded(TestCluster& c, int id) {
    std::string state;
    PollUntil(
        [&] {
          state = c.ExperimentState(id);
          return state == "STATE_COMPLETED" || state == "STATE_ERROR" || state == "STATE_CANCELED";
        },
        kLong);
    return state;
  }
  static json Trial(TestCluster& c, int experiment) {
    json t = c.Trials(experiment);
    return t.empty() ? json::object() : t[0];
  }
  static std::string TrialLogs(TestCluster& c, int trial) {
    json l = c.Get(absl::StrCat("/api/v1/trials/", trial, "/logs"));
    std::string out;
    if (l.is_object() && l.contains("logs")) {
      for (const auto& line : l["logs"]) out += line.value("message", "") + "\n";
    }
    return out;
  }
  // Waits until the experiment's trial reported a checkpoint while running.
  static bool WaitForCheckpoint(TestCluster& c, int experiment) {
    return PollUntil(
        [&] {
          json t = Trial(c, experiment);
          return !t.value("latest_checkpoint_uuid", "").empty() && !t.value("allocation_id", "").empty();
        },
        kLong);
  }
  // Every validation row's batches and metrics.
  static std::map<int64_t, json> Validation(TestCluster& c, int experiment) {
    std::map<int64_t, json> out;
    for (const auto& row : c.Metrics(Trial(c, experiment).value("id", 0), "validation")) {
      out[row.value("total_batches", int64_t{0})] = row["metrics"];
    }
    return out;
  }
  static TempDir* slurm_dir_;
  static std::string* skip_reason_;
  static std::string* missing_;
  TempDir dir_;
};

TempDir* SlurmTest::slurm_dir_ = nullptr;
std::string* SlurmTest::skip_reason_ = new std::string();
std::string* SlurmTest::missing_ = new std::string();

// A Slurm job as squeue lists it.
struct SlurmJob {
  std::string id;
  std::string state;  // RUNNING, PENDING, COMPLETED, CANCELLED...
};

// Every job Slurm lists under the name the master gives allocation
// `allocation`'s job (det-<allocation>), ended ones included (they stay
// listed for MinJobAge, 300 s), oldest first.
std::vector<SlurmJob> SlurmJobsOf(const std::string& allocation) {
  std::string out, err;
  std::vector<SlurmJob> jobs;
  if (RunProcess({"/usr/bin/squeue", "-h", "-t", "all", "-n", "det-" + allocation, "-o", "%i|%T"}, &out, &err) != 0) {
    ADD_FAILURE() << "squeue failed: " << err;
    return jobs;
  }
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> f = absl::StrSplit(absl::StripAsciiWhitespace(line), '|');
    if (f.size() == 2) jobs.push_back({f[0], f[1]});
  }
  std::sort(jobs.begin(), jobs.end(), [](const SlurmJob& a, const SlurmJob& b) {
    return a.id.size() != b.id.size() ? a.id.size() < b.id.size() : a.id < b.id;
  });
  return jobs;
}

// squeue's state of job `id` ("" when squeue does not list it).
std::string SlurmJobState(const std::string& id) {
  std::string out, err;
  RunProcess({"/usr/bin/squeue", "-h", "-t", "all", "-j", id, "-o", "%T"}, &out, &err);
  return std::string(absl::StripAsciiWhitespace(out));
}

bool SlurmJobEnded(const std::string& state) { return state == "COMPLETED" || state == "CANCELLED"; }

// The Slurm job ids the master logged for a trial ("submitted as Slurm job N").
std::vector<std::string> SubmittedJobIds(const std::string& logs) {
  const std::string key = "submitted as Slurm job ";
  std::vector<std::string> ids;
  for (size_t pos = logs.find(key); pos != std::string::npos; pos = logs.find(key, pos + 1)) {
    const size_t start = pos + key.size();
    const size_t end = logs.find_first_not_of("0123456789", start);
    ids.push_back(logs.substr(start, end == std::string::npos ? std::string::npos : end - start));
  }
  return ids;
}

// The node's CPUs as Slurm counts them (sinfo %c), or 0.
int NodeCpus() {
  std::string out, err;
  int cpus = 0;
  if (RunProcess({"/usr/bin/sinfo", "-h", "-o", "%c"}, &out, &err) != 0) return 0;
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(out.substr(0, out.find('\n'))), &cpus) ? cpus : 0;
}

// scancels a Slurm job when it goes out of scope, so that a failed
// assertion does not leave it holding the node.
class ScancelAtExit {
 public:
  explicit ScancelAtExit(std::string id) : id_(std::move(id)) {}
  ~ScancelAtExit() {
    std::string out, err;
    if (!id_.empty()) RunProcess({"/usr/bin/scancel", id_}, &out, &err);
  }
  ScancelAtExit(const ScancelAtExit&) = delete;
  ScancelAtExit& operator=(const ScancelAtExit&) = delete;

 private:
  std::string id_;
};

// The process of det-trial rank `rank` of the Slurm job named `job_name`
// (found by srun's environment), or 0.
pid_t FindRankPid(const std::string& job_name, int rank) {
  const std::string want_job = "SLURM_JOB_NAME=" + job_name;
  const std::string want_rank = absl::StrCat("SLURM_PROCID=", rank);
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    if (ReadFile(entry.path() / "comm").rfind("det-trial", 0) != 0) continue;
    std::string env = ReadFile(entry.path() / "environ");
    bool job = false, r = false;
    for (size_t pos = 0; pos < env.size();) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      job |= env.compare(pos, end - pos, want_job) == 0;
      r |= env.compare(pos, end - pos, want_rank) == 0;
      pos = end + 1;
    }
    if (job && r) return static_cast<pid_t>(std::stoi(name));
  }
  return 0;
}

// Must show 1 and 2: the synthetic experiment on 1 and on 2 slots, first on
// an agent (2 slots), then as Slurm jobs created with det-cli: both complete
// with the agent run's validation metrics; the logs come from det-trial
// itself; the job queue, REST and the dashboard answer as with agents.
TEST_F(SlurmTest, OneAndTwoSlotTrialsCompleteWithTheAgentRunsMetrics) {
  std::map<int, std::map<int64_t, json>> agent_metrics;
  {
    TempDir agent_dir;
    TestCluster agents(agent_dir);
    agents.StartAgent("a", AgentOptions().set_slots(2));
    for (int slots : {1, 2}) {
      int id = agents.CreateExperiment(Yaml(absl::StrCat("agent-", slots), slots, agent_dir / "checkpoints"),
                                       absl::StrCat("agent", slots));
      ASSERT_GT(id, 0);
      ASSERT_EQ(WaitUntilEnded(agents, id), "STATE_COMPLETED") << agents.MasterLog() << agents.AgentLogs();
      agent_metrics[slots] = Validation(agents, id);
    }
  }
  auto cluster = SlurmCluster();
  std::map<int, int> ids;
  for (int slots : {1, 2}) {
    ids[slots] = cluster->CreateExperiment(Yaml(absl::StrCat("slurm-", slots), slots, dir_ / "checkpoints"),
                                           absl::StrCat("slurm", slots));
    ASSERT_GT(ids[slots], 0);
  }
  std::string queue;
  EXPECT_EQ(cluster->Cli({"job", "list"}, &queue), 0);
  EXPECT_THAT(queue, HasSubstr("exp-" + std::to_string(ids[2]))) << queue;
  for (int slots : {1, 2}) {
    ASSERT_EQ(WaitUntilEnded(*cluster, ids[slots]), "STATE_COMPLETED")
        << TrialLogs(*cluster, Trial(*cluster, ids[slots]).value("id", 0)) << cluster->MasterLog();
    json t = Trial(*cluster, ids[slots]);
    EXPECT_EQ(t.value("restarts", 0), 0);
    std::map<int64_t, json> m = Validation(*cluster, ids[slots]);
    ASSERT_FALSE(m.empty());
    ASSERT_EQ(m.size(), agent_metrics[slots].size()) << slots;
    for (const auto& [batches, metrics] : agent_metrics[slots]) {
      EXPECT_EQ(m[batches], metrics) << slots << " slot(s), batch " << batches;
    }
    std::string logs = TrialLogs(*cluster, t.value("id", 0));
    EXPECT_THAT(logs, HasSubstr("submitted as Slurm job")) << logs;
    EXPECT_THAT(logs, HasSubstr("[det-trial] validation batches")) << logs;  // shipped by det-trial itself
    if (slots == 2) {
      EXPECT_THAT(logs, HasSubstr("rank 0 of 2: process group over")) << logs;
    }
  }
  std::string described;
  EXPECT_EQ(cluster->Cli({"experiment", "describe", std::to_string(ids[2])}, &described), 0);
  EXPECT_THAT(described, HasSubstr("COMPLETED")) << described;
  int status = 0;
  json exp = cluster->Get(absl::StrCat("/api/v1/experiments/", ids[1]), &status);
  EXPECT_EQ(status, 200);
  httplib::Result page = cluster->Http("GET", "/", {});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_THAT(page->body, HasSubstr("<html")) << page->body.substr(0, 200);
  json agents = cluster->Get("/api/v1/agents");
  EXPECT_TRUE(!agents.contains("agents") || agents["agents"].empty()) << agents.dump();
}

// Pause checkpoints and ends the trial's Slurm job (squeue: COMPLETED or
// CANCELLED, no longer running); activate submits a new job, which resumes
// from the checkpoint.
TEST_F(SlurmTest, PauseCheckpointsAndEndsTheJobActivateResumes) {
  auto cluster = SlurmCluster();
  Extra extra;
  extra.batch_delay_ms = 50;
  extra.checkpoint_period = 10;
  extra.batches = 100;  // 5 s: paused well before its end
  int id = cluster->CreateExperiment(Yaml("pause", 1, dir_ / "checkpoints", extra), "pause");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(WaitForCheckpoint(*cluster, id)) << cluster->MasterLog();
  const std::string allocation = Trial(*cluster, id).value("allocation_id", "");
  const std::vector<SlurmJob> running = SlurmJobsOf(allocation);
  ASSERT_EQ(running.size(), 1u) << allocation;
  ScancelAtExit cancel(running[0].id);
  EXPECT_EQ(running[0].state, "RUNNING");
  ASSERT_EQ(cluster->Cli({"experiment", "pause", std::to_string(id)}), 0);
  ASSERT_TRUE(PollUntil([&] { return Trial(*cluster, id).value("state", "") == "STATE_PAUSED"; }, kLong))
      << Trial(*cluster, id).dump() << cluster->MasterLog();
  EXPECT_TRUE(Trial(*cluster, id).value("allocation_id", "").empty());
  std::string state;
  EXPECT_TRUE(PollUntil([&] { return SlurmJobEnded(state = SlurmJobState(running[0].id)); }, std::chrono::seconds(30)))
      << "Slurm job " << running[0].id << " is " << state << " after the pause";
  ASSERT_EQ(cluster->Cli({"experiment", "activate", std::to_string(id)}), 0);
  ASSERT_EQ(WaitUntilEnded(*cluster, id), "STATE_COMPLETED") << cluster->MasterLog();
  json t = Trial(*cluster, id);
  EXPECT_EQ(t.value("restarts", 0), 0);
  std::string logs = TrialLogs(*cluster, t.value("id", 0));
  EXPECT_THAT(logs, HasSubstr("resumed from checkpoint")) << logs;
  // Activated, it ran as a second job.
  std::vector<std::string> jobs = SubmittedJobIds(logs);
  ASSERT_EQ(jobs.size(), 2u) << logs;
  EXPECT_EQ(jobs[0], running[0].id);
  EXPECT_NE(jobs[1], jobs[0]);
  EXPECT_TRUE(PollUntil([&] { return (state = SlurmJobState(jobs[1])) == "COMPLETED"; }, std::chrono::seconds(30)))
      << "Slurm job " << jobs[1] << " is " << state;
}

// A job Slurm cannot place yet (another job holds every CPU of the node,
// however many it has) is QUEUED in det-cli job list; pausing it cancels it
// in Slurm at once (it has nothing to checkpoint); activated again, it runs
// once the node is free.
TEST_F(SlurmTest, AJobPendingInSlurmIsQueuedAndPausesAtOnce) {
  auto cluster = SlurmCluster();
  const int cpus = NodeCpus();
  ASSERT_GT(cpus, 0) << "sinfo -h -o %c names no CPU count";
  std::string out, err;
  ASSERT_EQ(RunProcess({"/usr/bin/sbatch", "--parsable", "--job-name=blocker", absl::StrCat("--ntasks=", cpus),
                        "--output=/dev/null", "--wrap", "sleep 300"},
                       &out, &err),
            0)
      << err;
  const std::string blocker = out.substr(0, out.find_first_of(";\n"));
  ScancelAtExit cancel_blocker(blocker);
  std::cout << "[ slurm    ] the node has " << cpus << " CPUs; the blocker (job " << blocker << ") takes them all\n";
  std::string blocker_state;
  ASSERT_TRUE(PollUntil([&] { return (blocker_state = SlurmJobState(blocker)) == "RUNNING"; }, std::chrono::seconds(30)))
      << "the blocker (" << cpus << " tasks) is " << blocker_state;
  int id = cluster->CreateExperiment(Yaml("pending", 1, dir_ / "checkpoints"), "pending");
  ASSERT_GT(id, 0);
  std::string queue, pending;
  // Pending for want of CPUs (reason Resources: the blocker holds them), not
  // only until the scheduler's next pass (reason None, briefly, on any node).
  ASSERT_TRUE(PollUntil(
      [&] {
        RunProcess({"/usr/bin/squeue", "-h", "-t", "PD", "-o", "%j|%r"}, &pending, &err);
        cluster->Cli({"job", "list"}, &queue);
        json q = cluster->Get("/api/v1/job-queue");
        return pending.find("det-trial-") != std::string::npos &&
               pending.find("|Resources") != std::string::npos && queue.find("QUEUED") != std::string::npos &&
               q.dump().find("ALLOCATION_STATE_PENDING") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << "pending in Slurm: " << pending << "\n" << queue << cluster->MasterLog();
  EXPECT_THAT(TrialLogs(*cluster, Trial(*cluster, id).value("id", 0)), HasSubstr("(PENDING"));
  ASSERT_EQ(cluster->Cli({"experiment", "pause", std::to_string(id)}), 0);
  ASSERT_TRUE(PollUntil([&] { return Trial(*cluster, id).value("state", "") == "STATE_PAUSED"; }, std::chrono::seconds(30)))
      << Trial(*cluster, id).dump() << cluster->MasterLog();
  // The pending job was cancelled in Slurm, never run.
  const std::vector<std::string> jobs = SubmittedJobIds(TrialLogs(*cluster, Trial(*cluster, id).value("id", 0)));
  ASSERT_EQ(jobs.size(), 1u);
  std::string state;
  EXPECT_TRUE(PollUntil([&] { return (state = SlurmJobState(jobs[0])) == "CANCELLED"; }, std::chrono::seconds(30)))
      << "Slurm job " << jobs[0] << " is " << state << " after the pause";
  ASSERT_EQ(cluster->Cli({"experiment", "activate", std::to_string(id)}), 0);
  RunProcess({"/usr/bin/scancel", blocker}, &out, &err);
  ASSERT_EQ(WaitUntilEnded(*cluster, id), "STATE_COMPLETED") << cluster->MasterLog();
  EXPECT_EQ(Trial(*cluster, id).value("restarts", 0), 0);
}

TEST_F(SlurmTest, KillNineOfARankRestartsTheTrialFromItsCheckpoint) {
  auto cluster = SlurmCluster();
  Extra extra;
  extra.batch_delay_ms = 60;
  extra.checkpoint_period = 20;
  extra.max_restarts = 1;
  extra.batches = 80;  // 3.6 s left after the checkpoint at batch 20: time to kill rank 1
  int id = cluster->CreateExperiment(Yaml("rank-kill", 2, dir_ / "checkpoints", extra), "rankkill");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(WaitForCheckpoint(*cluster, id)) << cluster->MasterLog();
  const std::string allocation = Trial(*cluster, id).value("allocation_id", "");
  pid_t rank1 = 0;
  ASSERT_TRUE(PollUntil([&] { return (rank1 = FindRankPid("det-" + allocation, 1)) > 0; }, std::chrono::seconds(30)))
      << allocation;
  // The allocation token is only in the job's 0600 job.json: in no rank's
  // argv or environment, which other users of the node could read.
  const fs::path job_dir = fs::path(dir_ / "jobs") / allocation;
  const std::string token = json::parse(ReadFile(job_dir / "job.json"), nullptr, false).value("token", "");
  ASSERT_EQ(token.size(), 32u);
  EXPECT_EQ(fs::status(job_dir / "job.json").permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(fs::status(job_dir).permissions() & (fs::perms::group_all | fs::perms::others_all), fs::perms::none);
  const fs::path proc = fs::path("/proc") / std::to_string(rank1);
  EXPECT_EQ(ReadFile(proc / "environ").find(token), std::string::npos);
  EXPECT_EQ(ReadFile(proc / "cmdline").find(token), std::string::npos);
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  ASSERT_EQ(WaitUntilEnded(*cluster, id), "STATE_COMPLETED") << cluster->MasterLog();
  json t = Trial(*cluster, id);
  EXPECT_EQ(t.value("restarts", 0), 1) << t.dump();
  std::string logs = TrialLogs(*cluster, t.value("id", 0));
  EXPECT_THAT(logs, HasSubstr("restart 1 of 1 from its latest checkpoint")) << logs;
  EXPECT_THAT(logs, HasSubstr("resumed from checkpoint")) << logs;
}

// A master kill -9 mid-trial: the Slurm job runs on while the master is
// down (its rank has noticed, and squeue still says RUNNING); the restarted
// master reattaches to that same job (no second job under the allocation's
// name), which completes the trial.
TEST_F(SlurmTest, AMasterKilledMidTrialReattachesToTheRunningJob) {
  auto cluster = SlurmCluster();
  Extra extra;
  extra.batch_delay_ms = 50;
  extra.checkpoint_period = 10;
  extra.batches = 60;
  int id = cluster->CreateExperiment(Yaml("reattach", 1, dir_ / "checkpoints", extra), "reattach");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(WaitForCheckpoint(*cluster, id)) << cluster->MasterLog();
  const std::string allocation = Trial(*cluster, id).value("allocation_id", "");
  const std::vector<SlurmJob> before = SlurmJobsOf(allocation);
  ASSERT_EQ(before.size(), 1u) << allocation;
  const std::string job = before[0].id;
  ScancelAtExit cancel(job);
  cluster->KillMaster();
  // Until the rank has found the master gone (it says so in the job's
  // output file) or the job has left RUNNING, whichever comes first.
  const fs::path job_out = fs::path(dir_ / "jobs") / allocation / ("slurm-" + job + ".out");
  std::string state;
  ASSERT_TRUE(PollUntil(
      [&] {
        state = SlurmJobState(job);
        return state != "RUNNING" || ReadFile(job_out).find("[det-trial] master unreachable") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << ReadFile(job_out);
  EXPECT_EQ(state, "RUNNING") << "Slurm job " << job << " while the master was down\n" << ReadFile(job_out);
  cluster->RestartMaster();
  ASSERT_EQ(WaitUntilEnded(*cluster, id), "STATE_COMPLETED") << cluster->MasterLog();
  json t = Trial(*cluster, id);
  EXPECT_EQ(t.value("restarts", 0), 0) << t.dump();
  // The same job ran to the end: one submission for the trial.
  EXPECT_THAT(allocation, HasSubstr(absl::StrCat("trial-", t.value("id", 0), ".")));
  std::string logs = TrialLogs(*cluster, t.value("id", 0));
  size_t submissions = 0;
  for (size_t pos = 0; (pos = logs.find("submitted as Slurm job", pos)) != std::string::npos; ++pos) ++submissions;
  EXPECT_EQ(submissions, 1u) << logs;
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("resumed from checkpoint"))) << logs;
  // In Slurm: that one job under the allocation's name, and it completed.
  std::vector<SlurmJob> after;
  EXPECT_TRUE(PollUntil(
      [&] {
        after = SlurmJobsOf(allocation);
        return after.size() != 1 || after[0].state == "COMPLETED";
      },
      std::chrono::seconds(30)));
  ASSERT_EQ(after.size(), 1u) << "jobs named det-" << allocation << ": " << after.size();
  EXPECT_EQ(after[0].id, job);
  EXPECT_EQ(after[0].state, "COMPLETED");
}

// det-trial's Slurm mode refuses what it cannot use with a clear error and
// exit code 2 (a config error the master does not retry): a missing or
// malformed job file, and a process not started by srun.
TEST(SlurmModeTest, BadJobFileOrNoSlurmEnvironmentIsAClearError) {
  TempDir dir;
  std::string out, err;
  const std::string trial = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";
  EXPECT_EQ(RunProcess({kBin + "/det-trial", "--managed", "--slurm-job-file", dir / "none.json", trial}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("none.json: cannot read it"));
  WriteFile(dir / "bad.json", "{\"master\": \"127.0.0.1:1\", \"allocation_id\": \"a\"}");
  EXPECT_EQ(RunProcess({kBin + "/det-trial", "--managed", "--slurm-job-file", dir / "bad.json", trial}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("field 'token' must be a non-empty string"));
  WriteFile(dir / "big.json", std::string(100 << 10, ' '));
  EXPECT_EQ(RunProcess({kBin + "/det-trial", "--managed", "--slurm-job-file", dir / "big.json", trial}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("larger than"));
  WriteFile(dir / "job.json", "{\"master\": \"127.0.0.1:1\", \"allocation_id\": \"a\", \"token\": \"t\"}");
  EXPECT_EQ(RunProcess({"/usr/bin/env", "-u", "SLURM_NTASKS", kBin + "/det-trial", "--managed", "--slurm-job-file",
                        dir / "job.json", trial},
                       &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("SLURM_NTASKS is not set"));
}

}  // namespace
}  // namespace det::testing
