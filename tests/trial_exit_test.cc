// End-to-end tests of how a trial ends besides completing, on a real
// det-master, det-agent and det-trial: a config error (exit code 2) and a
// library error (exit code 3) are final however many restarts are left
// (common/exit_codes.h), and `det-cli trial kill` ends the trial's
// processes, leaves it CANCELED and frees its slot.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ostream>
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
using json = nlohmann::json;
using namespace std::chrono_literals;

const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";
// The synthetic trial built for trial ABI version 2 (tests/CMakeLists.txt):
// the master accepts it (it checks the ELF entry symbol, not the version);
// det-trial refuses to load it.
const std::string kSyntheticAbi2 = std::string(DET_TRIALS_DIR) + "/synthetic_trial_abi2.so";

// A one-trial synthetic experiment of `max_length` batches (`delay_ms` each)
// with max_restarts 3, validated on `metric` every 10 batches, with `extra`
// appended.
std::string OneTrial(const std::string& name, const std::string& checkpoint_dir, int max_length, int delay_ms,
                     const std::string& metric = "validation_loss", const std::string& extra = "") {
  return absl::StrCat("name: ", name,
                      "\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 16\n"
                      "  dropout: 0.1\n  batch_delay_ms: ",
                      delay_ms, "\nsearcher:\n  name: single\n  metric: ", metric,
                      "\n  smaller_is_better: true\n  max_length:\n    batches: ", max_length,
                      "\nmin_validation_period:\n  batches: 10\nmax_restarts: 3\nscheduling_unit: 10\n"
                      "checkpoint_storage:\n  type: shared_fs\n  host_path: ",
                      checkpoint_dir,
                      "\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
                      "data:\n  train_size: 256\n  val_size: 64\n", extra);
}

// An int64 field of `j` (protobuf's JSON mapping writes int64 as a string);
// -1 when missing.
int64_t Int64Field(const json& j, const std::string& key) {
  if (!j.is_object() || !j.contains(key)) return -1;
  const json& v = j[key];
  if (v.is_string()) return std::stoll(v.get<std::string>());
  return v.is_number() ? v.get<int64_t>() : -1;
}

// The experiment's only trial (null until there is exactly one).
json OnlyTrial(TestCluster& cluster, int experiment_id) {
  json trials = cluster.Trials(experiment_id);
  return trials.size() == 1 ? trials[0] : json();
}

struct ExitCase {
  std::string name;
  std::string trial_so;
  std::string metric;       // searcher.metric
  int exit_code;            // what det-trial exits with
  std::string error;        // in the trial's error_message
};

void PrintTo(const ExitCase& c, std::ostream* os) { *os << c.name << " (exit code " << c.exit_code << ")"; }

class TrialExitCodeTest : public ::testing::TestWithParam<ExitCase> {};

// A trial process exiting with 2 (a config error: the searcher metric is
// not among what the trial reports, which only the trial process can tell)
// or 3 (a library error: a trial.so built for another trial ABI) is not
// retried although max_restarts is 3: the trial ends in ERROR with the
// reason, 0 restarts, and its slot is free.
TEST_P(TrialExitCodeTest, IsNotRetriedAndEndsInErrorWithTheReason) {
  const ExitCase& c = GetParam();
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s)) << cluster.MasterLog();
  const int exp = cluster.CreateExperiment(OneTrial(c.name, dir / "checkpoints", 20, 0, c.metric), c.name, c.trial_so);
  ASSERT_GT(exp, 0);
  json trial;
  ASSERT_TRUE(PollUntil(
      [&] {
        trial = OnlyTrial(cluster, exp);
        return trial.value("state", "") == "STATE_ERROR";
      },
      120s))
      << cluster.Trials(exp).dump() << cluster.MasterLog() << cluster.AgentLogs();
  EXPECT_EQ(trial.value("restarts", -1), 0) << trial.dump();
  EXPECT_THAT(trial.value("error_message", ""), HasSubstr(c.error)) << trial.dump();
  std::string logs, err;
  ASSERT_EQ(cluster.Cli({"trial", "logs", std::to_string(trial["id"].get<int>())}, &logs, &err), 0) << err;
  EXPECT_THAT(logs, HasSubstr(c.error));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("exited with code ", c.exit_code)));
  EXPECT_THAT(logs, HasSubstr("a configuration or library error, not retried: ERROR"));
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("restart 1 of 3")));
  EXPECT_EQ(cluster.BusySlots(), 0);
  // Still 0 restarts, and still ERROR, once the master has nothing left to do.
  trial = OnlyTrial(cluster, exp);
  EXPECT_EQ(trial.value("restarts", -1), 0) << trial.dump();
  EXPECT_EQ(trial.value("state", ""), "STATE_ERROR") << trial.dump();
}

INSTANTIATE_TEST_SUITE_P(
    ExitCodes, TrialExitCodeTest,
    ::testing::Values(ExitCase{"ConfigError", kSynthetic, "validation_f1", 2,
                               "validation metrics lack the searcher metric 'validation_f1'"},
                      ExitCase{"LibraryError", kSyntheticAbi2, "validation_loss", 3,
                               "was built for trial ABI version 2"}),
    [](const ::testing::TestParamInfo<ExitCase>& info) { return info.param.name; });

// `det-cli trial kill ID` of a running trial: every process of its
// allocation is gone, the trial ends CANCELED (the API has no KILLED trial
// state: a kill goes through STOPPING_KILLED to CANCELED) without a
// checkpoint or a restart, and its slot is free: a trial that was waiting
// for the agent's only slot runs and completes.
TEST(TrialKillTest, KillEndsItsProcessesCancelsItAndFreesItsSlot) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s)) << cluster.MasterLog();
  // No checkpoint unless asked for one (checkpoint_policy none, no
  // min_checkpoint_period): a kill must not take one.
  const int victim_exp = cluster.CreateExperiment(
      OneTrial("victim", dir / "checkpoints", 100000, 50, "validation_loss", "checkpoint_policy: none\n"), "victim");
  ASSERT_GT(victim_exp, 0);
  json victim;
  std::vector<pid_t> pids;
  std::string env_entry;
  ASSERT_TRUE(PollUntil(
      [&] {
        victim = OnlyTrial(cluster, victim_exp);
        const std::string alloc = victim.is_null() ? "" : victim.value("allocation_id", "");
        if (alloc.empty() || cluster.AgentRunning(alloc) != "a") return false;
        env_entry = "DET_ALLOCATION_ID=" + alloc;
        pids = PidsWithEnv(env_entry);
        return !pids.empty() && Int64Field(victim, "total_batches_processed") >= 10;
      },
      120s))
      << cluster.Trials(victim_exp).dump() << cluster.MasterLog();
  std::printf("trial %d runs as pid(s) %s\n", victim["id"].get<int>(), ::testing::PrintToString(pids).c_str());

  // A second trial waits for the only slot.
  const int waiting_exp = cluster.CreateExperiment(OneTrial("waiting", dir / "checkpoints", 20, 0), "waiting");
  ASSERT_GT(waiting_exp, 0);
  ASSERT_TRUE(PollUntil([&] { return !OnlyTrial(cluster, waiting_exp).is_null(); }, 30s)) << cluster.MasterLog();
  EXPECT_EQ(cluster.BusySlots(), 1);
  EXPECT_EQ(Int64Field(OnlyTrial(cluster, waiting_exp), "total_batches_processed"), 0);

  std::string out, err;
  ASSERT_EQ(cluster.Cli({"trial", "kill", std::to_string(victim["id"].get<int>())}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("Killed trial ", victim["id"].get<int>())));

  // Gone: no process with the allocation's environment (a dying process's
  // environ reads empty before it is a zombie), and each pid seen before
  // the kill has exited.
  auto all_gone = [&] {
    for (pid_t pid : pids) {
      if (ProcessAlive(pid)) return false;
    }
    return PidsWithEnv(env_entry).empty();
  };
  EXPECT_TRUE(PollUntil(all_gone, 30s)) << "still running: " << ::testing::PrintToString(PidsWithEnv(env_entry))
                                        << " of " << ::testing::PrintToString(pids) << cluster.AgentLogs();
  ASSERT_TRUE(PollUntil([&] { return OnlyTrial(cluster, victim_exp).value("state", "") == "STATE_CANCELED"; }, 60s))
      << cluster.Trials(victim_exp).dump() << cluster.MasterLog();
  victim = OnlyTrial(cluster, victim_exp);
  EXPECT_EQ(victim.value("restarts", -1), 0) << victim.dump();
  EXPECT_EQ(victim.value("latest_checkpoint_uuid", ""), "") << "a kill takes no checkpoint: " << victim.dump();
  const json checkpoints = cluster.Get(absl::StrCat("/api/v1/experiments/", victim_exp, "/checkpoints"));
  EXPECT_TRUE(checkpoints.contains("checkpoints") && checkpoints["checkpoints"].empty()) << checkpoints.dump();

  // The slot is free: the waiting trial runs on it and completes.
  ASSERT_TRUE(cluster.WaitForState(waiting_exp, "STATE_COMPLETED", 120s))
      << cluster.Trials(waiting_exp).dump() << cluster.MasterLog();
  EXPECT_EQ(OnlyTrial(cluster, waiting_exp).value("state", ""), "STATE_COMPLETED");
  EXPECT_TRUE(PollUntil([&] { return cluster.BusySlots() == 0; }, 30s)) << cluster.Get("/api/v1/slots").dump();
  std::printf("experiment %d (its only trial killed) is %s\n", victim_exp, cluster.ExperimentState(victim_exp).c_str());
}

}  // namespace
}  // namespace det::testing
