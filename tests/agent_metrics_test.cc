// The agent's /metrics end to end (issue 48): a det-agent with
// --metrics-listen 127.0.0.1:0 and the stub libnvidia-ml.so.1 of
// tests/nvml_stub on its LD_LIBRARY_PATH reports the stub's two devices'
// exact figures, its slots, and a running trial's process CPU and memory,
// which vanish when the trial ends; without NVML there is no det_gpu_*
// family at all; a configured token is required (401 without, 200 with);
// a non-loopback listener without a token, or a token file others can read,
// stops the agent at start with the key and the fix.
#include <sys/stat.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The port of "metrics listening on HOST:PORT" in the agent's log; 0 when
// it did not appear within 30 s.
int MetricsPort(Subprocess& agent) {
  static const std::regex kLine("metrics listening on [^ ]+:([0-9]+)");
  int port = 0;
  PollUntil(
      [&] {
        std::smatch m;
        const std::string log = agent.Stdout() + agent.Stderr();
        if (std::regex_search(log, m, kLine)) port = std::stoi(m[1]);
        return port > 0;
      },
      30s);
  return port;
}

// GET /metrics: "<status>\n<body>", "" when no answer.
std::string Scrape(int port, const std::string& token = "") {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  httplib::Result res = client.Get("/metrics", headers);
  return res ? absl::StrCat(res->status, "\n", res->body) : "";
}

// The value of the series written exactly `series` (name and labels) in
// `text`; NaN when absent.
double Value(const std::string& text, const std::string& series) {
  const std::string line_start = series + " ";
  size_t at = text.find("\n" + line_start);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + 1 + line_start.size(), nullptr);
}

// The trial-process series lines of `text`.
std::vector<std::string> TrialProcessLines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = text.find("\ndet_trial_process_", pos)) != std::string::npos) {
    size_t end = text.find('\n', pos + 1);
    out.push_back(text.substr(pos + 1, end - pos - 1));
    pos = end;
  }
  return out;
}

std::string LongTrial(const std::string& checkpoint_dir) {
  return absl::StrCat(
      "name: agent-metrics\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 16\n"
      "  dropout: 0.1\n  batch_delay_ms: 100\nsearcher:\n  name: single\n  metric: validation_loss\n"
      "  smaller_is_better: true\n  max_length:\n    batches: 40\nmin_validation_period:\n  batches: 20\n"
      "max_restarts: 0\nscheduling_unit: 10\ncheckpoint_storage:\n  type: shared_fs\n  host_path: ",
      checkpoint_dir,
      "\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\ndata:\n  train_size: 256\n  val_size: 64\n");
}

AgentOptions WithStubNvml(const std::vector<std::string>& flags) {
  return AgentOptions().set_prefix({"/usr/bin/env", std::string("LD_LIBRARY_PATH=") + DET_NVML_STUB_DIR}).add_flags(flags);
}

TEST(AgentMetrics, StubGpusSlotsAndATrialsProcessThatVanishesWhenItEnds) {
  TempDir dir;
  TestCluster cluster(dir);
  Subprocess& agent = cluster.StartAgent("gpu", WithStubNvml({"--metrics-listen", "127.0.0.1:0"}));
  const int port = MetricsPort(agent);
  ASSERT_GT(port, 0) << cluster.AgentLogs();
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s)) << cluster.AgentLogs();
  std::string text = Scrape(port);
  ASSERT_THAT(text, ::testing::StartsWith("200\n")) << text;
  const std::string dev0 = "{agent=\"gpu\",slot=\"0\",uuid=\"GPU-stub-0\"}";
  const std::string dev1 = "{agent=\"gpu\",slot=\"1\",uuid=\"GPU-stub-1\"}";
  EXPECT_DOUBLE_EQ(Value(text, "det_gpu_utilization_ratio" + dev0), 0.37) << text;
  EXPECT_DOUBLE_EQ(Value(text, "det_gpu_utilization_ratio" + dev1), 0.81) << text;
  EXPECT_DOUBLE_EQ(Value(text, "det_gpu_memory_used_bytes" + dev0), 1 * kGiB) << text;
  EXPECT_DOUBLE_EQ(Value(text, "det_gpu_memory_used_bytes" + dev1), 2 * kGiB) << text;
  EXPECT_DOUBLE_EQ(Value(text, "det_gpu_memory_total_bytes" + dev0), 16 * kGiB) << text;
  EXPECT_DOUBLE_EQ(Value(text, "det_gpu_memory_total_bytes" + dev1), 16 * kGiB) << text;
  EXPECT_DOUBLE_EQ(Value(text, "det_agent_slots{agent=\"gpu\"}"), 1) << text;
  EXPECT_DOUBLE_EQ(Value(text, "det_agent_slots_used{agent=\"gpu\"}"), 0) << text;
  EXPECT_GE(Value(text, "process_resident_memory_bytes"), 0) << text;
  EXPECT_GT(Value(text, "process_start_time_seconds"), 0) << text;
  EXPECT_THAT(text, HasSubstr("\nprocess_cpu_seconds_total "));
  EXPECT_THAT(text, HasSubstr("\ndet_build_info{version=\""));
  EXPECT_TRUE(TrialProcessLines(text).empty()) << text;

  const int exp = cluster.CreateExperiment(LongTrial(dir / "checkpoints"), "agent-metrics");
  ASSERT_GT(exp, 0);
  // While it runs: its rank 0's series, and the slot in use. (Their values
  // are /proc's: a first sample may come before det-trial has even exec'd,
  // so no bound on them here; common/proc_stats_test checks the reading.)
  std::string during;
  ASSERT_TRUE(PollUntil(
      [&] {
        during = Scrape(port);
        return !TrialProcessLines(during).empty();
      },
      120s))
      << "no trial process series while the trial runs\n" << during << cluster.AgentLogs();
  json trials = cluster.Trials(exp);
  ASSERT_EQ(trials.size(), 1u) << trials.dump();
  const std::string trial_id = trials[0]["id"].is_string() ? trials[0]["id"].get<std::string>()
                                                            : std::to_string(trials[0]["id"].get<int64_t>());
  const std::regex labels("\\{agent=\"gpu\",trial=\"" + trial_id + "\",allocation=\"[^\"]+\",rank=\"0\"\\} ");
  std::vector<std::string> lines = TrialProcessLines(during);
  ASSERT_EQ(lines.size(), 2u) << during;
  for (const std::string& line : lines) {
    EXPECT_TRUE(std::regex_search(line, labels)) << line;
    EXPECT_GE(std::strtod(line.substr(line.rfind(' ') + 1).c_str(), nullptr), 0) << line;
  }
  EXPECT_THAT(lines[0], ::testing::StartsWith("det_trial_process_cpu_seconds_total{"));
  EXPECT_THAT(lines[1], ::testing::StartsWith("det_trial_process_resident_memory_bytes{"));
  EXPECT_DOUBLE_EQ(Value(during, "det_agent_slots_used{agent=\"gpu\"}"), 1) << during;

  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 180s)) << cluster.AgentLogs();
  std::string after;
  EXPECT_TRUE(PollUntil(
      [&] {
        after = Scrape(port);
        return TrialProcessLines(after).empty() && Value(after, "det_agent_slots_used{agent=\"gpu\"}") == 0;
      },
      30s))
      << "the ended trial's series are still there\n" << after;
  EXPECT_THAT(after, Not(HasSubstr("det_trial_process_")));
}

TEST(AgentMetrics, WithoutNvmlThereIsNoGpuFamily) {
  TempDir dir;
  TestCluster cluster(dir);
  // No library where it is looked for; and the stub on the path but
  // nvml-library none.
  Subprocess& absent = cluster.StartAgent(
      "absent", AgentOptions().add_flags({"--metrics-listen", "127.0.0.1:0", "--nvml-library",
                                          dir / "no-such-dir/libnvidia-ml.so.1"}));
  Subprocess& off = cluster.StartAgent("off", WithStubNvml({"--metrics-listen", "127.0.0.1:0", "--nvml-library", "none"}));
  for (Subprocess* agent : {&absent, &off}) {
    const int port = MetricsPort(*agent);
    ASSERT_GT(port, 0) << cluster.AgentLogs();
    const std::string text = Scrape(port);
    ASSERT_THAT(text, ::testing::StartsWith("200\n")) << text;
    EXPECT_THAT(text, HasSubstr("\ndet_agent_slots{agent=\""));
    EXPECT_THAT(text, Not(HasSubstr("det_gpu_"))) << text;
  }
}

// A token is required once configured (here on 0.0.0.0, which needs one).
TEST(AgentMetrics, ATokenIsRequiredWhenConfigured) {
  TempDir dir;
  TestCluster cluster(dir);
  const std::string token_file = dir / "metrics-token";
  WriteFile(token_file, "scrape-me-7f3a\n");
  ASSERT_EQ(chmod(token_file.c_str(), 0600), 0);
  Subprocess& agent = cluster.StartAgent(
      "tok", AgentOptions().add_flags({"--metrics-listen", "0.0.0.0:0", "--metrics-token-file", token_file}));
  const int port = MetricsPort(agent);
  ASSERT_GT(port, 0) << cluster.AgentLogs();
  std::string text = Scrape(port);
  EXPECT_THAT(text, ::testing::StartsWith("401\n")) << text;
  EXPECT_THAT(text, Not(HasSubstr("det_agent_slots")));
  EXPECT_THAT(Scrape(port, "wrong"), ::testing::StartsWith("401\n"));
  text = Scrape(port, "scrape-me-7f3a");
  EXPECT_THAT(text, ::testing::StartsWith("200\n")) << text;
  EXPECT_THAT(text, HasSubstr("\ndet_agent_slots{agent=\"tok\"} 1\n"));
}

TEST(AgentMetrics, AnUnsafeListenerStopsTheAgentAtStart) {
  TempDir dir;
  TestCluster cluster(dir);
  Subprocess& open = cluster.StartAgent("open", AgentOptions().add_flags({"--metrics-listen", "0.0.0.0:0"}));
  EXPECT_EQ(open.Wait(30s), 2) << cluster.AgentLogs();
  EXPECT_THAT(open.Stdout() + open.Stderr(),
              HasSubstr("metrics-listen 0.0.0.0:0 is not a loopback address and no metrics-token-file is set"));
  const std::string token_file = dir / "readable-token";
  WriteFile(token_file, "t");
  ASSERT_EQ(chmod(token_file.c_str(), 0644), 0);
  Subprocess& readable = cluster.StartAgent(
      "readable", AgentOptions().add_flags({"--metrics-listen", "127.0.0.1:0", "--metrics-token-file", token_file}));
  EXPECT_EQ(readable.Wait(30s), 2) << cluster.AgentLogs();
  EXPECT_THAT(readable.Stdout() + readable.Stderr(), HasSubstr("chmod 600 " + token_file));
  Subprocess& bad = cluster.StartAgent("bad", AgentOptions().add_flags({"--metrics-listen", "127.0.0.1"}));
  EXPECT_EQ(bad.Wait(30s), 2) << cluster.AgentLogs();
  EXPECT_THAT(bad.Stdout() + bad.Stderr(), HasSubstr("metrics-listen '127.0.0.1': no port"));
}

}  // namespace
}  // namespace det::testing
