// End to end with a real Prometheus (issue 48, must-show 1 and 2): Debian's
// prometheus 2.42 on loopback scrapes a master (its /metrics on the REST
// port, with the scrape token of --metrics-token-file) and an agent (its
// --metrics-listen listener) every second; PromQL over its HTTP API checks
// what an operator would watch. promtool lints both endpoints' output.
// Prometheus and promtool are required (deploy/install-deps.sh installs
// them): without them every test here fails, naming the package.
// The label-cardinality bound (must-show 4) is prometheus_cardinality_test.cc.
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/prometheus_test_cluster.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

// A random search of `trials` concurrent trials, each `batches` batches of
// 100 ms, a training row every 5 batches.
std::string SearchConfig(const std::string& name, int trials, int batches, const std::string& checkpoint_dir) {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: 100
searcher:
  name: random
  metric: validation_loss
  smaller_is_better: true
  max_trials: )", trials, R"(
  max_concurrent_trials: )", trials, R"(
  max_length:
    batches: )", batches, R"(
min_validation_period:
  batches: 30
scheduling_unit: 5
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoint_dir, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
)");
}

// The values of the first series of a query_range result, in time order.
std::vector<double> Values(const json& matrix) {
  std::vector<double> out;
  if (!matrix.is_array() || matrix.empty()) return out;
  for (const auto& v : matrix[0].value("values", json::array())) {
    out.push_back(std::strtod(v[1].get<std::string>().c_str(), nullptr));
  }
  return out;
}

// `values` with runs of equal values collapsed: 0 0 2 2 1 0 -> 0 2 1 0.
std::vector<double> Collapse(const std::vector<double>& values) {
  std::vector<double> out;
  for (double v : values) {
    if (out.empty() || out.back() != v) out.push_back(v);
  }
  return out;
}

// Must show 1, first three bullets: slots used goes 0 -> N -> 0 over a
// two-trial experiment on a two-slot agent, the rows-ingested rate is > 0
// while trials hold slots, and the trials-by-state gauge ends with both
// trials completed.
TEST_F(Prometheus, SlotsUsedRowsIngestedAndCompletedTrialsThroughAnExperiment) {
  StartCluster(2);
  if (HasFatalFailure()) return;
  StartPrometheus();
  if (HasFatalFailure()) return;
  PrometheusServer& prom = *prom_;

  // A 0 scraped before the experiment: the agent's two slots known, none used.
  ASSERT_TRUE(PollUntil(
      [&] { return prom.Value("sum(det_slots)") == 2.0 && prom.Value("sum(det_slots_used)") == 0.0; }, 30s))
      << "det_slots: " << prom.Query("det_slots").dump() << "\ndet_slots_used: " << prom.Query("det_slots_used").dump();
  const double start = UnixNow();

  const int exp = cluster_->CreateExperiment(SearchConfig("prom-search", 2, 60, dir_ / "checkpoints"), "search");
  ASSERT_GT(exp, 0);
  // N = 2 while both trials train, and rows ingested at a positive rate at
  // the same time (one PromQL expression, so one evaluation time).
  const std::string kTraining =
      R"(sum(rate(det_metric_rows_ingested_total{kind="training"}[5s])) > 0 and on() sum(det_slots_used) > 0)";
  bool saw_both = false, saw_rate = false;
  ASSERT_TRUE(PollUntil(
      [&] {
        saw_both = saw_both || prom.Value("sum(det_slots_used)") == 2.0;
        json q = prom.Query(kTraining);
        saw_rate = saw_rate || (q.is_array() && !q.empty());
        return saw_both && saw_rate;
      },
      240s))
      << "slots used 2 seen: " << saw_both << ", rows rate > 0 while training seen: " << saw_rate
      << "\ndet_metric_rows_ingested_total: " << prom.Query("det_metric_rows_ingested_total").dump() << "\n"
      << cluster_->MasterLog();
  ASSERT_TRUE(cluster_->WaitForState(exp, "STATE_COMPLETED", 300s)) << cluster_->ExperimentState(exp);
  // A 0 scraped after the trials released their slots (the latest sample,
  // and 2 was seen since the start).
  ASSERT_TRUE(PollUntil([&] { return prom.Value("sum(det_slots_used)") == 0.0; }, 30s))
      << prom.Query("det_slots_used").dump();
  // One step past now: the last 1 s step of the range falls after that 0.
  const double end = UnixNow() + 1;

  std::string error;
  const std::vector<double> used = Values(prom.QueryRange("sum(det_slots_used)", start, end, 1, &error));
  ASSERT_FALSE(used.empty()) << error;
  const std::vector<double> shape = Collapse(used);
  const std::string shown = absl::StrJoin(shape, " ");
  EXPECT_EQ(shape.front(), 0.0) << shown;
  EXPECT_EQ(shape.back(), 0.0) << shown;
  EXPECT_EQ(*std::max_element(shape.begin(), shape.end()), 2.0) << shown;
  // Over the same range: a step at which training rows came in while slots were used.
  json rate = prom.QueryRange(kTraining, start, end, 1, &error);
  EXPECT_TRUE(rate.is_array() && !rate.empty()) << error << rate.dump();

  // Trials by state: the experiment's two trials completed, and the gauge
  // counts exactly them.
  const json trials = cluster_->Trials(exp);
  ASSERT_EQ(trials.size(), 2u) << trials.dump();
  const std::string completed = absl::StrCat(R"(det_trials{state=")", TrialStateLabel("COMPLETED"), R"("})");
  const double count = static_cast<double>(trials.size());
  EXPECT_TRUE(PollUntil([&] { return prom.Value(completed) == count; }, 30s)) << prom.Query("det_trials").dump();
  EXPECT_EQ(prom.Value("sum(det_trials)"), count) << prom.Query("det_trials").dump();
}

// `det-cli job list --json`: queued jobs per pool (every pool listed by
// the master's pools gets an entry, 0 included). Empty on failure.
std::map<std::string, int> QueuedPerPool(TestCluster& cluster, const std::vector<std::string>& pools) {
  std::string out, err;
  std::map<std::string, int> queued;
  if (cluster.Cli({"job", "list", "--json"}, &out, &err) != 0) {
    ADD_FAILURE() << "job list failed: " << err;
    return queued;
  }
  json j = json::parse(out, nullptr, false);
  if (!j.is_object()) {
    ADD_FAILURE() << "job list --json printed no JSON: " << out;
    return queued;
  }
  for (const auto& p : pools) queued[p] = 0;
  for (const auto& e : j.value("jobs", json::array())) {
    if (e.value("state", "") == "JOB_STATE_QUEUED") ++queued[e.value("resource_pool", "")];
  }
  return queued;
}

// det_job_queue_depth per pool, as Prometheus last scraped it.
std::map<std::string, int> DepthPerPool(PrometheusServer& prom) {
  std::map<std::string, int> depth;
  json q = prom.Query("det_job_queue_depth");
  if (!q.is_array()) return depth;
  for (const auto& s : q) {
    depth[s["metric"].value("pool", "")] = std::atoi(s["value"][1].get<std::string>().c_str());
  }
  return depth;
}

std::string Show(const std::map<std::string, int>& m) {
  return absl::StrJoin(m, ", ", absl::PairFormatter("="));
}

// Must show 1, last bullet: a full pool (one agent, one slot) running one
// long experiment with two more waiting; once det-cli job list is still,
// det_job_queue_depth per pool equals its queued count (then, the
// experiments killed, 0 in both).
TEST_F(Prometheus, QueueDepthMatchesJobListWhileThePoolIsFull) {
  StartCluster(1);
  if (HasFatalFailure()) return;
  StartPrometheus();
  if (HasFatalFailure()) return;
  const std::vector<std::string> pools = Pools();
  ASSERT_FALSE(pools.empty());

  const int a = cluster_->CreateExperiment(SearchConfig("holds-the-slot", 1, 100000, dir_ / "checkpoints"), "a");
  ASSERT_GT(a, 0);
  ASSERT_TRUE(PollUntil([&] { return cluster_->BusySlots() == 1; }, 120s)) << cluster_->MasterLog();
  const int b = cluster_->CreateExperiment(SearchConfig("waits-1", 1, 100000, dir_ / "checkpoints"), "b");
  const int c = cluster_->CreateExperiment(SearchConfig("waits-2", 1, 100000, dir_ / "checkpoints"), "c");
  ASSERT_GT(b, 0);
  ASSERT_GT(c, 0);

  // Still: two queued jobs, as det-cli lists them.
  std::map<std::string, int> listed;
  ASSERT_TRUE(PollUntil(
      [&] {
        listed = QueuedPerPool(*cluster_, pools);
        int total = 0;
        for (const auto& [pool, n] : listed) total += n;
        return total == 2;
      },
      60s))
      << Show(listed);
  std::map<std::string, int> depth;
  EXPECT_TRUE(PollUntil([&] { return (depth = DepthPerPool(*prom_)) == listed; }, 30s))
      << "det_job_queue_depth: " << Show(depth) << "; det-cli job list queued: " << Show(listed);
  // The queue was held still: det-cli still lists the same.
  EXPECT_EQ(QueuedPerPool(*cluster_, pools), listed);

  std::string out, err;
  for (int id : {c, b, a}) ASSERT_EQ(cluster_->Cli({"experiment", "kill", std::to_string(id)}, &out, &err), 0) << err;
  std::map<std::string, int> zeros;
  for (const auto& p : pools) zeros[p] = 0;
  EXPECT_TRUE(PollUntil([&] { return QueuedPerPool(*cluster_, pools) == zeros; }, 60s));
  EXPECT_TRUE(PollUntil([&] { return (depth = DepthPerPool(*prom_)) == zeros; }, 30s))
      << "det_job_queue_depth after the kills: " << Show(depth);
}

// The det_* names in `text` (PromQL), histogram suffixes taken off.
std::set<std::string> DetNames(const std::string& text) {
  std::set<std::string> names;
  for (size_t pos = text.find("det_"); pos != std::string::npos; pos = text.find("det_", pos + 1)) {
    if (pos > 0 && (std::isalnum(static_cast<unsigned char>(text[pos - 1])) || text[pos - 1] == '_')) continue;
    size_t end = pos;
    while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) ++end;
    std::string name = text.substr(pos, end - pos);
    for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        name.resize(name.size() - suffix.size());
        break;
      }
    }
    names.insert(name);
  }
  return names;
}

// The label pairs the selectors of `text` (PromQL) match det_* series on:
// {name, label, value} of each `det_name{label="value", ...}`.
std::vector<std::array<std::string, 3>> DetSelectorLabels(const std::string& text) {
  static const std::regex kSelector(R"re((det_[a-z0-9_]+)\{([^}]*)\})re");
  static const std::regex kPair(R"re(([a-z_]+)\s*=\s*"([^"]*)")re");
  std::vector<std::array<std::string, 3>> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kSelector); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1], labels = (*it)[2];
    for (auto p = std::sregex_iterator(labels.begin(), labels.end(), kPair); p != std::sregex_iterator(); ++p) {
      out.push_back({name, (*p)[1], (*p)[2]});
    }
  }
  return out;
}

// Whether `exposition` has a sample of `name` with label `label`="`value`".
bool Serves(const std::string& exposition, const std::string& name, const std::string& label,
            const std::string& value) {
  const std::string pair = absl::StrCat(label, "=\"", value, "\"");
  for (size_t pos = exposition.find("\n" + name + "{"); pos != std::string::npos;
       pos = exposition.find("\n" + name + "{", pos + 1)) {
    const size_t end = exposition.find('}', pos);
    const std::string labels = exposition.substr(pos, end - pos);
    if (labels.find("{" + pair) != std::string::npos || labels.find("," + pair) != std::string::npos) return true;
  }
  return false;
}

// Must show 2: `promtool check metrics` passes (exit 0, nothing printed) on
// the master's and the agent's /metrics while a trial runs (so the agent's
// per-trial series and the master's request histograms are there; the agent
// loads the stub NVML of tests/nvml_stub, so its det_gpu_* families are
// linted too), and the shipped deploy/prometheus files and the harness's
// own prometheus.yml pass `promtool check config` / `check rules`;
// det-alerts.yml passes its unit tests (`promtool test rules
// det-alerts.test.yml`: every alert fires and stays quiet), and the series
// and label values its selectors name are served.
TEST_F(Prometheus, PromtoolChecksBothEndpointsAndTheShippedFiles) {
  StartCluster(1, /*agent_metrics=*/true, std::string(DET_NVML_STUB_DIR) + "/libnvidia-ml.so.1");
  if (HasFatalFailure()) return;
  const int exp = cluster_->CreateExperiment(SearchConfig("linted", 1, 100000, dir_ / "checkpoints"), "lint");
  ASSERT_GT(exp, 0);
  std::string agent_out, error;
  ASSERT_TRUE(PollUntil(
      [&] {
        agent_out = FetchMetrics(agent_address_, "", &error);
        return agent_out.find("det_trial_process_cpu_seconds_total{") != std::string::npos;
      },
      120s))
      << "the agent's /metrics never showed the running trial's process: " << error << "\n"
      << agent_out;
  for (const char* family : {"det_gpu_utilization_ratio", "det_gpu_memory_used_bytes", "det_gpu_memory_total_bytes"}) {
    EXPECT_NE(agent_out.find(absl::StrCat("\n", family, "{agent=\"agent-one\",slot=\"0\",uuid=\"GPU-stub-0\"} ")),
              std::string::npos)
        << "the agent (stub NVML) does not serve " << family << ":\n"
        << agent_out;
  }
  const std::string master_out = FetchMetrics(MasterAddress(), kScrapeToken, &error);
  ASSERT_FALSE(master_out.empty()) << error;
  for (const auto& [what, text] : {std::pair{"master", master_out}, std::pair{"agent", agent_out}}) {
    std::string lint;
    EXPECT_EQ(PromtoolCheckMetrics(dir_, text, &lint), 0) << what << ": " << lint << "\n" << text;
    EXPECT_EQ(lint, "") << what << "'s /metrics has lint problems:\n" << text;
  }
  std::string out, err;
  ASSERT_EQ(cluster_->Cli({"experiment", "kill", std::to_string(exp)}, &out, &err), 0) << err;

  // The shipped scrape config and alert rules, copied beside the token file
  // they name (promtool checks that it exists); the harness's own config.
  const std::string deploy = std::string(DET_SOURCE_DIR) + "/deploy/prometheus/";
  const std::string alerts = ReadFile(deploy + "det-alerts.yml");
  ASSERT_FALSE(alerts.empty()) << deploy << "det-alerts.yml is missing";
  ASSERT_EQ(mkdir((dir_ / "shipped").c_str(), 0700), 0);
  WriteFile(dir_ / "shipped/prometheus.yml", ReadFile(deploy + "prometheus.yml"));
  WriteFile(dir_ / "shipped/det-alerts.yml", alerts);
  const std::string alert_tests = ReadFile(deploy + "det-alerts.test.yml");
  ASSERT_FALSE(alert_tests.empty()) << deploy << "det-alerts.test.yml is missing";
  WriteFile(dir_ / "shipped/det-alerts.test.yml", alert_tests);
  WriteFile(dir_ / "shipped/det-metrics-token", kScrapeToken);
  WriteFile(dir_ / "harness-prometheus.yml",
            PrometheusConfig({{"det-master", MasterAddress(), token_file_}, {"det-agent", agent_address_, ""}}));
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{kPromtoolBin, "check", "config", dir_ / "harness-prometheus.yml"},
        std::vector<std::string>{kPromtoolBin, "check", "config", dir_ / "shipped/prometheus.yml"},
        std::vector<std::string>{kPromtoolBin, "check", "rules", dir_ / "shipped/det-alerts.yml"},
        std::vector<std::string>{kPromtoolBin, "test", "rules", dir_ / "shipped/det-alerts.test.yml"}}) {
    EXPECT_EQ(RunProcess(argv, &out, &err, 60s), 0) << absl::StrJoin(argv, " ") << ":\n" << out << err;
  }
  // Every det_ series an alert reads is one the master serves.
  for (const std::string& name : DetNames(alerts)) {
    EXPECT_NE(master_out.find("\n# TYPE " + name + " "), std::string::npos)
        << "det-alerts.yml reads " << name << ", which the master's /metrics does not have";
  }
  // ... and every label value a selector matches on is one it serves (e.g.
  // det_agents{state="lost"}: "lost" is one of det_agents' states).
  const std::vector<std::array<std::string, 3>> selectors = DetSelectorLabels(alerts);
  EXPECT_FALSE(selectors.empty()) << "det-alerts.yml has no det_*{label=\"value\"} selector";
  for (const auto& [name, label, value] : selectors) {
    EXPECT_TRUE(Serves(master_out, name, label, value))
        << "det-alerts.yml selects " << name << "{" << label << "=\"" << value
        << "\"}, which the master's /metrics does not serve:\n"
        << master_out;
  }
}

}  // namespace
}  // namespace det::testing
