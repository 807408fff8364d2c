// The master's GET /metrics end to end (issue 48, P1): a real det-master and
// agent run a small experiment, then the scrape shows every master series
// with bounded labels (route patterns, never raw paths with ids; no
// experiment, trial or user label); an admin's token or the scrape token
// (--metrics-token-file) reads it on the REST port, the metrics listener
// (--metrics-listen) serves /metrics only and needs the token; a
// non-loopback listener without a token, or a token file others may read,
// stops det-master at start with a message naming the flag and the fix.
#include <sys/stat.h>

#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kScrapeToken[] = "scrape-8f2c1e";

std::string TinyConfig(const std::string& checkpoint_dir) {
  return absl::StrCat(R"(name: tiny
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 20
min_validation_period:
  batches: 10
min_checkpoint_period:
  batches: 10
scheduling_unit: 10
checkpoint_storage:
  type: shared_fs
  save_trial_best: 0
  save_trial_latest: 1
  host_path: )", checkpoint_dir, R"(
data:
  train_size: 256
  val_size: 64
)");
}

// The value of the sample named exactly `series` (name and labels as the
// exposition writes them, labels sorted by name); NaN when absent.
double Sample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.size() > series.size() && line.substr(0, series.size()) == series && line[series.size()] == ' ') {
      return std::stod(std::string(line.substr(series.size() + 1)));
    }
  }
  return std::nan("");
}

// Writes the scrape token to dir/metrics-token (mode 0600).
std::string WriteTokenFile(const TempDir& dir, mode_t mode = 0600) {
  const std::string path = dir / "metrics-token";
  WriteFile(path, absl::StrCat(kScrapeToken, "\n"));
  ::chmod(path.c_str(), mode);
  return path;
}

// The port of "metrics listening on HOST:PORT" in the master's log; 0 if
// it does not come within 30 s.
int MetricsListenerPort(TestCluster& cluster) {
  int port = 0;
  const std::regex line("metrics listening on 127\\.0\\.0\\.1:([0-9]+)");
  PollUntil(
      [&] {
        std::smatch m;
        const std::string log = cluster.MasterLog();
        if (!std::regex_search(log, m, line)) return false;
        port = std::stoi(m[1]);
        return true;
      },
      std::chrono::seconds(30));
  return port;
}

httplib::Result Scrape(int port, const std::string& token) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  return client.Get("/metrics", headers);
}

class MetricsEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(
        dir_, TestClusterOptions()
                  .add_master_flags({"--metrics-token-file", WriteTokenFile(dir_), "--metrics-listen", "127.0.0.1:0"})
                  .set_cli_timeout(std::chrono::minutes(5)));
  }
  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(MetricsEndpointTest, AfterAnExperimentEveryMasterSeriesIsThereWithBoundedLabels) {
  cluster_->StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster_->ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  const int exp = cluster_->CreateExperiment(TinyConfig(dir_ / "checkpoints"), "tiny");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(cluster_->WaitForState(exp, "STATE_COMPLETED", std::chrono::minutes(4)))
      << cluster_->MasterLog() << cluster_->AgentLogs();
  // A declared route with an id, and a path no route serves.
  cluster_->Get(absl::StrCat("/api/v1/experiments/", exp));
  cluster_->Get("/api/v1/no-such-route/12345");
  // A request is timed once its answer is sent, the trial's slot is freed
  // when the agent reports its exit, checkpoint GC runs in the master's
  // background pass: poll until all three are in.
  std::string m, content_type;
  int status = 0;
  const char* const k404 = R"(det_rest_request_duration_seconds_count{code="404",route="other"})";
  const char* const kUsed = R"(det_slots_used{agent="a",pool="default"})";
  const char* const kGc = R"(det_checkpoint_bytes_deleted_total{reason="gc"})";
  const bool all_in = PollUntil(
      [&] {
        auto res = Scrape(cluster_->http_port(), kScrapeToken);
        if (!res) return false;
        status = res->status;
        m = res->body;
        content_type = res->get_header_value("Content-Type");
        return Sample(m, k404) >= 1 && Sample(m, kUsed) == 0 && Sample(m, kGc) > 0;
      },
      std::chrono::seconds(10));
  ASSERT_TRUE(all_in) << "within 10 s the last scrape (HTTP " << status << ") did not show all of: " << k404
                      << " >= 1 (it shows " << Sample(m, k404) << "), " << kUsed << " 0 (" << Sample(m, kUsed)
                      << "), " << kGc << " > 0 (" << Sample(m, kGc) << ")\n"
                      << m << cluster_->MasterLog();
  ASSERT_EQ(status, 200) << m;
  EXPECT_EQ(content_type, "text/plain; version=0.0.4; charset=utf-8");
  SCOPED_TRACE(m);
  EXPECT_EQ(Sample(m, R"(det_slots{agent="a",pool="default"})"), 1);
  EXPECT_EQ(Sample(m, R"(det_slots_used{agent="a",pool="default"})"), 0);
  EXPECT_EQ(Sample(m, R"(det_agents{state="connected"})"), 1);
  EXPECT_EQ(Sample(m, R"(det_agents{state="lost"})"), 0);
  EXPECT_EQ(Sample(m, R"(det_experiments{state="COMPLETED"})"), 1);
  EXPECT_EQ(Sample(m, R"(det_experiments{state="ACTIVE"})"), 0);
  EXPECT_EQ(Sample(m, R"(det_trials{state="COMPLETED"})"), 1);
  EXPECT_EQ(Sample(m, R"(det_trials{state="WAITING"})"), 0);
  EXPECT_EQ(Sample(m, R"(det_job_queue_depth{pool="default"})"), 0);
  EXPECT_GT(Sample(m, R"(det_metric_rows_ingested_total{kind="training"})"), 0)
      << cluster_->Metrics(cluster_->Trials(exp)[0]["id"].get<int>(), "training").dump();
  EXPECT_GT(Sample(m, R"(det_metric_rows_ingested_total{kind="validation"})"), 0);
  EXPECT_EQ(Sample(m, R"(det_metric_rows_ingested_total{kind="other"})"), 0);
  EXPECT_GT(Sample(m, "det_log_lines_ingested_total"), 0);
  EXPECT_GT(Sample(m, "det_checkpoint_bytes_written_total"), 0);
  // Two checkpoints (batches 10 and 20); GC keeps the latest only.
  EXPECT_GT(Sample(m, R"(det_checkpoint_bytes_deleted_total{reason="gc"})"), 0);
  EXPECT_LT(Sample(m, R"(det_checkpoint_bytes_deleted_total{reason="gc"})"),
            Sample(m, "det_checkpoint_bytes_written_total"));
  EXPECT_EQ(Sample(m, R"(det_checkpoint_bytes_deleted_total{reason="user"})"), 0);
  EXPECT_GE(Sample(m, R"(det_grpc_request_duration_seconds_count{code="OK",method="CreateExperiment"})"), 1);
  EXPECT_GE(Sample(m, R"(det_grpc_request_duration_seconds_count{code="OK",method="CompleteSearcherOperation"})"), 1);
  EXPECT_GE(Sample(m, R"(det_rest_request_duration_seconds_count{code="200",route="POST /api/v1/auth/login"})"), 1);
  EXPECT_GE(Sample(m, R"(det_rest_request_duration_seconds_count{code="200",)"
                      R"(route="GET /api/v1/experiments/{experiment_id}"})"),
            1);
  EXPECT_EQ(Sample(m, R"(det_rest_request_duration_seconds_count{code="404",route="other"})"), 1);
  EXPECT_GT(Sample(m, "det_sqlite_write_transaction_duration_seconds_count"), 0);
  EXPECT_EQ(Sample(m, R"(det_stream_subscribers{stream="Connect"})"), 1) << "the agent's Connect stream";
  EXPECT_GT(Sample(m, "process_cpu_seconds_total"), 0);
  EXPECT_GT(Sample(m, "process_resident_memory_bytes"), 0);
  EXPECT_GT(Sample(m, "process_open_fds"), 0);
  EXPECT_GT(Sample(m, "process_max_fds"), 0);
  EXPECT_GT(Sample(m, "process_start_time_seconds"), 0);
  EXPECT_EQ(Sample(m, R"(det_build_info{version="0.2.0"})"), 1);
  // Bounded labels: no raw path with an id, no per-object label.
  EXPECT_THAT(m, Not(HasSubstr(absl::StrCat("/api/v1/experiments/", exp, "\""))));
  EXPECT_THAT(m, Not(HasSubstr("12345")));
  for (absl::string_view line : absl::StrSplit(m, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    for (const char* label : {"{experiment=", ",experiment=", "{trial=", ",trial=", "{user=", ",user=", "_id="}) {
      EXPECT_THAT(std::string(line), Not(HasSubstr(label))) << label;
    }
  }
}

TEST_F(MetricsEndpointTest, AnAdminOrTheScrapeTokenReadsItOthersAreRefused) {
  const int http = cluster_->http_port();
  auto none = Scrape(http, "");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401) << none->body;
  EXPECT_THAT(none->body, HasSubstr("--metrics-token-file"));
  auto user = Scrape(http, RestLogin(http, "determined"));
  ASSERT_TRUE(user);
  EXPECT_EQ(user->status, 403) << user->body;
  EXPECT_THAT(user->body, HasSubstr("'determined' is not an admin"));
  auto wrong = Scrape(http, "not-the-token");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401) << wrong->body;
  auto admin = Scrape(http, RestLogin(http, "admin"));
  ASSERT_TRUE(admin);
  EXPECT_EQ(admin->status, 200) << admin->body;
  EXPECT_THAT(admin->body, HasSubstr("det_build_info"));
  auto scrape = Scrape(http, kScrapeToken);
  ASSERT_TRUE(scrape);
  EXPECT_EQ(scrape->status, 200) << scrape->body;

  // The listener: /metrics only, and the token (one is configured).
  const int port = MetricsListenerPort(*cluster_);
  ASSERT_GT(port, 0) << cluster_->MasterLog();
  ASSERT_NE(port, http);
  auto listener = Scrape(port, kScrapeToken);
  ASSERT_TRUE(listener);
  EXPECT_EQ(listener->status, 200) << listener->body;
  EXPECT_THAT(listener->body, HasSubstr("det_agents{state=\"connected\"}"));
  auto listener_none = Scrape(port, "");
  ASSERT_TRUE(listener_none);
  EXPECT_EQ(listener_none->status, 401) << listener_none->body;
  httplib::Client client("127.0.0.1", port);
  auto api = client.Get("/api/v1/master", {{"Authorization", std::string("Bearer ") + kScrapeToken}});
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 404) << api->body;
  EXPECT_THAT(api->body, HasSubstr("serves GET /metrics only"));
}

// async_halving over 2 trials, rungs at 20 and 40 batches, divisor 2 (the
// first rung-0 result promotes nobody, so that trial waits for the
// searcher); a checkpoint every 10 batches, none removed by GC.
std::string WaitingYaml(const std::string& checkpoint_dir) {
  return absl::StrCat(
      "name: waiting\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 16\n"
      "  dropout: 0.1\nsearcher:\n  name: async_halving\n  num_rungs: 2\n  divisor: 2\n  max_trials: 2\n"
      "  metric: validation_loss\n  smaller_is_better: true\n  max_length:\n    batches: 40\n"
      "scheduling_unit: 10\nmin_checkpoint_period:\n  batches: 10\ncheckpoint_storage:\n  type: shared_fs\n"
      "  save_trial_best: 10\n  save_trial_latest: 10\n  host_path: ",
      checkpoint_dir,
      "\nreproducibility:\n  experiment_seed: 3\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
      "data:\n  train_size: 256\n  val_size: 64\n");
}

// A scrape through the REST port with the scrape token ("" when no answer).
std::string ScrapeText(TestCluster& cluster) {
  auto res = Scrape(cluster.http_port(), kScrapeToken);
  return res && res->status == 200 ? res->body : "";
}

// Review findings 5, 6 and the configured pools: a pool with no agent and no
// job has det_job_queue_depth 0 and no det_slots; det_trials counts a trial
// waiting for the searcher as WAITING, as det-cli's trial list shows it;
// checkpoints deleted by a user and by deleting their experiment are counted
// in det_checkpoint_bytes_deleted_total, by reason, to the byte.
TEST(MetricsEndpointStateTest, ConfiguredPoolsWaitingTrialsAndEveryCheckpointDeletion) {
  TempDir dir;
  const std::string pools = dir / "pools.yaml";
  WriteFile(pools, "resource_pools:\n  - pool_name: default\n  - pool_name: idle\n");
  TestCluster cluster(dir, TestClusterOptions()
                               .add_master_flags({"--metrics-token-file", WriteTokenFile(dir), "--resource-pools", pools})
                               .set_cli_timeout(std::chrono::minutes(2)));
  std::string m = ScrapeText(cluster);
  ASSERT_FALSE(m.empty()) << cluster.MasterLog();
  EXPECT_EQ(Sample(m, R"(det_job_queue_depth{pool="idle"})"), 0) << m;
  EXPECT_EQ(Sample(m, R"(det_job_queue_depth{pool="default"})"), 0) << m;
  EXPECT_THAT(m, Not(HasSubstr("det_slots{"))) << "no agent: no det_slots series";

  // Trial 2 is paused before any agent comes, so trial 1 waits for it.
  const int exp = cluster.CreateExperiment(WaitingYaml(dir / "checkpoints"), "waiting");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(PollUntil([&] { return cluster.Trials(exp).size() == 2; }, std::chrono::seconds(30)));
  const std::string t1 = cluster.Trials(exp)[0]["id"].dump(), t2 = cluster.Trials(exp)[1]["id"].dump();
  ASSERT_EQ(cluster.Cli({"trial", "pause", t2}), 0);
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.Trial(std::stoll(t1)).value("state", "") == "STATE_WAITING"; },
                        std::chrono::seconds(120)))
      << cluster.Trial(std::stoll(t1)).dump() << cluster.MasterLog();
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"experiment", "list-trials", std::to_string(exp), "--json"}, &out, &err), 0) << err;
  std::map<std::string, int> listed;
  const nlohmann::json trials = nlohmann::json::parse(out);
  for (const auto& t : trials["trials"]) ++listed[t.value("state", "")];
  ASSERT_EQ(listed["STATE_WAITING"], 1) << out;
  m = ScrapeText(cluster);
  for (const char* state : {"WAITING", "ACTIVE", "PAUSED", "COMPLETED"}) {
    EXPECT_EQ(Sample(m, absl::StrCat("det_trials{state=\"", state, "\"}")), listed[absl::StrCat("STATE_", state)])
        << state << "\n" << out << "\n" << m;
  }
  EXPECT_EQ(Sample(m, R"(det_job_queue_depth{pool="idle"})"), 0);
  EXPECT_EQ(Sample(m, R"(det_slots{agent="a",pool="default"})"), 1);
  for (absl::string_view line : absl::StrSplit(m, '\n')) {
    if (absl::StartsWith(line, "det_slots")) EXPECT_THAT(std::string(line), Not(HasSubstr("idle"))) << line;
  }

  // Kill, then delete the first checkpoint by hand and the rest with the
  // experiment.
  ASSERT_EQ(cluster.Cli({"experiment", "kill", std::to_string(exp)}), 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_CANCELED", std::chrono::seconds(60))) << cluster.ExperimentState(exp);
  ASSERT_EQ(cluster.Cli({"checkpoint", "list", std::to_string(exp), "--json"}, &out, &err), 0) << err;
  std::vector<std::pair<std::string, double>> checkpoints;  // uuid, bytes, by batches
  double all_bytes = 0;
  const nlohmann::json listed_checkpoints = nlohmann::json::parse(out);
  for (const auto& c : listed_checkpoints["checkpoints"]) {
    const nlohmann::json& size = c["size_bytes"];  // int64: a string in protobuf JSON
    const double bytes = size.is_string() ? std::stod(size.get<std::string>()) : size.get<double>();
    checkpoints.emplace_back(c.value("uuid", ""), bytes);
    all_bytes += bytes;
  }
  ASSERT_EQ(checkpoints.size(), 2u) << out;  // trial 1's at 10 and 20 batches
  ASSERT_GT(checkpoints[0].second, 0) << out;
  m = ScrapeText(cluster);
  EXPECT_EQ(Sample(m, "det_checkpoint_bytes_written_total"), all_bytes) << out;
  ASSERT_EQ(cluster.Cli({"checkpoint", "delete", "--yes", checkpoints[0].first}, &out, &err), 0) << err;
  m = ScrapeText(cluster);
  EXPECT_EQ(Sample(m, R"(det_checkpoint_bytes_deleted_total{reason="user"})"), checkpoints[0].second) << m;
  EXPECT_EQ(Sample(m, R"(det_checkpoint_bytes_deleted_total{reason="experiment_delete"})"), 0);
  ASSERT_EQ(cluster.Cli({"experiment", "delete", "--yes", std::to_string(exp)}, &out, &err), 0) << err;
  int status = 0;
  ASSERT_TRUE(PollUntil(
      [&] {
        cluster.Get(absl::StrCat("/api/v1/experiments/", exp), &status);
        return status == 404;
      },
      std::chrono::seconds(60)))
      << status;
  m = ScrapeText(cluster);
  // The checkpoint deleted by hand is not counted again.
  EXPECT_EQ(Sample(m, R"(det_checkpoint_bytes_deleted_total{reason="experiment_delete"})"), checkpoints[1].second)
      << m;
  EXPECT_EQ(Sample(m, R"(det_checkpoint_bytes_deleted_total{reason="user"})"), checkpoints[0].second);
  EXPECT_EQ(Sample(m, R"(det_checkpoint_bytes_deleted_total{reason="gc"})"), 0);
}

// det-master with `flags` (and a fresh data dir) must exit 2 within 60 s;
// returns its stderr.
std::string RefusedAtStart(const TempDir& dir, std::vector<std::string> flags) {
  std::vector<std::string> argv{std::string(kTestBinDir) + "/det-master", "--data-dir", dir / "master",
                                "--grpc-port", "0", "--http-port", "0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::string out, err;
  EXPECT_EQ(RunProcess(argv, &out, &err, std::chrono::seconds(60)), 2) << out << err;
  return err;
}

TEST(MetricsEndpointStart, ANonLoopbackListenerWithoutATokenOrAReadableTokenFileIsRefused) {
  TempDir dir;
  const std::string err = RefusedAtStart(dir, {"--metrics-listen", "0.0.0.0:0"});
  EXPECT_THAT(err, HasSubstr("--metrics-listen '0.0.0.0:0': 0.0.0.0 is not a loopback address"));
  EXPECT_THAT(err, HasSubstr("give --metrics-token-file too, or listen on 127.0.0.1"));
  const std::string open = WriteTokenFile(dir, 0644);
  EXPECT_THAT(RefusedAtStart(dir, {"--metrics-token-file", open, "--metrics-listen", "0.0.0.0:0"}),
              HasSubstr("group or others may access it (mode 644); it holds a secret: chmod 600 " + open));
  WriteFile(dir / "empty-token", "\n");
  ::chmod((dir / "empty-token").c_str(), 0600);
  EXPECT_THAT(RefusedAtStart(dir, {"--metrics-token-file", dir / "empty-token"}),
              HasSubstr("--metrics-token-file " + (dir / "empty-token") + ": empty"));
  EXPECT_THAT(RefusedAtStart(dir, {"--metrics-listen", "127.0.0.1:99999"}), HasSubstr("PORT must be 0"));
}

}  // namespace
}  // namespace det::testing
