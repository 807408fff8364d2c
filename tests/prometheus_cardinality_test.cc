// The label-cardinality bound of the master's /metrics (issue 48, must-show
// 4): 1,000 trials add no per-trial series. A grid of 1,000 trials (all
// created at once) on a one-slot agent: some complete, one runs, the rest
// wait, then the experiment is killed. The master's series (name and
// labels) are compared with those after a two-trial warm-up of the same
// shape: a new series may only differ from a warm-up one in the fixed
// request labels (method, route, code), and no label anywhere is named
// after a trial, experiment or allocation or holds one's id.
#include <cctype>
#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/prometheus_test_cluster.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

// A grid of `trials` points of the synthetic trial, 4 batches each.
std::string GridConfig(const std::string& name, int trials) {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size:
    type: int
    minval: 1
    maxval: )", trials, R"(
    count: )", trials, R"(
  dropout: 0.1
searcher:
  name: grid
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 4
min_validation_period:
  batches: 2
scheduling_unit: 2
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 64
  val_size: 32
)");
}

// Labels whose values are fixed request enums: a new value of these in a
// known series shape is a new RPC, route or status, not a new trial.
const std::set<std::string> kRequestLabels = {"method", "route", "code"};
// Labels whose values are numbers by nature (buckets, statuses, versions):
// not searched for ids.
const std::set<std::string> kNumericLabels = {"le", "quantile", "code", "version"};

// Whether `s` has the shape of a series of `before`: same name, same label
// names, equal values outside kRequestLabels.
bool HasKnownShape(const Series& s, const std::set<Series>& before) {
  for (const Series& t : before) {
    if (t.name != s.name || t.labels.size() != s.labels.size()) continue;
    bool same = true;
    for (const auto& [k, v] : s.labels) {
      auto it = t.labels.find(k);
      if (it == t.labels.end() || (kRequestLabels.count(k) == 0 && it->second != v)) {
        same = false;
        break;
      }
    }
    if (same) return true;
  }
  return false;
}

// The all-digit tokens of `value` (split on anything not a letter or digit):
// "/api/v1/trials/17" -> {"17"}.
std::vector<std::string> NumberTokens(const std::string& value) {
  std::vector<std::string> out;
  std::string token;
  for (char c : value + "/") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      token += c;
      continue;
    }
    if (!token.empty() && token.find_first_not_of("0123456789") == std::string::npos) out.push_back(token);
    token.clear();
  }
  return out;
}

// What makes `after` grow with trials compared to `before`, one line each.
std::vector<std::string> PerTrialProblems(const std::set<Series>& before, const std::set<Series>& after,
                                          const std::set<std::string>& ids) {
  std::vector<std::string> problems;
  for (const Series& s : after) {
    if (before.count(s) == 0 && !HasKnownShape(s, before)) {
      problems.push_back("new series " + s.ToString() + " (not a new method/route/code of a known one)");
    }
    for (const auto& [k, v] : s.labels) {
      if (k.find("trial") != std::string::npos || k.find("exp") != std::string::npos ||
          k.find("allocation") != std::string::npos) {
        problems.push_back(absl::StrCat("label ", k, " in ", s.ToString()));
      }
      if (kNumericLabels.count(k) != 0) continue;
      for (const std::string& n : NumberTokens(v)) {
        if (ids.count(n) != 0) problems.push_back(absl::StrCat("label ", k, " holds id ", n, " in ", s.ToString()));
      }
    }
    if (problems.size() > 20) break;
  }
  return problems;
}

// The ids (decimal) of the experiment's trials.
std::set<std::string> TrialIds(TestCluster& cluster, int exp) {
  std::set<std::string> ids;
  json t = cluster.Get(absl::StrCat("/api/v1/experiments/", exp, "/trials?limit=1000"));
  if (t.is_object()) {
    for (const auto& trial : t.value("trials", json::array())) ids.insert(std::to_string(trial.value("id", 0)));
  }
  return ids;
}

// Trials of `exp` in `state` ("STATE_COMPLETED"...), from REST.
int TrialsIn(TestCluster& cluster, int exp, const std::string& state) {
  json t = cluster.Get(absl::StrCat("/api/v1/experiments/", exp, "/trials?limit=1000"));
  int n = 0;
  if (t.is_object()) {
    for (const auto& trial : t.value("trials", json::array())) n += trial.value("state", "") == state ? 1 : 0;
  }
  return n;
}

TEST_F(Prometheus, AThousandTrialsAddNoSeriesToTheMastersMetrics) {
  StartCluster(1, /*agent_metrics=*/false);
  if (HasFatalFailure()) return;
  std::string error;
  auto master_series = [&] {
    const std::string text = FetchMetrics(MasterAddress(), kScrapeToken, &error);
    EXPECT_FALSE(text.empty()) << error;
    std::vector<std::string> bad;
    std::set<Series> s = ParseSeries(text, &bad);
    EXPECT_TRUE(bad.empty()) << "lines that are no sample: " << absl::StrJoin(bad, "\n");
    return s;
  };

  // Warm-up: the same requests and states with two trials.
  const int warm = cluster_->CreateExperiment(GridConfig("warm-up", 2), "warm");
  ASSERT_GT(warm, 0);
  ASSERT_TRUE(cluster_->WaitForState(warm, "STATE_COMPLETED", 300s)) << cluster_->ExperimentState(warm);
  std::set<std::string> ids = TrialIds(*cluster_, warm);
  ids.insert(std::to_string(warm));
  const std::set<Series> before = master_series();

  const int exp = cluster_->CreateExperiment(GridConfig("thousand", 1000), "thousand");
  ASSERT_GT(exp, 0);
  const std::set<std::string> trial_ids = TrialIds(*cluster_, exp);
  ASSERT_EQ(trial_ids.size(), 1000u) << "the grid's trials are not all created at once";
  ids.insert(trial_ids.begin(), trial_ids.end());
  ids.insert(std::to_string(exp));
  // Some completed, one running, the rest waiting.
  ASSERT_TRUE(PollUntil([&] { return TrialsIn(*cluster_, exp, "STATE_COMPLETED") >= 2; }, 300s))
      << cluster_->MasterLog();
  const std::set<Series> during = master_series();
  std::string out, err;
  ASSERT_EQ(cluster_->Cli({"experiment", "kill", std::to_string(exp)}, &out, &err), 0) << err;
  ASSERT_TRUE(PollUntil(
      [&] {
        const std::string s = cluster_->ExperimentState(exp);
        return s == "STATE_CANCELED" || s == "STATE_COMPLETED" || s == "STATE_ERROR";
      },
      120s))
      << cluster_->ExperimentState(exp);
  ASSERT_TRUE(PollUntil([&] { return cluster_->BusySlots() == 0; }, 60s));
  const std::set<Series> after = master_series();

  std::cout << "[ series   ] master /metrics: " << before.size() << " series after 2 trials, " << during.size()
            << " with 1,000 trials (2+ completed, 1 running, the rest waiting), " << after.size()
            << " after the kill" << std::endl;
  // Where the new series are (request histograms of calls the warm-up made not).
  std::map<std::string, int> grown;
  for (const Series& s : after) grown[s.name] += before.count(s) == 0 ? 1 : 0;
  std::string where;
  for (const auto& [name, n] : grown) {
    if (n > 0) absl::StrAppend(&where, where.empty() ? "" : ", ", name, " +", n);
  }
  std::cout << "[ series   ] new after the kill: " << (where.empty() ? "none" : where) << std::endl;
  for (const auto& [when, now] : {std::pair{"with 1,000 trials", &during}, std::pair{"after the kill", &after}}) {
    const std::vector<std::string> problems = PerTrialProblems(before, *now, ids);
    EXPECT_TRUE(problems.empty()) << when << ", the master's series grew with the trials:\n"
                                  << absl::StrJoin(problems, "\n");
  }
}

}  // namespace
}  // namespace det::testing
