// End to end (real det-master, det-agent, det-cli, the synthetic trial): the
// job queue of issue 16. One agent with one slot runs experiment A
// (priority 10); B then C (priority 50) queue behind it. `det-cli job list`
// shows A, B, C; `job update exp-C --ahead-of B` and `--priority 40` put C
// before B, in the list and in placement (C starts while B is QUEUED once
// A's trial ends). Bad values are INVALID_ARGUMENT naming the field, another
// user's job is PERMISSION_DENIED, a terminal one FAILED_PRECONDITION, and
// the changes survive a master kill -9. No preemption is involved: A stays
// the most urgent.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;

// One long trial (killed by the test), a checkpoint every 10 batches.
std::string LongConfig(const std::string& name, int priority, const std::string& checkpoint_dir) {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: 100
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 100000
min_validation_period:
  batches: 10
min_checkpoint_period:
  batches: 10
resources:
  priority: )", priority, R"(
checkpoint_storage:
  type: shared_fs
  save_trial_latest: 1
  host_path: )", checkpoint_dir, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
)");
}

struct QueueEntry {
  std::string job_id;
  std::string state;  // "JOB_STATE_QUEUED", ...
  int priority = 0;
  int position = -1;
  int max_slots = 0;
};

// `det-cli job list --json`, in the order listed.
std::vector<QueueEntry> JobList(TestCluster& cluster) {
  std::string out, err;
  std::vector<QueueEntry> jobs;
  if (cluster.Cli({"job", "list", "--json"}, &out, &err) != 0) {
    ADD_FAILURE() << "job list failed: " << err;
    return jobs;
  }
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (!j.is_object()) {
    ADD_FAILURE() << "job list --json printed no JSON: " << out;
    return jobs;
  }
  for (const auto& e : j.value("jobs", nlohmann::json::array())) {
    jobs.push_back({e.value("job_id", ""), e.value("state", ""), e.value("priority", 0),
                    e.value("queue_position", 0), e.value("max_slots", 0)});
  }
  return jobs;
}

std::vector<std::string> Order(const std::vector<QueueEntry>& jobs) {
  std::vector<std::string> ids;
  for (const auto& j : jobs) ids.push_back(j.job_id);
  return ids;
}

QueueEntry Find(const std::vector<QueueEntry>& jobs, const std::string& id) {
  for (const auto& j : jobs) {
    if (j.job_id == id) return j;
  }
  return {};
}

TEST(JobQueueTest, UpdateReordersTheQueueAndPlacementAndSurvivesARestart) {
  TempDir dir;
  TestCluster cluster(dir, TestClusterOptions().set_cli_timeout(3min));
  cluster.StartAgent("a1");  // one slot
  const int a = cluster.CreateExperiment(LongConfig("urgent", 10, dir / "checkpoints"), "a");
  ASSERT_GT(a, 0);
  const std::string ja = absl::StrCat("exp-", a);
  ASSERT_TRUE(PollUntil([&] { return Find(JobList(cluster), ja).state == "JOB_STATE_SCHEDULED"; }, 120s))
      << cluster.MasterLog();
  const int b = cluster.CreateExperiment(LongConfig("b", 50, dir / "checkpoints"), "b");
  const int c = cluster.CreateExperiment(LongConfig("c", 50, dir / "checkpoints"), "c");
  ASSERT_GT(b, 0);
  ASSERT_GT(c, 0);
  const std::string jb = absl::StrCat("exp-", b), jc = absl::StrCat("exp-", c);

  // A runs; B and C wait, in submission order.
  std::vector<QueueEntry> jobs = JobList(cluster);
  EXPECT_EQ(Order(jobs), std::vector<std::string>({ja, jb, jc}));
  EXPECT_EQ(Find(jobs, jb).state, "JOB_STATE_QUEUED");
  EXPECT_EQ(Find(jobs, jc).state, "JOB_STATE_QUEUED");
  EXPECT_EQ(Find(jobs, jc).position, 2);
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"job", "list"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("PRIORITY"), std::string::npos) << out;
  EXPECT_LT(out.find(jb), out.find(jc)) << out;

  // --ahead-of: C takes B's priority and the place before it.
  ASSERT_EQ(cluster.Cli({"job", "update", jc, "--ahead-of", std::to_string(b)}, &out, &err), 0) << err;
  EXPECT_NE(out.find("position 1"), std::string::npos) << out;
  EXPECT_EQ(Order(JobList(cluster)), std::vector<std::string>({ja, jc, jb}));
  // --behind puts it back; --priority 40 (through `experiment set`) then
  // puts it first among the waiting jobs.
  ASSERT_EQ(cluster.Cli({"job", "update", std::to_string(c), "--behind", jb}, &out, &err), 0) << err;
  EXPECT_EQ(Order(JobList(cluster)), std::vector<std::string>({ja, jb, jc}));
  ASSERT_EQ(cluster.Cli({"experiment", "set", "priority", std::to_string(c), "40"}, &out, &err), 0) << err;
  jobs = JobList(cluster);
  EXPECT_EQ(Order(jobs), std::vector<std::string>({ja, jc, jb}));
  EXPECT_EQ(Find(jobs, jc).priority, 40);
  EXPECT_EQ(Find(jobs, ja).state, "JOB_STATE_SCHEDULED") << "no preemption: A is more urgent";

  // max-slots is stored and shown (its enforcement is the scheduler's).
  ASSERT_EQ(cluster.Cli({"experiment", "set", "max-slots", std::to_string(c), "3"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"experiment", "describe", std::to_string(c)}, &out, &err), 0) << err;
  EXPECT_NE(out.find("priority 40, weight 1, max slots 3"), std::string::npos) << out;

  // Bad values: INVALID_ARGUMENT naming the field, nothing changed.
  for (const auto& [args, field] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"job", "update", jc, "--priority", "0"}, "priority"},
           {{"job", "update", jc, "--priority", "100"}, "priority"},
           {{"job", "update", jc, "--weight", "0"}, "weight"},
           {{"job", "update", jc, "--max-slots=-1"}, "max_slots"},
           {{"job", "update", jc, "--ahead-of", jc}, "ahead_of"},
           {{"job", "update", jc, "--behind", "exp-nope"}, "behind"},
           {{"experiment", "set", "weight", std::to_string(c), "0"}, "weight"},
       }) {
    EXPECT_EQ(cluster.Cli(args, &out, &err), 1) << args.back() << ": " << out;
    EXPECT_NE(err.find("INVALID_ARGUMENT"), std::string::npos) << err;
    EXPECT_NE(err.find(field), std::string::npos) << err;
  }
  EXPECT_EQ(cluster.Cli({"job", "update", "exp-999", "--priority", "5"}, &out, &err), 1);
  EXPECT_NE(err.find("NOT_FOUND"), std::string::npos) << err;
  EXPECT_EQ(cluster.Cli({"experiment", "set", "weight", std::to_string(c), "heavy"}, &out, &err), 2) << err;
  EXPECT_EQ(cluster.Cli({"job", "list", "--pool", "nowhere"}, &out, &err), 1);
  EXPECT_NE(err.find("NOT_FOUND"), std::string::npos) << err;
  EXPECT_EQ(Find(JobList(cluster), jc).priority, 40);

  // Another (non-admin) user may not change determined's job.
  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  auto created = cluster.Http("POST", "/api/v1/users", {{"Authorization", "Bearer " + admin}},
                              R"({"user": {"username": "mallory"}, "password": "mallory-pw-1"})");
  ASSERT_TRUE(created && created->status == 200);
  const std::string mallory = RestLogin(cluster.http_port(), "mallory", "mallory-pw-1");
  auto refused = cluster.Http("PATCH", "/api/v1/jobs/" + jc, {{"Authorization", "Bearer " + mallory}},
                              R"({"priority": 1})");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403) << refused->body;
  // ... but may read the queue; the owner changes it over REST too.
  auto seen = cluster.Http("GET", "/api/v1/job-queue", {{"Authorization", "Bearer " + mallory}});
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->status, 200) << seen->body;
  int status = 0;
  nlohmann::json patched = cluster.Send("PATCH", "/api/v1/jobs/" + jb, R"({"weight": 2})", &status);
  EXPECT_EQ(status, 200) << patched.dump();
  EXPECT_EQ(patched["job"].value("weight", 0.0), 2.0) << patched.dump();

  // The changes survive a master kill -9.
  cluster.KillMaster();
  cluster.RestartMaster();
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 60s)) << cluster.MasterLog();
  jobs = JobList(cluster);
  EXPECT_EQ(Order(jobs), std::vector<std::string>({ja, jc, jb}));
  EXPECT_EQ(Find(jobs, jc).priority, 40);
  EXPECT_EQ(Find(jobs, jc).max_slots, 3);
  nlohmann::json eb = cluster.Get(absl::StrCat("/api/v1/experiments/", b));
  EXPECT_EQ(eb["experiment"].value("weight", 0.0), 2.0) << eb.dump();

  // A's trial ends: C is placed, B still waits.
  ASSERT_EQ(cluster.Cli({"experiment", "kill", std::to_string(a)}, &out, &err), 0) << err;
  ASSERT_TRUE(PollUntil(
      [&] {
        jobs = JobList(cluster);
        return Find(jobs, jc).state == "JOB_STATE_SCHEDULED";
      },
      120s))
      << cluster.MasterLog();
  EXPECT_EQ(Find(jobs, jb).state, "JOB_STATE_QUEUED");
  const std::vector<std::string> order = Order(jobs);
  EXPECT_LT(std::find(order.begin(), order.end(), jc), std::find(order.begin(), order.end(), jb));
  ASSERT_TRUE(cluster.WaitForState(a, "STATE_CANCELED", 60s));
  EXPECT_EQ(Order(JobList(cluster)), std::vector<std::string>({jc, jb})) << "A ended: no job";

  // A finished job can no longer be changed.
  EXPECT_EQ(cluster.Cli({"job", "update", ja, "--priority", "5"}, &out, &err), 1);
  EXPECT_NE(err.find("FAILED_PRECONDITION"), std::string::npos) << err;
  EXPECT_EQ(cluster.Cli({"job", "update", jb, "--ahead-of", ja}, &out, &err), 1);
  EXPECT_NE(err.find("FAILED_PRECONDITION"), std::string::npos) << err;

  ASSERT_EQ(cluster.Cli({"experiment", "kill", std::to_string(b)}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"experiment", "kill", std::to_string(c)}, &out, &err), 0) << err;
}

}  // namespace
}  // namespace det::testing
