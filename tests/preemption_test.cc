// End-to-end tests of priority scheduling on real det-master, det-agent and
// det-trial processes running the synthetic example: a higher-priority
// experiment preempts a lower-priority trial (which checkpoints, waits and
// resumes bit for bit), and resources.max_slots caps an experiment's slots.
#include <map>
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
using json = nlohmann::json;

const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";
constexpr auto kLong = std::chrono::seconds(180);

// A synthetic experiment of `trials` trials of the same hyperparameters
// (random search over constants: the trials differ only by their seeds).
struct Config {
  int trials = 1;
  int max_length = 60;
  int batch_delay_ms = 40;
  std::string resources;  // lines under "resources:" ("" for none)
  int seed = 7;

  std::string Yaml(const std::string& checkpoint_dir) const {
    std::string out = absl::StrCat(
        "name: preemption\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 16\n"
        "  dropout: 0.1\n  batch_delay_ms: ",
        batch_delay_ms, "\nsearcher:\n  name: random\n  max_trials: ", trials,
        "\n  metric: validation_loss\n  smaller_is_better: true\n  max_length:\n    batches: ", max_length,
        "\nmin_validation_period:\n  batches: 20\nscheduling_unit: 10\n"
        "checkpoint_storage:\n  type: shared_fs\n  host_path: ",
        checkpoint_dir, "\nreproducibility:\n  experiment_seed: ", seed,
        // One torch thread: the same result in every process.
        "\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
        "data:\n  train_size: 256\n  val_size: 64\n");
    if (!resources.empty()) absl::StrAppend(&out, "resources:\n", resources);
    return out;
  }
};

int64_t Int(const json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());  // int64 in protobuf's JSON mapping
  if (v.is_number()) return v.get<int64_t>();
  return 0;
}

class Cluster : public TestCluster {
 public:
  explicit Cluster(const TempDir& dir) : TestCluster(dir) {}
  int Create(const Config& config, const std::string& name) {
    return CreateExperiment(config.Yaml(dir() / "checkpoints"), name, kSynthetic);
  }
};

// The validation and training metrics of each trial of `a`, by request id,
// equal those of `b` exactly (doubles round-trip exactly in protobuf's JSON).
void ExpectSameMetrics(Cluster& cluster, int a, int b) {
  auto ta = cluster.Trials(a);
  auto tb = cluster.Trials(b);
  ASSERT_EQ(ta.size(), tb.size());
  std::map<int, json> by_request;
  for (const auto& t : tb) by_request[t.value("request_id", 0)] = t;
  for (const auto& t : ta) {
    const json& other = by_request[t.value("request_id", 0)];
    ASSERT_TRUE(other.is_object());
    EXPECT_EQ(t["seed"], other["seed"]);
    for (const char* group : {"validation", "training"}) {
      auto ma = cluster.Metrics(t["id"].get<int>(), group);
      auto mb = cluster.Metrics(other["id"].get<int>(), group);
      ASSERT_EQ(ma.size(), mb.size()) << group;
      ASSERT_FALSE(ma.empty()) << group;
      for (size_t i = 0; i < ma.size(); ++i) {
        EXPECT_EQ(ma[i]["total_batches"], mb[i]["total_batches"]) << group;
        EXPECT_EQ(ma[i]["metrics"], mb[i]["metrics"]) << group << " at batch " << ma[i]["total_batches"];
      }
    }
  }
}

// Must show 1: a priority-50 experiment with 2 trials holds both slots; a
// priority-1 experiment arrives: one low trial is preempted (it checkpoints
// and waits, GetTrial says why), the urgent trial runs to COMPLETED, the
// preempted trial resumes and completes, and every metric equals an
// uninterrupted run's.
TEST(PreemptionTest, HigherPriorityPreemptsAndThePreemptedTrialResumesBitForBit) {
  TempDir dir;
  Cluster cluster(dir);
  cluster.StartAgent("a", AgentOptions().set_slots(2));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));

  Config low_config;
  low_config.trials = 2;
  low_config.resources = "  priority: 50\n";
  const int low = cluster.Create(low_config, "low");
  ASSERT_GT(low, 0);
  // Both low trials run and have made progress (a training report each).
  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(low);
        if (trials.size() != 2) return false;
        for (const auto& t : trials) {
          if (t.value("allocation_id", "").empty() || Int(t.value("total_batches_processed", json(0))) < 10) {
            return false;
          }
        }
        return true;
      },
      kLong))
      << cluster.Trials(low).dump();

  Config urgent_config;
  urgent_config.resources = "  priority: 1\n";
  urgent_config.seed = 8;
  const int urgent = cluster.Create(urgent_config, "urgent");
  ASSERT_GT(urgent, 0);

  // Within a few seconds one low trial is preempted: its log says for whom,
  // GetTrial says it waits, and once off its slot it has a checkpoint.
  int64_t preempted = 0;
  bool seen_waiting = false;
  ASSERT_TRUE(PollUntil(
      [&] {
        for (const auto& t : cluster.Trials(low)) {
          const int64_t id = Int(t["id"]);
          json trial = cluster.Trial(id);
          if (trial.value("preemption", "").empty()) continue;
          preempted = id;
          if (!trial.value("allocation_id", "").empty() || trial.value("latest_checkpoint_uuid", "").empty()) {
            return false;
          }
          seen_waiting = true;
          return true;
        }
        return false;
      },
      std::chrono::seconds(30)))
      << "no low trial preempted and waiting: " << cluster.Trials(low).dump() << cluster.MasterLog();
  EXPECT_TRUE(seen_waiting);
  EXPECT_THAT(cluster.Trial(preempted).value("preemption", ""),
              HasSubstr(absl::StrCat("preempted for experiment ", urgent, " (priority 1)")));
  EXPECT_THAT(cluster.TrialLogs(preempted),
              HasSubstr(absl::StrCat("[det-master] trial ", preempted, " preempted for experiment ", urgent,
                                     " (priority 1)")));
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"trial", "describe", std::to_string(preempted)}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("Preempted"));
  // The state reason and the trial's log say preempted, with the runtime
  // told EXIT_REASON_PREEMPTED (issue 45: not a pause, not a completion).
  const std::string why = absl::StrCat("preempted for experiment ", urgent, " (priority 1)");
  EXPECT_THAT(cluster.Trial(preempted).value("state_reason", ""), HasSubstr(why));
  EXPECT_THAT(out, HasSubstr("State reason:"));
  // det-cli shows the reason text itself on both lines, not only the labels.
  const auto line_of = [&](const std::string& label) {
    const size_t at = out.find(label);
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_THAT(line_of("State reason:"), HasSubstr(why)) << out;
  EXPECT_THAT(line_of("Preempted"), HasSubstr(why)) << out;
  const std::string stopped = absl::StrCat("[det-master] trial ", preempted, " stopped at ");
  std::string logs;
  EXPECT_TRUE(PollUntil(
      [&] {
        logs = cluster.TrialLogs(preempted);
        return logs.find("(EXIT_REASON_PREEMPTED)") != std::string::npos && logs.find(stopped) != std::string::npos;
      },
      std::chrono::seconds(30)))
      << logs;
  EXPECT_THAT(logs, HasSubstr(absl::StrCat(": ", why, "; it resumes from its latest checkpoint")));

  ASSERT_TRUE(cluster.WaitForState(urgent, "STATE_COMPLETED", kLong)) << cluster.Trials(urgent).dump();
  ASSERT_TRUE(cluster.WaitForState(low, "STATE_COMPLETED", kLong)) << cluster.Trials(low).dump();
  // Only one trial was preempted, and no preemption counted as a restart.
  int preempted_trials = 0;
  for (const auto& t : cluster.Trials(low)) {
    EXPECT_EQ(t.value("restarts", 0), 0);
    preempted_trials += cluster.TrialLogs(Int(t["id"])).find("preempted for experiment") != std::string::npos;
    EXPECT_EQ(cluster.Trial(Int(t["id"])).value("preemption", ""), "");  // finished: nothing to wait for
  }
  EXPECT_EQ(preempted_trials, 1);

  // The same experiment uninterrupted: identical metrics, bit for bit.
  const int reference = cluster.Create(low_config, "reference");
  ASSERT_GT(reference, 0);
  ASSERT_TRUE(cluster.WaitForState(reference, "STATE_COMPLETED", kLong)) << cluster.Trials(reference).dump();
  for (const auto& t : cluster.Trials(reference)) {
    EXPECT_EQ(cluster.TrialLogs(Int(t["id"])).find("preempted for experiment"), std::string::npos);
  }
  ExpectSameMetrics(cluster, low, reference);
}

// resources.max_slots: 1 on a 2-trial experiment with 2 free slots: at most
// one trial holds a slot at any moment, and both complete.
TEST(PreemptionTest, MaxSlotsCapsConcurrentSlots) {
  TempDir dir;
  Cluster cluster(dir);
  cluster.StartAgent("a", AgentOptions().set_slots(2));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  Config config;
  config.trials = 2;
  config.max_length = 30;
  config.batch_delay_ms = 20;
  config.resources = "  max_slots: 1\n";
  const int exp = cluster.Create(config, "capped");
  ASSERT_GT(exp, 0);
  int most = 0;
  std::set<int64_t> ran;
  ASSERT_TRUE(PollUntil(
      [&] {
        int holding = 0;
        for (const auto& t : cluster.Trials(exp)) {
          if (t.value("allocation_id", "").empty()) continue;
          ++holding;
          ran.insert(Int(t["id"]));
        }
        most = std::max({most, holding, cluster.BusySlots()});
        return cluster.ExperimentState(exp) == "STATE_COMPLETED";
      },
      kLong))
      << cluster.Trials(exp).dump();
  EXPECT_EQ(most, 1);
  EXPECT_EQ(ran.size(), 2u);
  auto trials = cluster.Trials(exp);
  ASSERT_EQ(trials.size(), 2u);
  for (const auto& t : trials) EXPECT_EQ(t.value("state", ""), "STATE_COMPLETED");
}

}  // namespace
}  // namespace det::testing
