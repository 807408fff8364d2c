// End-to-end tests of resource pools and agent and slot control (issue 16,
// must-show 2) on real det-master, det-agent and det-trial processes running
// the synthetic example: `det-cli agent disable` moves a trial to another
// agent from its checkpoint; `--drain` lets it finish and places nothing new
// there; enable restores placement; the state survives a master kill -9;
// slots; pools from --resource-pools (unknown pools, agents of undeclared
// pools, a pool's max_slots); who may do what; unknown ids.
#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";
constexpr auto kLong = std::chrono::seconds(120);

int64_t Int(const json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());  // int64 in protobuf's JSON mapping
  if (v.is_number()) return v.get<int64_t>();
  return 0;
}

// A synthetic experiment: `trials` trials (random search, all at once) of
// `batches` batches, `delay_ms` per batch, a checkpoint every 20 batches.
std::string Yaml(const std::string& checkpoint_dir, int batches, int delay_ms, int trials = 1,
                 const std::string& extra = "") {
  std::string searcher =
      trials == 1 ? "  name: single\n"
                  : absl::StrCat("  name: random\n  max_trials: ", trials, "\n  max_concurrent_trials: ", trials, "\n");
  return absl::StrCat("name: agent-control\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n",
                      "  hidden_size: 16\n  dropout: 0.1\n  batch_delay_ms: ", delay_ms, "\nsearcher:\n", searcher,
                      "  metric: validation_loss\n  smaller_is_better: true\n  max_length:\n    batches: ", batches,
                      "\nmin_validation_period:\n  batches: ", batches,
                      "\nmin_checkpoint_period:\n  batches: 20\nscheduling_unit: 10\n"
                      "checkpoint_storage:\n  type: shared_fs\n  host_path: ",
                      checkpoint_dir,
                      "\nreproducibility:\n  experiment_seed: 7\n"
                      "environment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
                      "data:\n  train_size: 256\n  val_size: 64\n",
                      extra);
}

class Cluster : public TestCluster {
 public:
  explicit Cluster(const TempDir& dir, std::vector<std::string> master_flags = {})
      : TestCluster(dir, TestClusterOptions().add_master_flags(master_flags)) {}

  int Create(int batches, int delay_ms, const std::string& name, int trials = 1, const std::string& extra = "") {
    return CreateExperiment(Yaml(dir() / "checkpoints", batches, delay_ms, trials, extra), name, kSynthetic);
  }
  // The experiment's only trial (null when none yet).
  json Trial(int experiment_id) {
    auto t = Trials(experiment_id);
    return t.size() == 1 ? t[0] : json();
  }
  // The agent running experiment `id`'s only trial ("" when none).
  std::string AgentOf(int experiment_id) {
    json t = Trial(experiment_id);
    return t.is_object() ? AgentRunning(t.value("allocation_id", "")) : "";
  }
  // Polls until experiment `id` is COMPLETED, recording every agent seen
  // running its trial into `seen`.
  bool WaitCompleted(int id, std::set<std::string>* seen) {
    return PollUntil(
        [&] {
          std::string a = AgentOf(id);
          if (!a.empty()) seen->insert(a);
          return ExperimentState(id) == "STATE_COMPLETED";
        },
        kLong);
  }
  std::string TrialLogs(int trial_id) {
    std::string out;
    Cli({"trial", "logs", std::to_string(trial_id)}, &out);
    return out;
  }
  // Logs det-cli in as `admin` (empty password): its later runs are admin's.
  bool LoginAdmin() {
    std::string err;
    return Cli({"user", "login", "admin", "--password-stdin"}, nullptr, &err, "\n") == 0;
  }
};

// Must show 2: disable moves a trial to the other agent from its
// checkpoint; --drain lets a running trial finish and places nothing new
// there; enable restores placement; slots; the state persists over a
// master kill -9.
TEST(AgentControlTest, DisableDrainEnableAndPersistence) {
  TempDir dir;
  Cluster cluster(dir, {"--heartbeat-timeout-ms", "5000"});
  cluster.StartAgent("a");
  cluster.StartAgent("b");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 2; }, std::chrono::seconds(30)));
  ASSERT_TRUE(cluster.LoginAdmin());
  std::string out, err;

  // 1. Disable (no drain): the trial checkpoints and moves on.
  int moved = cluster.Create(100, 30, "moved");
  ASSERT_GT(moved, 0);
  std::string victim;
  ASSERT_TRUE(PollUntil(
      [&] {
        json t = cluster.Trial(moved);
        victim = cluster.AgentOf(moved);
        return !victim.empty() && !t.value("latest_checkpoint_uuid", "").empty() &&
               Int(t.value("total_batches_processed", json(0))) >= 25;
      },
      kLong))
      << cluster.Trials(moved).dump();
  const std::string survivor = victim == "a" ? "b" : "a";
  ASSERT_EQ(cluster.Cli({"agent", "disable", victim}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("Disabled agent " + victim));
  std::set<std::string> seen;
  ASSERT_TRUE(cluster.WaitCompleted(moved, &seen)) << cluster.MasterLog();
  EXPECT_TRUE(seen.count(survivor)) << "the trial moved to " << survivor;
  json t = cluster.Trial(moved);
  EXPECT_EQ(t.value("restarts", 0), 0) << "a preemption is not a restart: " << t.dump();
  const std::string logs = cluster.TrialLogs(Int(t["id"]));
  EXPECT_THAT(logs, HasSubstr("agent " + victim + " disabled"));
  // It resumed from the checkpoint taken when it was preempted, not from 0.
  auto resumed = logs.find("resumed from checkpoint");
  ASSERT_NE(resumed, std::string::npos) << logs;
  auto at = logs.find("at batch ", resumed);
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stoll(logs.substr(at + 9)), 25) << logs.substr(resumed, 200);
  ASSERT_EQ(cluster.Cli({"agent", "describe", victim}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("disabled"));
  ASSERT_EQ(cluster.Cli({"agent", "enable", victim}, &out, &err), 0) << err;

  // 2. Drain: the running trial finishes where it is; nothing new goes there.
  int drained = cluster.Create(100, 30, "drained");
  ASSERT_GT(drained, 0);
  std::string host;
  ASSERT_TRUE(PollUntil([&] { return !(host = cluster.AgentOf(drained)).empty(); }, kLong));
  const std::string other = host == "a" ? "b" : "a";
  ASSERT_EQ(cluster.Cli({"agent", "disable", host, "--drain"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("draining"));
  int busy = cluster.Create(400, 30, "busy");  // occupies `other` for a while
  ASSERT_GT(busy, 0);
  seen.clear();
  ASSERT_TRUE(cluster.WaitCompleted(drained, &seen)) << cluster.MasterLog();
  EXPECT_EQ(seen, std::set<std::string>{host}) << "a draining agent keeps its trial";
  EXPECT_THAT(cluster.TrialLogs(Int(cluster.Trial(drained)["id"])), Not(HasSubstr("resumed from checkpoint")));
  // `host` is idle now but draining: a new trial waits for `other`
  // (creating an experiment schedules at once).
  ASSERT_TRUE(PollUntil([&] { return cluster.AgentOf(busy) == other; }, kLong)) << cluster.Trials(busy).dump();
  int waits = cluster.Create(400, 30, "waits");
  ASSERT_GT(waits, 0);
  EXPECT_EQ(cluster.Trial(waits).value("allocation_id", ""), "") << cluster.Trials(waits).dump();
  EXPECT_EQ(cluster.AgentOf(waits), "");
  ASSERT_EQ(cluster.Cli({"resource-pool", "list"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("default"));
  // 3. Enable restores placement: `waits` goes to `host` while `other` is busy.
  ASSERT_EQ(cluster.Cli({"agent", "enable", host}, &out, &err), 0) << err;
  seen.clear();
  ASSERT_TRUE(cluster.WaitCompleted(waits, &seen)) << cluster.MasterLog();
  EXPECT_TRUE(seen.count(host)) << "placed on the enabled agent while the other was busy";
  ASSERT_TRUE(cluster.WaitForState(busy, "STATE_COMPLETED", kLong));

  // 4. Slots and persistence: agent `host` disabled, slot 0 of `other`
  // disabled with drain; both survive a master kill -9.
  ASSERT_EQ(cluster.Cli({"agent", "disable", host}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"slot", "disable", other, "0", "--drain"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("Disabled slot " + other + "/0"));
  cluster.KillMaster();
  cluster.RestartMaster();
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 2; }, std::chrono::seconds(60)))
      << cluster.MasterLog();
  json got = cluster.Get("/api/v1/agents/" + host);
  EXPECT_FALSE(got["agent"].value("enabled", true)) << got.dump();
  got = cluster.Get("/api/v1/agents/" + other);
  EXPECT_TRUE(got["agent"].value("enabled", false)) << got.dump();
  ASSERT_EQ(got["agent"]["slots"].size(), 1u);
  EXPECT_FALSE(got["agent"]["slots"][0].value("enabled", true)) << got.dump();
  EXPECT_TRUE(got["agent"]["slots"][0].value("draining", false)) << got.dump();
  // Nowhere to go: it waits in the queue...
  int queued = cluster.Create(50, 10, "queued");
  ASSERT_GT(queued, 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        json pools = cluster.Get("/api/v1/resource-pools");
        return pools["resource_pools"].size() == 1 &&
               pools["resource_pools"][0].value("num_pending_allocations", 0) == 1;
      },
      std::chrono::seconds(30)))
      << cluster.Get("/api/v1/resource-pools").dump();
  EXPECT_EQ(cluster.BusySlots(), 0);
  // ...until the slot is enabled again.
  ASSERT_EQ(cluster.Cli({"slot", "enable", other, "0"}, &out, &err), 0) << err;
  seen.clear();
  ASSERT_TRUE(cluster.WaitCompleted(queued, &seen)) << cluster.MasterLog();
  EXPECT_EQ(seen, std::set<std::string>{other});
}

// Pools from --resource-pools: an experiment naming an unknown pool is
// INVALID_ARGUMENT naming resources.resource_pool; one naming none goes to
// the default compute pool; an agent naming an undeclared pool is refused;
// a pool's max_slots caps the slots in use. Who may do what; unknown ids.
TEST(AgentControlTest, PoolsPermissionsAndUnknownIds) {
  TempDir dir;
  const std::string pools = dir / "pools.yaml";
  std::ofstream(pools) << "resource_pools:\n"
                          "  - pool_name: small\n    description: capped at one slot\n    max_slots: 1\n"
                          "  - pool_name: spare\n"
                          "default_compute_resource_pool: small\n";
  Cluster cluster(dir, {"--resource-pools", pools});
  cluster.StartAgent("two", AgentOptions().set_slots(2).add_flags({"--resource-pool", "small"}));
  Subprocess& stray = cluster.StartAgent("stray", AgentOptions().add_flags({"--resource-pool", "nope"}));
  EXPECT_NE(stray.Wait(std::chrono::seconds(30)), 0);
  EXPECT_THAT(stray.Stdout() + stray.Stderr(), HasSubstr("resource pool 'nope' is not declared"));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));

  // An unknown pool; a bad pools file stops the master at start.
  std::string out, err;
  const std::string bad = dir / "bad.yaml";
  std::ofstream(bad) << Yaml(dir / "checkpoints", 10, 0, 1, "resources:\n  resource_pool: tpu\n");
  EXPECT_EQ(cluster.Cli({"experiment", "create", bad, kSynthetic}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("resources.resource_pool"));
  EXPECT_THAT(err, HasSubstr("INVALID_ARGUMENT"));
  const std::string bad_pools = dir / "bad-pools.yaml";
  std::ofstream(bad_pools) << "resource_pools:\n  - pool_name: a\n    max_slot: 1\n";
  std::string master_out, master_err;
  EXPECT_EQ(RunProcess({std::string(DET_BIN_DIR) + "/det-master", "--data-dir", dir / "other-master",
                        "--resource-pools", bad_pools, "--grpc-port", "0", "--http-port", "0"},
                       &master_out, &master_err, std::chrono::seconds(30)),
            2);
  EXPECT_THAT(master_err, HasSubstr(bad_pools + ":3: unknown field 'resource_pools[0].max_slot'"));

  // No pool named: the default compute pool "small" (one slot at a time of
  // the agent's two).
  int capped = cluster.Create(60, 20, "capped", /*trials=*/2);
  ASSERT_GT(capped, 0);
  json exp = cluster.Get(absl::StrCat("/api/v1/experiments/", capped));
  EXPECT_EQ(exp["experiment"].value("resource_pool", ""), "small") << exp.dump();
  int most = 0;
  bool queued_seen = false;
  ASSERT_TRUE(PollUntil(
      [&] {
        most = std::max(most, cluster.BusySlots());
        json p = cluster.Get("/api/v1/resource-pools");
        if (p["resource_pools"].size() == 2 && p["resource_pools"][0].value("num_pending_allocations", 0) == 1 &&
            p["resource_pools"][0].value("slots_used", 0) == 1) {
          queued_seen = true;
        }
        return cluster.ExperimentState(capped) == "STATE_COMPLETED";
      },
      kLong))
      << cluster.MasterLog();
  EXPECT_EQ(most, 1) << "pool max_slots 1";
  EXPECT_TRUE(queued_seen);
  ASSERT_EQ(cluster.Cli({"resource-pool", "list"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("capped at one slot"));
  EXPECT_THAT(out, HasSubstr("spare"));

  // Who may: `determined` (not an admin) reads agents but cannot change them.
  int status = 0;
  cluster.Get("/api/v1/agents/two", &status);
  EXPECT_EQ(status, 200);
  json denied = cluster.Send("POST", "/api/v1/agents/two/disable", "{}", &status);
  EXPECT_EQ(status, 403) << denied.dump();
  EXPECT_EQ(denied.value("error", ""), "PERMISSION_DENIED");
  cluster.Send("POST", "/api/v1/agents/two/slots/0/disable", "{\"drain\": true}", &status);
  EXPECT_EQ(status, 403);
  EXPECT_EQ(cluster.Cli({"agent", "disable", "two"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_TRUE(cluster.Get("/api/v1/agents/two")["agent"].value("enabled", false));

  // Unknown ids are NOT_FOUND naming them.
  EXPECT_EQ(cluster.Cli({"agent", "describe", "nosuch"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("agent 'nosuch' not found"));
  EXPECT_THAT(err, HasSubstr("NOT_FOUND"));
  ASSERT_TRUE(cluster.LoginAdmin());
  EXPECT_EQ(cluster.Cli({"agent", "enable", "nosuch"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("agent 'nosuch' not found"));
  EXPECT_EQ(cluster.Cli({"slot", "disable", "two", "7"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("slot '7' of agent 'two' not found"));
  EXPECT_THAT(err, HasSubstr("NOT_FOUND"));
  EXPECT_EQ(cluster.Cli({"slot", "enable", "two", "x/../0"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("NOT_FOUND"));
  ASSERT_EQ(cluster.Cli({"slot", "disable", "two", "two/1"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"agent", "describe", "two"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("two/1"));
  EXPECT_THAT(out, HasSubstr("disabled"));
}

}  // namespace
}  // namespace det::testing
