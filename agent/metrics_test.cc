#include "agent/metrics.h"

#include "agent/agent_metrics.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

AgentMetricsInput Base() {
  AgentMetricsInput in;
  in.agent_id = "node-1";
  in.version = "0.2.0";
  in.slots = 2;
  in.slots_used = 1;
  return in;
}

TEST(AgentMetricsTest, SlotsAndBuildInfo) {
  std::string text = RenderAgentMetrics(Base());
  EXPECT_THAT(text, HasSubstr("# TYPE det_agent_slots gauge\ndet_agent_slots{agent=\"node-1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("det_agent_slots_used{agent=\"node-1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("det_build_info{version=\"0.2.0\"} 1\n"));
}

// Without NVML the GPU families are absent, not zeros; nor is there any
// trial family without a running process, or process_* without self stats.
TEST(AgentMetricsTest, NoNvmlNoGpuFamilies) {
  std::string text = RenderAgentMetrics(Base());
  EXPECT_THAT(text, Not(HasSubstr("det_gpu_")));
  EXPECT_THAT(text, Not(HasSubstr("det_trial_process_")));
  EXPECT_THAT(text, Not(HasSubstr("process_cpu_seconds_total")));
}

TEST(AgentMetricsTest, GpuFiguresPerSlot) {
  AgentMetricsInput in = Base();
  in.gpus = std::vector<GpuSample>{{0, "GPU-a", 0.37, 1073741824ull, 17179869184ull},
                                   {1, "GPU-b", 0.75, 2147483648ull, 17179869184ull}};
  std::string text = RenderAgentMetrics(in);
  EXPECT_THAT(text, HasSubstr("# TYPE det_gpu_utilization_ratio gauge\n"));
  EXPECT_THAT(text, HasSubstr("det_gpu_utilization_ratio{agent=\"node-1\",slot=\"0\",uuid=\"GPU-a\"} 0.37\n"));
  EXPECT_THAT(text, HasSubstr("det_gpu_utilization_ratio{agent=\"node-1\",slot=\"1\",uuid=\"GPU-b\"} 0.75\n"));
  EXPECT_THAT(text, HasSubstr("det_gpu_memory_used_bytes{agent=\"node-1\",slot=\"1\",uuid=\"GPU-b\"} 2147483648\n"));
  EXPECT_THAT(text, HasSubstr("det_gpu_memory_total_bytes{agent=\"node-1\",slot=\"0\",uuid=\"GPU-a\"} 17179869184\n"));
}

// A figure NVML refused for one device (issue 48 review, 12c) has no
// series; the device's other figures and the other devices keep theirs.
TEST(AgentMetricsTest, ARefusedFigureHasNoSeries) {
  AgentMetricsInput in = Base();
  in.gpus = std::vector<GpuSample>{{0, "GPU-a", 0.37, 1, 2}, {1, "GPU-b", 0, 3, 4}};
  (*in.gpus)[1].has_utilization = false;
  std::string text = RenderAgentMetrics(in);
  EXPECT_THAT(text, HasSubstr("det_gpu_utilization_ratio{agent=\"node-1\",slot=\"0\",uuid=\"GPU-a\"} 0.37\n"));
  EXPECT_THAT(text, Not(HasSubstr("det_gpu_utilization_ratio{agent=\"node-1\",slot=\"1\"")));
  EXPECT_THAT(text, HasSubstr("det_gpu_memory_used_bytes{agent=\"node-1\",slot=\"1\",uuid=\"GPU-b\"} 3\n"));
}

TEST(AgentMetricsTest, TrialProcessesAndSelf) {
  AgentMetricsInput in = Base();
  ProcStats trial;
  trial.cpu_seconds = 1.5;
  trial.rss_bytes = 4096;
  in.trial_processes.push_back({7, "7.1", 0, trial});
  ProcStats self;
  self.cpu_seconds = 2.25;
  self.rss_bytes = 8192;
  self.open_fds = 12;
  self.max_fds = 1024;
  self.start_time_seconds = 1700000000;
  in.self = self;
  std::string text = RenderAgentMetrics(in);
  EXPECT_THAT(text, HasSubstr("# TYPE det_trial_process_cpu_seconds_total counter\n"
                              "det_trial_process_cpu_seconds_total{agent=\"node-1\",trial=\"7\",allocation=\"7.1\","
                              "rank=\"0\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("det_trial_process_resident_memory_bytes{agent=\"node-1\",trial=\"7\","
                              "allocation=\"7.1\",rank=\"0\"} 4096\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 2.25\n"));
  EXPECT_THAT(text, HasSubstr("process_resident_memory_bytes 8192\n"));
  EXPECT_THAT(text, HasSubstr("process_open_fds 12\n"));
  EXPECT_THAT(text, HasSubstr("process_max_fds 1024\n"));
  EXPECT_THAT(text, HasSubstr("process_start_time_seconds 1700000000\n"));
}

// A label value from outside (a uuid NVML reports) is escaped, never breaks
// the format.
TEST(AgentMetricsTest, LabelValuesAreEscaped) {
  AgentMetricsInput in = Base();
  in.gpus = std::vector<GpuSample>{{0, "GPU-\"x\"\\", 0.5, 1, 2}};
  EXPECT_THAT(RenderAgentMetrics(in), HasSubstr("uuid=\"GPU-\\\"x\\\"\\\\\"} 0.5\n"));
}

// det-agent's flags: a token file or an NVML library without a listener is
// a mistake named at start, not ignored; no listener is no endpoint.
TEST(AgentMetricsFlagsTest, KeysWithoutAListenerAreRefusedNamingThem) {
  AgentOptions options;
  options.agent_id = "a";
  options.work_dir = "/nonexistent/det-agent-metrics-test";
  Agent agent(options);
  absl::StatusOr<AgentMetricsEndpoint> none = StartAgentMetrics({}, agent, "a");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->server, nullptr);
  EXPECT_EQ(none->nvml, nullptr);
  absl::StatusOr<AgentMetricsEndpoint> e = StartAgentMetrics({"", "/etc/det/metrics-token", ""}, agent, "a");
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("metrics-token-file is set but metrics-listen is not"));
  e = StartAgentMetrics({"", "", "none"}, agent, "a");
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("nvml-library is set but metrics-listen is not"));
  e = StartAgentMetrics({"127.0.0.1:0", "", std::string(5000, 'x')}, agent, "a");
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("nvml-library is longer than 4096 bytes"));
}

// A rank whose process exited but is not reaped yet (a zombie: RSS 0) has
// no series; a running one has.
TEST(AgentMetricsTest, AZombieRankIsLeftOut) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  absl::StatusOr<ProcStats> stats = ReadProcStats(child);
  while (stats.ok() && stats->state != 'Z' && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    stats = ReadProcStats(child);
  }
  ASSERT_TRUE(stats.ok() && stats->state == 'Z') << "child " << child << " did not become a zombie";
  std::vector<TrialProcessSample> samples =
      SampleTrialProcesses({Agent::RunningRank{7, "a-zombie", 0, child}, Agent::RunningRank{8, "a-live", 1, ::getpid()}});
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].allocation_id, "a-live");
  EXPECT_GT(samples[0].stats.rss_bytes, 0u);
}

}  // namespace
}  // namespace det::agent
