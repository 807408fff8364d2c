// Issue 47, part 2: partitions and node loss on the operator's cluster
// (tests/multi_host/operator_cluster.h), as docs/operations/maintenance.md
// ("Network partitions", "Master restart and agent loss") says they end:
//  - an agent host's link cut longer than heartbeat-timeout-ms: the agent is
//    lost, its trial restarts from its checkpoint on the other agent, the old
//    process is ended when the link is back and never reports into the new
//    run; cut shorter: nothing restarted;
//  - the master's link cut shorter than heartbeat-timeout-ms and
//    DET_MASTER_RETRY_TIMEOUT_S: the trial keeps training, buffers its
//    reports and delivers them; cut longer: trial processes give up (code 4)
//    and the trial restarts from its checkpoint;
//  - kill -9 of the master, then a restart: agents and the trial reattach.
// Every case checks the master's metric rows by (trial, group, batch): each
// expected batch once among the rows not archived, no other.
//
// Holding a link down is the one timed wait here (the cut's length is what
// a case is about); everything else polls with a deadline.
#include <dirent.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/multi_host/operator_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr auto kRun = std::chrono::minutes(2);

// One trial of the synthetic example on one slot: `batches` batches of
// `delay_ms` each, a training row every 2 batches, a checkpoint every
// `checkpoint_period`, a validation at the end (and every
// `validation_period` when not 0).
struct TrialPlan {
  int batches = 100;
  int delay_ms = 100;
  int checkpoint_period = 50;
  int validation_period = 0;
};

std::string Config(const TrialPlan& p) {
  std::string y = absl::StrCat(
      "name: partition\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 16\n"
      "  dropout: 0.0\n  batch_delay_ms: ",
      p.delay_ms,
      "\nsearcher:\n  name: single\n  metric: validation_loss\n  smaller_is_better: true\n  max_length:\n"
      "    batches: ",
      p.batches, "\nmin_checkpoint_period:\n  batches: ", p.checkpoint_period, "\n");
  if (p.validation_period > 0) absl::StrAppend(&y, "min_validation_period:\n  batches: ", p.validation_period, "\n");
  absl::StrAppend(&y,
                  "scheduling_unit: 2\nmax_restarts: 0\nresources:\n  slots_per_trial: 1\n"
                  "reproducibility:\n  experiment_seed: 3\nenvironment:\n  environment_variables:\n"
                  "    - OMP_NUM_THREADS=1\ndata:\n  train_size: 256\n  val_size: 64\n  features: 16\n");
  return y;
}

// The batches a complete run reports in `group`.
std::set<int64_t> ExpectedBatches(const TrialPlan& p, const std::string& group) {
  std::set<int64_t> out;
  if (group == "training") {
    for (int b = 2; b <= p.batches; b += 2) out.insert(b);
  } else {
    if (p.validation_period > 0) {
      for (int b = p.validation_period; b <= p.batches; b += p.validation_period) out.insert(b);
    }
    out.insert(p.batches);
  }
  return out;
}

struct MetricRow {
  std::string group;
  int64_t batches = 0;
  int64_t run_id = 0;
  int64_t time_ms = 0;
  bool archived = false;
};

struct TrialRow {
  std::string state;
  int64_t run_id = 0;
  int64_t restarts = 0;
};

// Reads the master's database read-only (the master may be writing).
class Db {
 public:
  explicit Db(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "cannot open " << path << ": " << sqlite3_errmsg(db_);
    }
    sqlite3_busy_timeout(db_, 5000);
  }
  ~Db() { sqlite3_close(db_); }

  std::vector<MetricRow> Metrics(int64_t trial_id) {
    std::vector<MetricRow> out;
    sqlite3_stmt* st = Prepare(
        "SELECT metric_group, total_batches, trial_run_id, time_ms, archived FROM metrics WHERE trial_id = ?");
    if (st == nullptr) return out;
    sqlite3_bind_int64(st, 1, trial_id);
    while (sqlite3_step(st) == SQLITE_ROW) {
      MetricRow r;
      r.group = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      r.batches = sqlite3_column_int64(st, 1);
      r.run_id = sqlite3_column_int64(st, 2);
      r.time_ms = sqlite3_column_int64(st, 3);
      r.archived = sqlite3_column_int64(st, 4) != 0;
      out.push_back(r);
    }
    sqlite3_finalize(st);
    return out;
  }

  TrialRow Trial(int64_t trial_id) {
    TrialRow t;
    sqlite3_stmt* st = Prepare("SELECT state, run_id, restarts FROM trials WHERE id = ?");
    if (st == nullptr) return t;
    sqlite3_bind_int64(st, 1, trial_id);
    if (sqlite3_step(st) == SQLITE_ROW) {
      t.state = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      t.run_id = sqlite3_column_int64(st, 1);
      t.restarts = sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
    return t;
  }

  // The most batches of a stored training row of the trial, 0 when none.
  int64_t TrainedBatches(int64_t trial_id) {
    int64_t most = 0;
    for (const MetricRow& r : Metrics(trial_id)) {
      if (r.group == "training" && !r.archived) most = std::max(most, r.batches);
    }
    return most;
  }

 private:
  sqlite3_stmt* Prepare(const char* sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &st, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
      return nullptr;
    }
    return st;
  }
  sqlite3* db_ = nullptr;
};

// Each batch the plan reports, in each group, stored exactly once among the
// rows not archived; no other batch. Returns the rows for more checks.
std::vector<MetricRow> ExpectEachBatchOnce(OperatorCluster& c, int64_t trial_id, const TrialPlan& p) {
  Db db(c.db_path());
  std::vector<MetricRow> rows = db.Metrics(trial_id);
  for (const std::string group : {"training", "validation"}) {
    std::map<int64_t, int> seen;
    for (const MetricRow& r : rows) {
      if (r.group == group && !r.archived) ++seen[r.batches];
    }
    std::set<int64_t> got;
    for (const auto& [batches, n] : seen) {
      got.insert(batches);
      EXPECT_EQ(n, 1) << group << " row of trial " << trial_id << " at batch " << batches << " stored " << n
                      << " times";
    }
    EXPECT_EQ(got, ExpectedBatches(p, group)) << group << " rows of trial " << trial_id << " lost or extra";
  }
  return rows;
}

// The id of the one trial of experiment `exp` (0 while it has none).
int64_t OnlyTrial(OperatorCluster& c, int exp) {
  json trials = c.Trials(exp);
  return trials.size() == 1 ? trials[0].value("id", int64_t{0}) : 0;
}

// Which agent ("agent-1", "agent-2") has a slot running `trial_id`, "" when
// none (or the master does not answer).
std::string AgentOf(OperatorCluster& c, int64_t trial_id) {
  json agents = c.Rest("GET", "/api/v1/agents");
  if (!agents.is_object() || !agents.contains("agents")) return "";
  for (const auto& a : agents["agents"]) {
    for (const auto& s : a.value("slots", json::array())) {
      if (s.value("trial_id", int64_t{0}) == trial_id) return a.value("id", "");
    }
  }
  return "";
}

// Whether agent `id`'s slots all are free (its processes reported gone).
bool AgentIdle(OperatorCluster& c, const std::string& id) {
  json agents = c.Rest("GET", "/api/v1/agents");
  if (!agents.is_object() || !agents.contains("agents")) return false;
  for (const auto& a : agents["agents"]) {
    if (a.value("id", "") != id) continue;
    if (!a.value("connected", false)) return false;
    for (const auto& s : a.value("slots", json::array())) {
      if (!s.value("allocation_id", "").empty()) return false;
    }
    return true;
  }
  return false;
}

Host HostOf(const std::string& agent_id) { return agent_id == "agent-1" ? Host::kAgent1 : Host::kAgent2; }

// det-trial processes started from this cluster's installs (their command
// line names the host's prefix, which is under the test's temp dir).
int TrialProcesses(OperatorCluster& c) {
  int n = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return -1;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string cmd = ReadFile(std::string("/proc/") + e->d_name + "/cmdline");
    if (cmd.find("det-trial") != std::string::npos && cmd.find(c.dir()) != std::string::npos) ++n;
  }
  closedir(proc);
  return n;
}

int64_t WallMs() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What StartTrial started: the experiment, its one trial and the agent
// that trial runs on.
struct Started {
  int exp = 0;
  int64_t trial = 0;
  std::string agent;
};

// Checks that `c` came up, creates the plan's experiment and waits until its
// trial runs on an agent and has trained `batches` (a stored training row);
// fatal failure after 60 s.
void StartTrial(OperatorCluster& c, const TrialPlan& p, int64_t batches, Started* s) {
  ASSERT_TRUE(c.ok()) << c.error() << c.Logs();
  s->exp = c.CreateExperiment(Config(p), "partition");
  ASSERT_GT(s->exp, 0);
  Db db(c.db_path());
  const bool running = OperatorCluster::WaitFor(
      [&] {
        if (s->trial == 0) s->trial = OnlyTrial(c, s->exp);
        if (s->trial == 0) return false;
        s->agent = AgentOf(c, s->trial);
        return !s->agent.empty() && db.TrainedBatches(s->trial) >= batches;
      },
      seconds(60));
  ASSERT_TRUE(running) << "trial " << s->trial << " of experiment " << s->exp << " did not reach " << batches
                       << " batches on an agent\n"
                       << c.Logs();
}

// A case's cluster: short heartbeat timeout and trial retry timeout (the
// agents' environment, which their trials inherit).
OperatorClusterOptions Options(int heartbeat_timeout_ms, int retry_timeout_s) {
  return OperatorClusterOptions()
      .set_heartbeat_timeout_ms(heartbeat_timeout_ms)
      .add_agent_env(absl::StrCat("DET_MASTER_RETRY_TIMEOUT_S=", retry_timeout_s));
}

// Waits until the experiment completed; its one trial must be COMPLETED
// without a restart counted (a lost agent or master is not its fault).
// Returns the trial's row (run_id 1: it was never restarted).
TrialRow ExpectCompleted(OperatorCluster& c, int exp, int64_t trial) {
  EXPECT_EQ(c.WaitUntilEnded(exp, kRun), "STATE_COMPLETED") << c.Trials(exp).dump() << c.Logs();
  TrialRow t = Db(c.db_path()).Trial(trial);
  EXPECT_EQ(t.state, "COMPLETED");
  EXPECT_EQ(t.restarts, 0) << "a lost agent or master is not the trial's fault";
  return t;
}

// The batch the last run (`run_id`) resumed from: its first stored row's
// batches less the 2 of a row; `batches` when it stored none.
int64_t ResumedAt(const std::vector<MetricRow>& rows, int64_t run_id, int64_t batches) {
  int64_t at = batches;
  for (const MetricRow& r : rows) {
    if (!r.archived && r.run_id == run_id && r.group == "training") at = std::min(at, r.batches - 2);
  }
  return at;
}

TEST(MultiHost, AgentLinkCutLongerThanHeartbeatTimeoutRestartsOnTheOtherAgent) {
  OperatorCluster c(Options(3000, 60));
  TrialPlan p;
  p.checkpoint_period = 20;
  Started s;
  ASSERT_NO_FATAL_FAILURE(StartTrial(c, p, 24, &s));  // past its first checkpoint
  const Host cut = HostOf(s.agent);
  const std::string other = s.agent == "agent-1" ? "agent-2" : "agent-1";

  c.LinkDown(cut);
  // Down until the master gave the agent up and runs the trial elsewhere.
  const bool moved = OperatorCluster::WaitFor([&] { return AgentOf(c, s.trial) == other; }, seconds(30));
  c.LinkUp(cut);
  ASSERT_TRUE(moved) << "trial " << s.trial << " not restarted on " << other << "\n" << c.Logs();
  EXPECT_THAT(c.MasterLog(), HasSubstr("agent " + s.agent + " lost: "));
  // The old agent registers again and its trial process is ended: its
  // slots are free while the trial runs on the other agent.
  EXPECT_TRUE(OperatorCluster::WaitFor([&] { return AgentIdle(c, s.agent); }, seconds(30)))
      << s.agent << " still runs the old process\n"
      << c.Logs();

  const TrialRow t = ExpectCompleted(c, s.exp, s.trial);
  EXPECT_EQ(t.run_id, 2);
  std::vector<MetricRow> rows = ExpectEachBatchOnce(c, s.trial, p);
  // The restarted run resumed from a checkpoint (not from batch 0), and what
  // is stored past it is the new run's only: the old process, which trained
  // on while cut off, never reported into it.
  const int64_t resumed_at = ResumedAt(rows, t.run_id, p.batches);
  EXPECT_GE(resumed_at, p.checkpoint_period);
  for (const MetricRow& r : rows) {
    if (!r.archived && r.batches > resumed_at) {
      EXPECT_EQ(r.run_id, t.run_id) << r.group << " row at " << r.batches;
    }
  }
}

TEST(MultiHost, AgentLinkCutShorterThanHeartbeatTimeoutRestartsNothing) {
  OperatorCluster c(Options(8000, 60));
  TrialPlan p;
  Started s;
  ASSERT_NO_FATAL_FAILURE(StartTrial(c, p, 10, &s));
  c.LinkDown(HostOf(s.agent));
  std::this_thread::sleep_for(seconds(2));  // the cut: well under the 8 s heartbeat timeout
  c.LinkUp(HostOf(s.agent));
  EXPECT_EQ(ExpectCompleted(c, s.exp, s.trial).run_id, 1);
  EXPECT_THAT(c.MasterLog(), Not(HasSubstr(" lost: ")));
  ExpectEachBatchOnce(c, s.trial, p);
}

TEST(MultiHost, MasterLinkCutShorterThanTimeoutsBuffersAndDelivers) {
  OperatorCluster c(Options(8000, 60));
  TrialPlan p;  // 100 batches of 100 ms, a checkpoint at 50: no call needs an answer in batches 6..30
  Started s;
  ASSERT_NO_FATAL_FAILURE(StartTrial(c, p, 6, &s));
  const int64_t cut_ms = WallMs();
  c.LinkDown(Host::kMaster);
  std::this_thread::sleep_for(milliseconds(2500));  // the cut: under both timeouts
  c.LinkUp(Host::kMaster);
  const int64_t back_ms = WallMs();

  EXPECT_EQ(ExpectCompleted(c, s.exp, s.trial).run_id, 1);
  EXPECT_THAT(c.MasterLog(), Not(HasSubstr(" lost: ")));
  // Every batch's row is stored exactly once, those made during the cut too.
  std::vector<MetricRow> rows = ExpectEachBatchOnce(c, s.trial, p);
  // It trained on while cut off: rows the trial made during the cut (their
  // time is the trial's) were buffered and delivered. How many depends on
  // the machine's speed, so this asserts progress only (at least one row),
  // not a rate.
  int during = 0;
  for (const MetricRow& r : rows) during += r.group == "training" && r.time_ms > cut_ms && r.time_ms < back_ms;
  EXPECT_GE(during, 1) << "no training row made during the " << back_ms - cut_ms << " ms cut: the trial did not "
                          "train on while cut off";
  std::printf("[ info     ] %d training rows made during the %lld ms cut\n", during,
              static_cast<long long>(back_ms - cut_ms));
}

TEST(MultiHost, MasterLinkCutLongerThanTimeoutsRestartsFromTheCheckpoint) {
  OperatorCluster c(Options(3000, 2));
  TrialPlan p;
  p.checkpoint_period = 20;
  Started s;
  ASSERT_NO_FATAL_FAILURE(StartTrial(c, p, 24, &s));
  c.LinkDown(Host::kMaster);
  // Down until the master lost both agents and the trial process gave up
  // (DET_MASTER_RETRY_TIMEOUT_S=2 after keepalive saw the dead link).
  const bool lost = OperatorCluster::WaitFor(
      [&] {
        const std::string log = c.MasterLog();
        return log.find("agent agent-1 lost: ") != std::string::npos &&
               log.find("agent agent-2 lost: ") != std::string::npos && TrialProcesses(c) == 0;
      },
      seconds(60));
  c.LinkUp(Host::kMaster);
  ASSERT_TRUE(lost) << "agents not lost or trial process still running (" << TrialProcesses(c) << ")\n" << c.Logs();
  ASSERT_TRUE(c.WaitForAgents(2, seconds(30))) << c.Logs();
  // Restarted (each agent lost gave up the allocation placed on it).
  const TrialRow t = ExpectCompleted(c, s.exp, s.trial);
  EXPECT_GE(t.run_id, 2);
  std::vector<MetricRow> rows = ExpectEachBatchOnce(c, s.trial, p);
  EXPECT_GE(ResumedAt(rows, t.run_id, p.batches), p.checkpoint_period)
      << "restarted from batch 0, not from its checkpoint";
}

TEST(MultiHost, MasterKilledAndRestartedReattaches) {
  OperatorCluster c(Options(8000, 60));
  TrialPlan p;
  Started s;
  ASSERT_NO_FATAL_FAILURE(StartTrial(c, p, 6, &s));
  const int64_t killed_ms = WallMs();
  ASSERT_NO_FATAL_FAILURE(c.KillMasterHard());
  ASSERT_NO_FATAL_FAILURE(c.StartMaster());
  ASSERT_TRUE(c.WaitForAgents(2, seconds(30))) << c.Logs();
  const int64_t back_ms = WallMs();
  EXPECT_THAT(c.MasterLog(), HasSubstr("reattached allocation"));
  EXPECT_EQ(ExpectCompleted(c, s.exp, s.trial).run_id, 1) << "the trial was restarted, not reattached";
  EXPECT_EQ(AgentOf(c, s.trial), "");  // ended, slot given back
  std::vector<MetricRow> rows = ExpectEachBatchOnce(c, s.trial, p);
  int during = 0;
  for (const MetricRow& r : rows) during += r.group == "training" && r.time_ms > killed_ms && r.time_ms < back_ms;
  std::printf("[ info     ] %d training rows made while the master was down (%lld ms)\n", during,
              static_cast<long long>(back_ms - killed_ms));
}

}  // namespace
}  // namespace det::testing
