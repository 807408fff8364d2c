// End-to-end tests of a trial's life beyond the happy path, on real det-master,
// det-agent and det-trial processes running the synthetic example: pause and
// activate, crashes and max_restarts, master and agent kill -9 and recovery,
// the stop timeout, and checkpoint GC.
#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "master/store/store.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";
constexpr auto kLong = std::chrono::seconds(120);

// A small synthetic experiment; every field a test varies is here.
struct Config {
  std::string searcher = "single";
  int max_trials = 1;
  int max_concurrent_trials = 0;
  int max_length = 60;
  int validation_period = 30;
  int checkpoint_period = 0;  // 0: none (only at the end, or on pause)
  int scheduling_unit = 10;
  int batch_delay_ms = 10;
  int max_restarts = -1;  // -1: the default (5)
  std::string gc;         // extra checkpoint_storage lines
  int seed = 11;

  std::string Yaml(const std::string& checkpoint_dir) const {
    std::string hp = searcher == "single" ? "  learning_rate: 0.01\n  hidden_size: 16\n"
                                          : "  learning_rate:\n    type: log\n    minval: -3\n    maxval: -1\n"
                                            "  hidden_size:\n    type: categorical\n    vals: [16, 32]\n";
    std::string out = absl::StrCat("name: lifecycle\nhyperparameters:\n  global_batch_size: 16\n", hp,
                                   "  dropout: 0.1\n  batch_delay_ms: ", batch_delay_ms,
                                   "\nsearcher:\n  name: ", searcher,
                                   "\n  metric: validation_loss\n  smaller_is_better: true\n");
    if (searcher != "single") {
      absl::StrAppend(&out, "  max_trials: ", max_trials, "\n");
      if (max_concurrent_trials > 0) absl::StrAppend(&out, "  max_concurrent_trials: ", max_concurrent_trials, "\n");
    }
    absl::StrAppend(&out, "  max_length:\n    batches: ", max_length, "\nmin_validation_period:\n  batches: ",
                    validation_period, "\n");
    if (checkpoint_period > 0) absl::StrAppend(&out, "min_checkpoint_period:\n  batches: ", checkpoint_period, "\n");
    if (max_restarts >= 0) absl::StrAppend(&out, "max_restarts: ", max_restarts, "\n");
    absl::StrAppend(&out, "scheduling_unit: ", scheduling_unit,
                    "\ncheckpoint_storage:\n  type: shared_fs\n  host_path: ", checkpoint_dir, "\n", gc,
                    "reproducibility:\n  experiment_seed: ", seed,
                    // One torch thread: the same result in every process.
                    "\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
                    "data:\n  train_size: 256\n  val_size: 64\n");
    return out;
  }
};

int64_t Int(const json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());  // int64 in protobuf's JSON mapping
  if (v.is_number()) return v.get<int64_t>();
  return 0;
}

// A master and agents for one test (the master can be killed and restarted
// on the same data dir and gRPC port), with this file's experiments.
class Cluster : public TestCluster {
 public:
  explicit Cluster(const TempDir& dir, std::vector<std::string> master_flags = {})
      : TestCluster(dir, TestClusterOptions().add_master_flags(master_flags)) {}

  // An agent with `slots` CPU slots.
  Subprocess& StartAgent(const std::string& id, int slots = 1) {
    return TestCluster::StartAgent(id, AgentOptions().set_slots(slots));
  }
  // Starts one-slot agents `ids`; true once all are connected (within 30 s).
  bool StartConnectedAgents(const std::vector<std::string>& ids) {
    for (const auto& id : ids) StartAgent(id);
    return PollUntil([&] { return ConnectedAgents() == static_cast<int>(ids.size()); }, std::chrono::seconds(30));
  }
  // Creates an experiment from `config`; returns its id (0 on failure).
  int Create(const Config& config, const std::string& name) {
    return CreateExperiment(config.Yaml(dir() / "checkpoints"), name, kSynthetic);
  }
  bool WaitForState(int id, const std::string& state, std::chrono::milliseconds timeout = kLong) {
    return TestCluster::WaitForState(id, state, timeout);
  }
};

// A random search of 4 trials, 2 at a time, with a checkpoint every 20
// batches.
Config RandomSearch(int max_length, int validation_period, int batch_delay_ms) {
  Config config;
  config.searcher = "random";
  config.max_trials = 4;
  config.max_concurrent_trials = 2;
  config.max_length = max_length;
  config.validation_period = validation_period;
  config.checkpoint_period = 20;
  config.batch_delay_ms = batch_delay_ms;
  return config;
}

// The det-trial process of `allocation_id` (found by its environment), or 0.
pid_t FindTrialPid(const std::string& allocation_id) {
  const std::string needle = "DET_ALLOCATION_ID=" + allocation_id;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::string env = ReadFile(entry.path() / "environ");
    size_t pos = 0;
    while (pos < env.size()) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      if (env.compare(pos, end - pos, needle) == 0) return static_cast<pid_t>(std::stoi(name));
      pos = end + 1;
    }
  }
  return 0;
}

int64_t TotalBatches(const json& trial) { return Int(trial.value("total_batches_processed", json(0))); }

// The invariants of a trial's stored state at any moment, read straight from
// SQLite (e.g. right after the master was killed): non-archived metrics have
// no duplicate and no gap, and every batch up to the latest checkpoint has
// its training row (multiples of the scheduling unit) and validation rows.
void CheckTrialRows(master::Store& store, const master::TrialRow& trial, const Config& config, bool final) {
  SCOPED_TRACE(absl::StrCat("trial ", trial.id));
  int64_t checkpointed = 0;
  if (!trial.latest_checkpoint_uuid.empty()) {
    auto ck = store.GetCheckpoint(trial.latest_checkpoint_uuid);
    ASSERT_TRUE(ck.ok()) << ck.status();
    checkpointed = ck->total_batches;
  }
  for (const char* group : {"training", "validation"}) {
    auto rows = store.ListMetrics(trial.id, group, /*include_archived=*/false);
    ASSERT_TRUE(rows.ok()) << rows.status();
    const int64_t step = std::string(group) == "training" ? config.scheduling_unit : config.validation_period;
    std::vector<int64_t> got;
    for (const auto& r : *rows) got.push_back(r.total_batches);
    // Consecutive multiples of the period, each once...
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], static_cast<int64_t>(i + 1) * step) << group << " rows: " << ::testing::PrintToString(got);
    }
    // ...reaching at least the latest checkpoint, and the end when done.
    int64_t reached = got.empty() ? 0 : got.back();
    EXPECT_GE(reached, checkpointed / step * step) << group << " rows lost before checkpoint " << checkpointed;
    if (final) {
      EXPECT_EQ(reached, config.max_length) << group;
    }
  }
}

// No trial lost or duplicated: the experiment has at most `max_trials`
// trials, with distinct request ids 1..n; their rows satisfy CheckTrialRows.
void CheckStore(const std::string& db, int experiment_id, const Config& config, bool final) {
  auto store = master::Store::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::Status integrity = (*store)->IntegrityCheck();
  EXPECT_TRUE(integrity.ok()) << integrity;
  auto trials = (*store)->ListTrials(experiment_id);
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_FALSE(trials->empty()) << "experiment " << experiment_id << " has no trial in " << db;
  EXPECT_LE(trials->size(), static_cast<size_t>(config.max_trials));
  if (final) {
    EXPECT_EQ(trials->size(), static_cast<size_t>(config.max_trials));
  }
  std::set<int64_t> requests;
  for (const auto& t : *trials) {
    EXPECT_TRUE(requests.insert(t.request_id).second) << "request " << t.request_id << " has two trials";
    if (final) {
      EXPECT_EQ(t.state, "COMPLETED") << "trial " << t.id;
      EXPECT_EQ(t.restarts, 0) << "trial " << t.id << ": an outage is not the trial's failure";
    }
    CheckTrialRows(**store, t, config, final);
  }
  EXPECT_EQ(*requests.begin(), 1);
  EXPECT_EQ(*requests.rbegin(), static_cast<int64_t>(requests.size()));
}

// The validation (and training) metrics of each trial of `a`, by request id,
// equal those of `b` exactly.
void ExpectSameMetrics(Cluster& cluster, int a, int b) {
  auto ta = cluster.Trials(a);
  auto tb = cluster.Trials(b);
  ASSERT_EQ(ta.size(), tb.size());
  std::map<int, json> by_request;
  for (const auto& t : tb) by_request[t.value("request_id", 0)] = t;
  for (const auto& t : ta) {
    const json& other = by_request[t.value("request_id", 0)];
    ASSERT_TRUE(other.is_object());
    EXPECT_EQ(t["hparams"], other["hparams"]);
    EXPECT_EQ(t["seed"], other["seed"]);
    for (const char* group : {"validation", "training"}) {
      auto ma = cluster.Metrics(t["id"].get<int>(), group);
      auto mb = cluster.Metrics(other["id"].get<int>(), group);
      ASSERT_EQ(ma.size(), mb.size()) << group;
      ASSERT_FALSE(ma.empty()) << group;
      for (size_t i = 0; i < ma.size(); ++i) {
        EXPECT_EQ(ma[i]["total_batches"], mb[i]["total_batches"]) << group;
        // Doubles in protobuf's JSON round-trip exactly: this is bitwise equality.
        EXPECT_EQ(ma[i]["metrics"], mb[i]["metrics"]) << group << " at batch " << ma[i]["total_batches"];
      }
    }
  }
}

// Must show 1: pausing a running two-trial experiment checkpoints both trials,
// frees their slots and leaves them PAUSED; activating resumes them from their
// checkpoints, and every metric equals an uninterrupted run of the same seed.
TEST(LifecycleTest, PauseAndActivateMatchesAnUninterruptedRun) {
  TempDir dir;
  Cluster cluster(dir);
  cluster.StartAgent("a", 2);
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  Config config;
  config.searcher = "random";
  config.max_trials = 2;
  config.max_length = 100;
  config.validation_period = 25;
  config.batch_delay_ms = 15;

  int paused = cluster.Create(config, "paused");
  ASSERT_GT(paused, 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(paused);
        if (trials.size() != 2) return false;
        for (const auto& t : trials) {
          if (TotalBatches(t) < 20) return false;
        }
        return true;
      },
      kLong))
      << cluster.Trials(paused).dump();
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"experiment", "pause", std::to_string(paused)}, &out, &err), 0) << err;

  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(paused);
        for (const auto& t : trials) {
          if (t.value("state", "") != "STATE_PAUSED") return false;
        }
        return trials.size() == 2 && cluster.BusySlots() == 0;
      },
      std::chrono::seconds(60)))
      << cluster.Trials(paused).dump() << cluster.Get("/api/v1/slots").dump();
  EXPECT_EQ(cluster.ExperimentState(paused), "STATE_PAUSED");
  const json paused_trials = cluster.Trials(paused);
  ASSERT_EQ(paused_trials.size(), 2u) << paused_trials.dump();
  for (const auto& t : paused_trials) {
    std::string uuid = t.value("latest_checkpoint_uuid", "");
    ASSERT_FALSE(uuid.empty()) << t.dump();
    auto ck = cluster.Get("/api/v1/checkpoints/" + uuid);
    int64_t at = Int(ck["checkpoint"]["total_batches"]);
    EXPECT_GE(at, 20) << ck.dump();
    EXPECT_LT(at, config.max_length) << ck.dump();
    std::string runner = t.value("runner_state", "");
    EXPECT_TRUE(runner.empty() || runner == "ALLOCATION_STATE_UNSPECIFIED") << "no allocation while paused: " << t.dump();
    EXPECT_EQ(t.value("allocation_id", ""), "") << t.dump();
  }

  int status = 0;
  cluster.Send("POST", absl::StrCat("/api/v1/experiments/", paused, "/activate"), "{}", &status);
  EXPECT_EQ(status, 200);
  ASSERT_TRUE(cluster.WaitForState(paused, "STATE_COMPLETED")) << cluster.Trials(paused).dump() << cluster.MasterLog();
  const json resumed = cluster.Trials(paused);
  ASSERT_EQ(resumed.size(), 2u) << resumed.dump();
  for (const auto& t : resumed) {
    EXPECT_EQ(t.value("state", ""), "STATE_COMPLETED");
    EXPECT_EQ(t.value("restarts", 0), 0) << "a pause is not a restart";
  }

  int straight = cluster.Create(config, "straight");
  ASSERT_GT(straight, 0);
  ASSERT_TRUE(cluster.WaitForState(straight, "STATE_COMPLETED")) << cluster.MasterLog();
  ExpectSameMetrics(cluster, paused, straight);
}

// Must show 2: kill -9 of a trial process restarts it from its checkpoint and
// it completes with the same metrics as an uninterrupted run; with
// max_restarts 0 it is ERROR, and `det-cli trial logs` shows why.
TEST(LifecycleTest, KilledTrialRestartsFromItsCheckpointOrErrorsPastMaxRestarts) {
  TempDir dir;
  Cluster cluster(dir);
  cluster.StartAgent("a", 2);
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  Config config;
  config.max_length = 100;
  config.validation_period = 50;
  config.checkpoint_period = 20;
  config.batch_delay_ms = 15;

  int crashed = cluster.Create(config, "crashed");
  int reference = cluster.Create(config, "reference");
  ASSERT_GT(crashed, 0);
  ASSERT_GT(reference, 0);
  json trial;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(crashed);
        if (trials.size() != 1) return false;
        trial = trials[0];
        return !trial.value("latest_checkpoint_uuid", "").empty() && TotalBatches(trial) >= 30 &&
               FindTrialPid(trial.value("allocation_id", "")) > 0;
      },
      kLong))
      << cluster.Trials(crashed).dump();
  pid_t pid = FindTrialPid(trial["allocation_id"]);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  ASSERT_TRUE(cluster.WaitForState(crashed, "STATE_COMPLETED")) << cluster.Trials(crashed).dump() << cluster.MasterLog();
  auto after = cluster.Trials(crashed)[0];
  EXPECT_EQ(after.value("restarts", 0), 1) << after.dump();
  EXPECT_NE(after.value("allocation_id", ""), trial.value("allocation_id", ""));
  ASSERT_TRUE(cluster.WaitForState(reference, "STATE_COMPLETED"));
  // Resumed from its checkpoint, it trained exactly what an uninterrupted
  // run did; what the killed run reported after its checkpoint is archived.
  ExpectSameMetrics(cluster, crashed, reference);
  // (Whether any row is archived depends on how far the killed run got past
  // its checkpoint; every row is checked.)
  auto all = cluster.Get(absl::StrCat("/api/v1/trials/", after["id"].get<int>(),
                                      "/metrics?group=training&include_archived=true"));
  ASSERT_TRUE(all["metrics"].is_array()) << all.dump();
  ASSERT_FALSE(all["metrics"].empty()) << all.dump();
  for (const auto& m : all["metrics"]) {
    EXPECT_TRUE(!m.value("archived", false) || m.value("trial_run_id", 0) == 1) << "archived, not run 1: " << m.dump();
  }
  std::string logs, err;
  ASSERT_EQ(cluster.Cli({"trial", "logs", std::to_string(after["id"].get<int>())}, &logs, &err), 0) << err;
  EXPECT_THAT(logs, HasSubstr("killed by signal 9"));
  EXPECT_THAT(logs, HasSubstr("restart 1 of 5"));
  EXPECT_THAT(logs, HasSubstr("resumed from checkpoint"));

  // max_restarts 0: the first crash is final.
  config.max_restarts = 0;
  config.batch_delay_ms = 50;
  int fragile = cluster.Create(config, "fragile");
  ASSERT_GT(fragile, 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(fragile);
        if (trials.size() != 1) return false;
        trial = trials[0];
        return TotalBatches(trial) >= 10 && FindTrialPid(trial.value("allocation_id", "")) > 0;
      },
      kLong));
  pid = FindTrialPid(trial["allocation_id"]);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(cluster.WaitForState(fragile, "STATE_ERROR")) << cluster.Trials(fragile).dump() << cluster.MasterLog();
  auto failed = cluster.Trials(fragile)[0];
  EXPECT_EQ(failed.value("state", ""), "STATE_ERROR");
  EXPECT_EQ(failed.value("restarts", 0), 0) << failed.dump();
  EXPECT_THAT(failed.value("error_message", ""), HasSubstr("killed by signal 9"));
  ASSERT_EQ(cluster.Cli({"trial", "logs", std::to_string(failed["id"].get<int>())}, &logs, &err), 0) << err;
  EXPECT_THAT(logs, HasSubstr("[det-trial] trial "));  // the run's own output
  EXPECT_THAT(logs, HasSubstr("killed by signal 9"));
  EXPECT_THAT(logs, HasSubstr("0 restart(s) used of max_restarts 0: ERROR"));
  EXPECT_EQ(cluster.BusySlots(), 0);
}

// Must show 3a: kill -9 of the master mid-experiment, then a restart on the
// same data dir: the running trials are reattached, and the experiment
// completes with no trial lost or duplicated and no metric row lost.
TEST(LifecycleTest, MasterKilledMidExperimentRecoversFromSqlite) {
  TempDir dir;
  Cluster cluster(dir);
  ASSERT_TRUE(cluster.StartConnectedAgents({"a", "b"}));
  // Trials long enough (>= 60 batches of 50 ms left at the kill) to still be
  // running when the agents re-register with the restarted master.
  const Config config = RandomSearch(/*max_length=*/90, /*validation_period=*/30, /*batch_delay_ms=*/50);
  int exp = cluster.Create(config, "random");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        for (const auto& t : cluster.Trials(exp)) {
          if (!t.value("latest_checkpoint_uuid", "").empty() && TotalBatches(t) >= 30) return true;
        }
        return false;
      },
      kLong));

  cluster.KillMaster();
  CheckStore(cluster.db_path(), exp, config, /*final=*/false);
  cluster.RestartMaster();
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED")) << cluster.Trials(exp).dump() << cluster.MasterLog();
  EXPECT_EQ(cluster.ConnectedAgents(), 2);
  EXPECT_THAT(cluster.MasterLog(), HasSubstr("reattached allocation")) << cluster.AgentLogs();
  CheckStore(cluster.db_path(), exp, config, /*final=*/true);
}

// Must show 3b: kill -9 of one of two agents: after the heartbeat timeout its
// trial resumes on the other agent from its checkpoint and completes.
TEST(LifecycleTest, AgentKilledItsTrialMovesToTheOtherAgent) {
  TempDir dir;
  Cluster cluster(dir, {"--heartbeat-timeout-ms", "3000"});
  ASSERT_TRUE(cluster.StartConnectedAgents({"a", "b"}));
  Config config;
  config.max_length = 100;
  config.validation_period = 50;
  config.checkpoint_period = 20;
  config.batch_delay_ms = 15;
  int exp = cluster.Create(config, "single");
  ASSERT_GT(exp, 0);
  json trial;
  std::string victim;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(exp);
        if (trials.size() != 1) return false;
        trial = trials[0];
        victim = cluster.AgentRunning(trial.value("allocation_id", ""));
        return !victim.empty() && !trial.value("latest_checkpoint_uuid", "").empty() && TotalBatches(trial) >= 30 &&
               FindTrialPid(trial.value("allocation_id", "")) > 0;
      },
      kLong));
  pid_t orphan = FindTrialPid(trial["allocation_id"]);
  ASSERT_GT(orphan, 0) << "no det-trial process of " << trial.dump();
  cluster.KillAgent(victim);

  std::string survivor = victim == "a" ? "b" : "a";
  ASSERT_TRUE(PollUntil(
      [&] {
        auto t = cluster.Trials(exp);
        return t.size() == 1 && cluster.AgentRunning(t[0].value("allocation_id", "")) == survivor;
      },
      std::chrono::seconds(60)))
      << cluster.Trials(exp).dump() << cluster.MasterLog();
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED")) << cluster.MasterLog();
  EXPECT_EQ(cluster.ConnectedAgents(), 1);
  // The trial process the dead agent left behind noticed and exited.
  EXPECT_TRUE(PollUntil([&] { return !ProcessAlive(orphan); }, std::chrono::seconds(30))) << "pid " << orphan;
  CheckStore(cluster.db_path(), exp, config, /*final=*/true);
}

// Must show 4: the master is killed at ten random points of a workload (a
// seeded RNG picks how far the trials get before each kill); after every
// kill the database passes the same checks, and the experiment completes.
TEST(LifecycleTest, MasterKilledAtTenRandomPoints) {
  TempDir dir;
  Cluster cluster(dir);
  ASSERT_TRUE(cluster.StartConnectedAgents({"a", "b"}));
  const Config config = RandomSearch(/*max_length=*/100, /*validation_period=*/25, /*batch_delay_ms=*/10);
  int exp = cluster.Create(config, "random");
  ASSERT_GT(exp, 0);

  // Kill points as total batches trained over all trials, in (0, 90%).
  std::mt19937 rng(20240611);
  const int total = config.max_trials * config.max_length;
  std::uniform_int_distribution<int> point(1, total * 9 / 10);
  std::vector<int> points;
  for (int i = 0; i < 10; ++i) points.push_back(point(rng));
  std::sort(points.begin(), points.end());
  auto progress = [&] {
    int64_t sum = 0;
    for (const auto& t : cluster.Trials(exp)) sum += TotalBatches(t);
    return sum;
  };
  for (int i = 0; i < 10; ++i) {
    SCOPED_TRACE(absl::StrCat("kill ", i + 1, " at ", points[i], " batches"));
    ASSERT_TRUE(PollUntil([&] { return progress() >= points[i] || cluster.ExperimentState(exp) == "STATE_COMPLETED"; },
                          kLong))
        << cluster.MasterLog();
    cluster.KillMaster();
    CheckStore(cluster.db_path(), exp, config, /*final=*/false);
    cluster.RestartMaster();
    ASSERT_FALSE(HasFatalFailure());
  }
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED")) << cluster.Trials(exp).dump() << cluster.MasterLog();
  CheckStore(cluster.db_path(), exp, config, /*final=*/true);
}

// A trial that does not stop when asked (stuck in a long batch) is killed
// after --stop-timeout-s: a pause leaves it PAUSED (not counted as a restart)
// and frees its slot, and a cancel then ends the experiment.
TEST(LifecycleTest, StopTimeoutEscalatesToKill) {
  TempDir dir;
  Cluster cluster(dir, {"--stop-timeout-s", "1"});
  ASSERT_TRUE(cluster.StartConnectedAgents({"a"}));
  Config config;
  config.max_length = 10;
  config.validation_period = 10;
  config.batch_delay_ms = 600000;  // the first batch never ends
  int exp = cluster.Create(config, "stuck");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        auto t = cluster.Trials(exp);
        if (t.size() != 1 || FindTrialPid(t[0].value("allocation_id", "")) <= 0) return false;
        std::string logs;
        cluster.Cli({"trial", "logs", std::to_string(t[0]["id"].get<int>())}, &logs);
        return logs.find("batch 0 started") != std::string::npos;
      },
      kLong));
  ASSERT_EQ(cluster.Cli({"experiment", "pause", std::to_string(exp)}), 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        auto t = cluster.Trials(exp);
        return t.size() == 1 && t[0].value("state", "") == "STATE_PAUSED" && cluster.BusySlots() == 0;
      },
      std::chrono::seconds(30)))
      << cluster.Trials(exp).dump() << cluster.MasterLog();
  auto trial = cluster.Trials(exp)[0];
  EXPECT_EQ(trial.value("restarts", 0), 0);
  std::string logs;
  ASSERT_EQ(cluster.Cli({"trial", "logs", std::to_string(trial["id"].get<int>())}, &logs), 0);
  EXPECT_THAT(logs, HasSubstr("did not stop within 1 s"));

  ASSERT_EQ(cluster.Cli({"experiment", "cancel", std::to_string(exp)}), 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_CANCELED", std::chrono::seconds(30)));
  EXPECT_EQ(cluster.Trials(exp)[0].value("state", ""), "STATE_CANCELED");
}

// Cancel and kill of a search whose trials run one at a time: the trial that
// stops frees its slot, random search answers with the next trial, and that
// trial must end CANCELED with the rest (it once stayed ACTIVE, leaving the
// experiment STOPPING_* for ever).
class StopSearchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StopSearchTest, TrialsTheSearcherCreatesAfterTheStopAreCanceled) {
  TempDir dir;
  Cluster cluster(dir);
  ASSERT_TRUE(cluster.StartConnectedAgents({"a"}));
  Config config;
  config.searcher = "random";
  config.max_trials = 4;
  config.max_concurrent_trials = 1;
  config.max_length = 600;
  config.validation_period = 600;
  config.batch_delay_ms = 100;
  int exp = cluster.Create(config, "stop-" + GetParam());
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(PollUntil([&] { return cluster.Trials(exp).size() == 1 && cluster.BusySlots() == 1; }, kLong))
      << cluster.MasterLog();
  ASSERT_EQ(cluster.Cli({"experiment", GetParam(), std::to_string(exp)}), 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_CANCELED", std::chrono::seconds(60)))
      << cluster.ExperimentState(exp) << cluster.Trials(exp).dump() << cluster.MasterLog();
  auto trials = cluster.Trials(exp);
  ASSERT_GE(trials.size(), 1u);
  for (const auto& t : trials) EXPECT_EQ(t.value("state", ""), "STATE_CANCELED") << t.dump();
  EXPECT_EQ(cluster.BusySlots(), 0);
}

INSTANTIATE_TEST_SUITE_P(Stop, StopSearchTest, ::testing::Values("cancel", "kill"));

// Checkpoint GC: when a trial ends, the checkpoints the policy does not keep
// (save_trial_best 1 + save_trial_latest 3 here) are deleted, files and all;
// a new policy set with `det-cli experiment set gc-policy` or through REST
// (PatchExperiment) is applied at once. Each new policy keeps fewer than the
// one before, so its deletions can only come from it.
TEST(LifecycleTest, CheckpointGcFollowsThePolicy) {
  TempDir dir;
  Cluster cluster(dir);
  ASSERT_TRUE(cluster.StartConnectedAgents({"a"}));
  Config config;
  config.max_length = 60;
  config.validation_period = 20;
  config.checkpoint_period = 10;
  config.batch_delay_ms = 0;
  config.gc = "  save_experiment_best: 0\n  save_trial_best: 1\n  save_trial_latest: 3\n";
  int exp = cluster.Create(config, "gc");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED")) << cluster.MasterLog();

  auto checkpoints = [&] { return cluster.Get(absl::StrCat("/api/v1/experiments/", exp, "/checkpoints"))["checkpoints"]; };
  auto uuids_in = [&](const std::string& state) {
    std::set<std::string> uuids;
    for (const auto& c : checkpoints()) {
      if (c.value("state", "") == state) uuids.insert(c.value("uuid", ""));
    }
    return uuids;
  };
  // Checkpoints at 10, 20, ..., 60; validations at 20, 40, 60: the latest
  // three (40, 50, 60) and the best validated one are kept (3 or 4).
  auto all = checkpoints();
  ASSERT_EQ(all.size(), 6u) << all.dump();
  std::string latest = cluster.Trials(exp)[0].value("latest_checkpoint_uuid", "");
  std::set<std::string> keep;
  json best;
  for (const auto& c : all) {
    if (Int(c.value("total_batches", json(0))) >= 40) keep.insert(c.value("uuid", ""));
    if (c.contains("searcher_metric") && (best.is_null() || c["searcher_metric"] < best["searcher_metric"])) best = c;
  }
  ASSERT_FALSE(best.is_null()) << "no checkpoint has a validation: " << all.dump();
  keep.insert(best.value("uuid", ""));
  ASSERT_EQ(keep.count(latest), 1u) << "the latest checkpoint " << latest << " is not at batch 40 or later";
  auto policy_applied = [&] {
    return uuids_in("CHECKPOINT_STATE_COMPLETED") == keep &&
           uuids_in("CHECKPOINT_STATE_DELETED").size() == 6 - keep.size();
  };
  ASSERT_TRUE(PollUntil(policy_applied, std::chrono::seconds(30)))
      << "expected to keep " << ::testing::PrintToString(keep) << ": " << checkpoints().dump();
  for (const auto& c : checkpoints()) {
    std::string path = c.value("storage_path", "");
    if (keep.count(c.value("uuid", "")) > 0) {
      EXPECT_TRUE(std::filesystem::exists(path)) << path;
    } else {
      EXPECT_TRUE(PollUntil([&] { return !std::filesystem::exists(path); }, std::chrono::seconds(10))) << path;
    }
  }
  auto e = cluster.Get(absl::StrCat("/api/v1/experiments/", exp));
  EXPECT_EQ(e["experiment"]["checkpoint_gc_policy"]["save_trial_latest"], 3) << e.dump();

  // Through det-cli: keep only each trial's latest checkpoint. At least 3
  // are still kept until this call, so the 5 deletions can only come from it.
  ASSERT_GE(uuids_in("CHECKPOINT_STATE_COMPLETED").size(), 3u);
  std::string out;
  ASSERT_EQ(cluster.Cli({"experiment", "set", "gc-policy", std::to_string(exp), "--save-trial-best", "0",
                         "--save-trial-latest", "1"},
                        &out),
            0);
  EXPECT_THAT(out, HasSubstr("save_trial_best 0, save_trial_latest 1"));
  ASSERT_TRUE(PollUntil([&] { return uuids_in("CHECKPOINT_STATE_DELETED").size() == 5; }, std::chrono::seconds(30)))
      << checkpoints().dump();
  EXPECT_EQ(uuids_in("CHECKPOINT_STATE_COMPLETED"), std::set<std::string>{latest}) << checkpoints().dump();

  // A new policy through REST: keep nothing.
  int status = 0;
  auto patched = cluster.Send("PATCH", absl::StrCat("/api/v1/experiments/", exp),
                              R"({"checkpoint_gc_policy": {"save_experiment_best": 0, "save_trial_best": 0,
                                  "save_trial_latest": 0}})",
                              &status);
  ASSERT_EQ(status, 200) << patched.dump();
  EXPECT_EQ(patched["experiment"]["checkpoint_gc_policy"]["save_trial_latest"], 0) << patched.dump();
  ASSERT_TRUE(PollUntil([&] { return uuids_in("CHECKPOINT_STATE_DELETED").size() == 6; }, std::chrono::seconds(30)))
      << checkpoints().dump();
  for (const auto& c : checkpoints()) {
    std::string path = c.value("storage_path", "");
    EXPECT_TRUE(PollUntil([&] { return !std::filesystem::exists(path); }, std::chrono::seconds(10))) << path;
  }
  // A bad policy is refused, naming the field.
  auto bad = cluster.Send("PATCH", absl::StrCat("/api/v1/experiments/", exp),
                          R"({"checkpoint_gc_policy": {"save_trial_best": -1}})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_THAT(bad.value("message", ""), HasSubstr("save_trial_best"));
}

}  // namespace
}  // namespace det::testing
