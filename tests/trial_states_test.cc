// Trial states that say what happened (issue 45, must-show 2), end to end on
// a real det-master, det-agent and det-trial running the synthetic example:
// what det-cli (trial describe, experiment describe, trial logs) and REST
// show for a trial waiting for promotion, one paused by the user (queued,
// and running), and completed ones. The scheduler's preemption is shown the
// same way in preemption_test.cc; every state's transitions, with an injected
// clock, are in master/core/trial_states_core_test.cc.
//
// No step waits on time: the trials that must not run yet are queued before
// any agent exists, and the running trial that is paused has 100,000 batches
// to go.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

constexpr auto kLong = std::chrono::seconds(120);

// async_halving over 2 trials, rungs at 20 and 40 batches, divisor 2: the
// first rung-0 result promotes nobody (floor(1/2) = 0).
std::string AshaYaml(const std::string& checkpoint_dir) {
  return absl::StrCat(
      "name: states\nhyperparameters:\n  global_batch_size: 16\n  learning_rate:\n    type: log\n    base: 10\n"
      "    minval: -3\n    maxval: -1\n  hidden_size: 16\n  dropout: 0.1\n"
      "searcher:\n  name: async_halving\n  num_rungs: 2\n  divisor: 2\n  max_trials: 2\n"
      "  metric: validation_loss\n  smaller_is_better: true\n  max_length:\n    batches: 40\n"
      "scheduling_unit: 10\ncheckpoint_storage:\n  type: shared_fs\n  host_path: ",
      checkpoint_dir,
      "\nreproducibility:\n  experiment_seed: 3\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
      "data:\n  train_size: 256\n  val_size: 64\n");
}

// One trial with far more batches than the test lasts.
std::string LongYaml(const std::string& checkpoint_dir) {
  return absl::StrCat(
      "name: long\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 16\n"
      "  dropout: 0.1\n  batch_delay_ms: 5\nsearcher:\n  name: single\n  metric: validation_loss\n"
      "  smaller_is_better: true\n  max_length:\n    batches: 100000\nscheduling_unit: 10\n"
      "checkpoint_storage:\n  type: shared_fs\n  host_path: ",
      checkpoint_dir, "\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
                      "data:\n  train_size: 256\n  val_size: 64\n");
}

int64_t Int(const json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());
  if (v.is_number()) return v.get<int64_t>();
  return 0;
}

class Cluster : public TestCluster {
 public:
  explicit Cluster(const TempDir& dir) : TestCluster(dir) {}
  std::string State(int64_t id) { return Trial(id).value("state", ""); }
  // det-cli's output, failing the test on a non-zero exit.
  std::string CliOut(const std::vector<std::string>& args) {
    std::string out, err;
    EXPECT_EQ(Cli(args, &out, &err), 0) << err;
    return out;
  }
  // Polls the trial's logs until they hold `text` (log lines are shipped
  // after the state changes they tell of); `logs` gets the last text read.
  bool LogsShow(int64_t id, const std::string& text, std::string* logs) {
    return PollUntil(
        [&] {
          *logs = TrialLogs(id);
          return logs->find(text) != std::string::npos;
        },
        std::chrono::seconds(30));
  }
};

// Waiting for promotion and paused by the user (queued), then both trials
// completed, each saying so in det-cli, REST and its log.
TEST(TrialStatesCliTest, WaitingPausedAndCompletedSayWhyInCliRestAndLogs) {
  TempDir dir;
  Cluster cluster(dir);
  // No agent yet: both trials are created and queued; trial 2 is paused
  // before it can run, so trial 1 waits for its result.
  const int exp = cluster.CreateExperiment(AshaYaml(dir / "checkpoints"), "asha");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(PollUntil([&] { return cluster.Trials(exp).size() == 2; }, std::chrono::seconds(30)));
  const int64_t t1 = Int(cluster.Trials(exp)[0]["id"]);
  const int64_t t2 = Int(cluster.Trials(exp)[1]["id"]);
  cluster.CliOut({"trial", "pause", std::to_string(t2)});
  EXPECT_EQ(cluster.State(t2), "STATE_PAUSED");

  cluster.StartAgent("a", AgentOptions().set_slots(1));
  ASSERT_TRUE(PollUntil([&] { return cluster.State(t1) == "STATE_WAITING"; }, kLong))
      << cluster.Trial(t1).dump() << cluster.MasterLog();

  // Waiting: REST, det-cli and the log say so, and it holds no slot.
  const json waiting = cluster.Trial(t1);
  EXPECT_EQ(waiting.value("allocation_id", "x"), "");
  EXPECT_THAT(waiting.value("state_reason", ""), HasSubstr("waiting for promotion: its rung is done at 20 batches"));
  EXPECT_EQ(cluster.BusySlots(), 0);
  std::string out = cluster.CliOut({"trial", "describe", std::to_string(t1)});
  EXPECT_THAT(out, HasSubstr("State:"));
  EXPECT_THAT(out, HasSubstr(" WAITING\n"));
  EXPECT_THAT(out, HasSubstr("waiting for promotion: its rung is done at 20 batches"));
  out = cluster.CliOut({"experiment", "describe", std::to_string(exp)});
  EXPECT_THAT(out, HasSubstr("WAITING"));
  EXPECT_THAT(out, HasSubstr("PAUSED"));
  // The experiment's counts are of the shown states, as the trial list's.
  const json by_state = cluster.Get(absl::StrCat("/api/v1/experiments/", exp))["experiment"]["num_trials_by_state"];
  EXPECT_EQ(by_state.value("WAITING", 0), 1) << by_state.dump();
  EXPECT_EQ(by_state.value("PAUSED", 0), 1) << by_state.dump();
  EXPECT_EQ(by_state.value("ACTIVE", 0), 0) << by_state.dump();
  std::string logs;
  EXPECT_TRUE(cluster.LogsShow(t1, "(EXIT_REASON_WAITING)", &logs)) << logs;
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("[det-master] trial ", t1, " is waiting for promotion")));
  EXPECT_THAT(logs, Not(HasSubstr("PREEMPTED")));

  // Paused by the user while queued.
  EXPECT_EQ(cluster.Trial(t2).value("state_reason", ""),
            "paused by the user; resumes from its latest checkpoint when activated");
  out = cluster.CliOut({"trial", "describe", std::to_string(t2)});
  EXPECT_THAT(out, HasSubstr(" PAUSED\n"));
  EXPECT_THAT(out, HasSubstr("paused by the user"));
  EXPECT_TRUE(cluster.LogsShow(t2, "[det-master] trial paused by the user", &logs)) << logs;

  // Trial 2 runs; the search ends; every trial is COMPLETED and says so
  // (trial 1 either promoted and run to 40 batches, or completed waiting).
  cluster.CliOut({"trial", "activate", std::to_string(t2)});
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", kLong)) << cluster.Trials(exp).dump();
  for (const int64_t t : {t1, t2}) {
    const json done = cluster.Trial(t);
    EXPECT_EQ(done.value("state", ""), "STATE_COMPLETED") << done.dump();
    const int64_t batches = Int(done["total_batches_processed"]);
    const std::string reason = absl::StrCat("completed at ", batches, " batches: the searcher is done with it");
    EXPECT_EQ(done.value("state_reason", ""), reason);
    out = cluster.CliOut({"trial", "describe", std::to_string(t)});
    EXPECT_THAT(out, HasSubstr(" COMPLETED\n"));
    EXPECT_THAT(out, HasSubstr(reason));
    const std::string head = absl::StrCat("[det-master] trial ", t, " completed at ", batches, " batches: ");
    EXPECT_TRUE(cluster.LogsShow(t, head, &logs)) << logs;
    EXPECT_THAT(logs, AnyOf(HasSubstr(head + "the searcher is done with it"),
                            HasSubstr(head + "the search ended without promoting it further")));
    EXPECT_THAT(logs, Not(HasSubstr("PREEMPTED")));
  }
}

// A running trial whose experiment the user pauses: the runtime is told
// EXIT_REASON_PAUSED, and nothing says "preempted".
TEST(TrialStatesCliTest, PausingARunningTrialIsPausedNotPreempted) {
  TempDir dir;
  Cluster cluster(dir);
  cluster.StartAgent("a", AgentOptions().set_slots(1));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  const int exp = cluster.CreateExperiment(LongYaml(dir / "checkpoints"), "long");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(exp);
        return trials.size() == 1 && Int(trials[0].value("total_batches_processed", json(0))) >= 10;
      },
      kLong));
  const int64_t t = Int(cluster.Trials(exp)[0]["id"]);
  cluster.CliOut({"experiment", "pause", std::to_string(exp)});
  ASSERT_TRUE(PollUntil([&] { return cluster.State(t) == "STATE_PAUSED"; }, kLong)) << cluster.Trial(t).dump();
  const std::string reason = absl::StrCat("experiment ", exp, " paused by the user");
  EXPECT_THAT(cluster.Trial(t).value("state_reason", ""), HasSubstr(reason));
  const std::string out = cluster.CliOut({"trial", "describe", std::to_string(t)});
  EXPECT_THAT(out, HasSubstr(" PAUSED\n"));
  EXPECT_THAT(out, HasSubstr(reason));
  std::string logs;
  EXPECT_TRUE(cluster.LogsShow(t, "(EXIT_REASON_PAUSED)", &logs)) << logs;
  EXPECT_TRUE(cluster.LogsShow(t, absl::StrCat("[det-master] trial ", t, " paused by the user at "), &logs)) << logs;
  EXPECT_THAT(logs, Not(HasSubstr("preempted")));
  EXPECT_THAT(logs, Not(HasSubstr("PREEMPTED")));
  cluster.CliOut({"experiment", "kill", std::to_string(exp)});
  EXPECT_TRUE(cluster.WaitForState(exp, "STATE_CANCELED", kLong));
}

}  // namespace
}  // namespace det::testing
