// End-to-end tests of issue 15's metrics and logs part against a real master
// and agent: an "inference" metric group reported with ctx.report_metrics
// read back by group; the experiment's validation history; a
// StreamTrialMetrics subscriber that reconnects mid-trial with its cursor;
// the REST NDJSON form; every TrialLogs filter; the master's own logs.
#include <gtest/gtest.h>

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "det/api/v1/api.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
namespace v1 = ::det::api::v1;

const std::string kTrialSo = std::string(DET_TRIALS_DIR) + "/metrics_logs_trial.so";

// One trial of `batches` batches, validating every 10 and reporting every 5.
std::string Config(const std::string& checkpoint_dir, int batches, int delay_ms) {
  return absl::StrCat(R"(name: metrics-logs
hyperparameters:
  global_batch_size: 8
  learning_rate: 0.05
  batch_delay_ms: )", delay_ms, R"(
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: )", batches, R"(
min_validation_period:
  batches: 10
scheduling_unit: 5
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoint_dir, "\n");
}

std::unique_ptr<v1::Determined::Stub> Stub(TestCluster& cluster) {
  return v1::Determined::NewStub(grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials()));
}

void Authorize(grpc::ClientContext* ctx, const std::string& token) {
  ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(3));
}

// Every report of the trial (all groups, archived included) by id.
std::vector<v1::MetricsReport> AllReports(v1::Determined::Stub& stub, const std::string& token, int64_t trial,
                                          const std::string& group = "") {
  grpc::ClientContext ctx;
  Authorize(&ctx, token);
  v1::GetTrialMetricsRequest req;
  req.set_trial_id(trial);
  req.set_group(group);
  req.set_include_archived(true);
  v1::GetTrialMetricsResponse resp;
  grpc::Status st = stub.GetTrialMetrics(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return {resp.metrics().begin(), resp.metrics().end()};
}

// An int64 of protobuf's JSON mapping (a string) or a plain number.
int64_t Int(const nlohmann::json& j) {
  return j.is_string() ? std::stoll(j.get<std::string>()) : j.get<int64_t>();
}

int64_t FirstTrial(TestCluster& cluster, int64_t exp) {
  int64_t trial = 0;
  EXPECT_TRUE(PollUntil(
      [&] {
        nlohmann::json trials = cluster.Trials(exp);
        if (trials.empty()) return false;
        trial = Int(trials[0]["id"]);
        return true;
      },
      60s));
  return trial;
}

TEST(MetricsLogsApiTest, InferenceGroupHistoryAndAStreamThatReconnects) {
  TempDir dir;
  IsolateCliAuth(dir.path());
  TestCluster cluster(dir);
  cluster.StartAgent("a1");
  const int64_t exp = cluster.CreateExperiment(Config(dir / "checkpoints", 60, 100), "ml", kTrialSo);
  ASSERT_GT(exp, 0);
  const int64_t trial = FirstTrial(cluster, exp);
  ASSERT_GT(trial, 0);
  auto stub = Stub(cluster);
  const std::string token = cluster.Token();

  // A follower: reads a few reports, goes away, comes back with its cursor.
  std::vector<int64_t> ids;
  int64_t cursor = 0;
  {
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    v1::StreamTrialMetricsRequest req;
    req.add_trial_ids(trial);
    req.set_follow(true);
    auto reader = stub->StreamTrialMetrics(&ctx, req);
    v1::StreamTrialMetricsResponse resp;
    while (ids.size() < 5 && reader->Read(&resp)) {
      ASSERT_GT(resp.metrics_size(), 0);
      for (const auto& m : resp.metrics()) ids.push_back(m.id());
      EXPECT_EQ(resp.next_after_id(), resp.metrics(resp.metrics_size() - 1).id());
      cursor = resp.next_after_id();
    }
    ASSERT_GE(ids.size(), 5u) << cluster.MasterLog();
    ctx.TryCancel();
    reader->Finish();
  }
  EXPECT_NE(cluster.ExperimentState(exp), "STATE_COMPLETED") << "the trial ended before the reconnect";
  {
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    v1::StreamTrialMetricsRequest req;
    req.add_trial_ids(trial);
    req.set_after_id(cursor);
    req.set_follow(true);
    auto reader = stub->StreamTrialMetrics(&ctx, req);
    v1::StreamTrialMetricsResponse resp;
    while (reader->Read(&resp)) {
      for (const auto& m : resp.metrics()) ids.push_back(m.id());
    }
    grpc::Status st = reader->Finish();  // ends by itself once the trial is terminal
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 180s)) << cluster.MasterLog() << cluster.AgentLogs();

  // Exactly once: the union is every stored report, none twice.
  std::vector<int64_t> stored;
  for (const auto& m : AllReports(*stub, token, trial)) stored.push_back(m.id());
  std::sort(stored.begin(), stored.end());
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), ids.size()) << "a report arrived twice";
  EXPECT_EQ(ids, stored);

  // The inference group: one report per batch, read back by group.
  std::vector<v1::MetricsReport> inference = AllReports(*stub, token, trial, "inference");
  ASSERT_EQ(inference.size(), 60u);
  std::set<int64_t> batches;
  for (const auto& m : inference) {
    EXPECT_EQ(m.group(), "inference");
    ASSERT_EQ(m.metrics().count("latency_ms"), 1u);
    // Reported at the batch being trained (batch_idx: the trial's total batches).
    EXPECT_DOUBLE_EQ(m.metrics().at("latency_ms"), 0.5 * static_cast<double>(m.total_batches()));
    batches.insert(m.total_batches());
  }
  EXPECT_EQ(batches.size(), 60u);  // at the total batches of each report
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"trial", "metrics", std::to_string(trial), "--group", "inference"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("latency_ms"), std::string::npos) << out;
  EXPECT_NE(out.find("inference"), std::string::npos) << out;
  // Every report through det-cli: --full pages (one JSON line each), and
  // --follow on the ended trial prints the stored ones and returns.
  ASSERT_EQ(cluster.Cli({"trial", "metrics", std::to_string(trial), "--group", "inference", "--full", "--json"}, &out,
                        &err),
            0)
      << err;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 60) << out;
  ASSERT_EQ(cluster.Cli({"trial", "metrics", std::to_string(trial), "--group", "inference", "--follow"}, &out, &err),
            0)
      << err;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 60) << out;
  EXPECT_NE(out.find(" inference latency_ms="), std::string::npos) << out;

  // Validation history: the best-so-far sequence of the stored validations.
  std::vector<v1::MetricsReport> validations = AllReports(*stub, token, trial, "validation");
  ASSERT_GE(validations.size(), 6u);
  std::vector<double> expected;
  for (const auto& v : validations) {
    double x = v.metrics().at("validation_loss");
    if (expected.empty() || x < expected.back()) expected.push_back(x);
  }
  nlohmann::json history = cluster.Get(absl::StrCat("/api/v1/experiments/", exp, "/validation-history"));
  ASSERT_TRUE(history.contains("validation_history")) << history.dump();
  std::vector<double> got;
  for (const auto& e : history["validation_history"]) {
    got.push_back(e["searcher_metric"].get<double>());
    EXPECT_EQ(Int(e["trial_id"]), trial);
  }
  EXPECT_EQ(got, expected);
  ASSERT_EQ(cluster.Cli({"experiment", "validation-history", std::to_string(exp)}, &out, &err), 0) << err;
  EXPECT_NE(out.find("SEARCHER METRIC"), std::string::npos) << out;

  // REST NDJSON: the declared GET route and the generic POST, one message a line.
  auto ndjson_reports = [](const std::string& body) {
    size_t n = 0;
    for (absl::string_view line : absl::StrSplit(body, '\n', absl::SkipEmpty())) {
      nlohmann::json j = nlohmann::json::parse(line);
      n += j["metrics"].size();
      EXPECT_EQ(Int(j["next_after_id"]), Int(j["metrics"].back()["id"]));
    }
    return n;
  };
  auto get = cluster.Http("GET", absl::StrCat("/api/v1/trials/", trial, "/metrics/stream?group=inference"),
                          {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(get && get->status == 200) << (get ? get->body : "no answer");
  EXPECT_EQ(get->get_header_value("Content-Type"), "application/x-ndjson");
  EXPECT_EQ(ndjson_reports(get->body), 60u);
  auto post = cluster.Http("POST", "/api/v1/StreamTrialMetrics", {{"Authorization", "Bearer " + token}},
                           nlohmann::json{{"trial_ids", {trial}}, {"after_id", cursor}}.dump());
  ASSERT_TRUE(post && post->status == 200) << (post ? post->body : "no answer");
  EXPECT_EQ(ndjson_reports(post->body),
            static_cast<size_t>(std::count_if(stored.begin(), stored.end(), [&](int64_t id) { return id > cursor; })));
}

TEST(MetricsLogsApiTest, StreamRequestsAreBoundedAndChecked) {
  TempDir dir;
  TestCluster cluster(dir);
  auto stub = Stub(cluster);
  auto status_of = [&](const v1::StreamTrialMetricsRequest& req) {
    grpc::ClientContext ctx;
    Authorize(&ctx, cluster.Token());
    auto reader = stub->StreamTrialMetrics(&ctx, req);
    v1::StreamTrialMetricsResponse resp;
    while (reader->Read(&resp)) {
    }
    return reader->Finish();
  };
  v1::StreamTrialMetricsRequest none;
  EXPECT_EQ(status_of(none).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::StreamTrialMetricsRequest unknown;
  unknown.add_trial_ids(424242);
  EXPECT_EQ(status_of(unknown).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::StreamTrialMetricsRequest many;
  for (int i = 1; i <= 1001; ++i) many.add_trial_ids(i);
  grpc::Status st = status_of(many);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("1000"), std::string::npos) << st.error_message();
  int status = 0;
  cluster.Get("/api/v1/trials/1/metrics?group=..%2Fetc", &status);
  EXPECT_EQ(status, 400);
}

// The attack: one user opening streams without end. The 17th concurrent
// metric stream of a user is refused; the others keep theirs.
TEST(MetricsLogsApiTest, AUserHoldsAtMost16MetricStreams) {
  TempDir dir;
  TestCluster cluster(dir);  // no agent: the trial waits, its streams stay open
  const int64_t exp = cluster.CreateExperiment(Config(dir / "checkpoints", 60, 0), "waits", kTrialSo);
  ASSERT_GT(exp, 0);
  const int64_t trial = FirstTrial(cluster, exp);
  auto stub = Stub(cluster);
  const std::string token = cluster.Token();
  v1::StreamTrialMetricsRequest req;
  req.set_trial_id(trial);
  req.set_follow(true);
  // Each stream on a connection of its own (as separate clients would).
  auto own_stub = [&](int i) {
    grpc::ChannelArguments args;
    args.SetInt("det.test.connection", i);
    return v1::Determined::NewStub(
        grpc::CreateCustomChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials(), args));
  };
  std::vector<std::unique_ptr<v1::Determined::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::StreamTrialMetricsResponse>>> held;
  for (int i = 0; i < 16; ++i) {
    stubs.push_back(own_stub(i));
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    Authorize(contexts.back().get(), token);
    held.push_back(stubs.back()->StreamTrialMetrics(contexts.back().get(), req));
  }
  grpc::Status refused;
  EXPECT_TRUE(PollUntil(
      [&] {
        grpc::ClientContext ctx;
        Authorize(&ctx, token);
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
        auto reader = stub->StreamTrialMetrics(&ctx, req);
        v1::StreamTrialMetricsResponse resp;
        while (reader->Read(&resp)) {
        }
        refused = reader->Finish();
        return refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      },
      60s))
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("16"), std::string::npos) << refused.error_message();
  for (auto& c : contexts) c->TryCancel();
  for (auto& r : held) r->Finish();
}

TEST(MetricsLogsApiTest, TrialLogFilters) {
  TempDir dir;
  IsolateCliAuth(dir.path());
  TestCluster cluster(dir);
  cluster.StartAgent("a1");
  const int64_t exp = cluster.CreateExperiment(Config(dir / "checkpoints", 30, 20), "logs", kTrialSo);
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 180s)) << cluster.MasterLog() << cluster.AgentLogs();
  const int64_t trial = Int(cluster.Trials(exp)[0]["id"]);
  auto stub = Stub(cluster);
  const std::string token = cluster.Token();
  auto logs = [&](const std::function<void(v1::TrialLogsRequest&)>& set) {
    v1::TrialLogsRequest req;
    req.set_trial_id(trial);
    set(req);
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    auto reader = stub->TrialLogs(&ctx, req);
    std::vector<v1::TaskLog> out;
    v1::TrialLogsResponse resp;
    while (reader->Read(&resp)) out.insert(out.end(), resp.logs().begin(), resp.logs().end());
    grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  };
  auto contains = [](const v1::TaskLog& l, const std::string& s) { return l.message().find(s) != std::string::npos; };
  const auto all = logs([](auto&) {});
  const auto stderr_lines = std::count_if(all.begin(), all.end(), [&](auto& l) { return contains(l, "stderr 100% line"); });
  ASSERT_EQ(stderr_lines, 30) << cluster.MasterLog();

  auto stderr_only = logs([](auto& r) { r.add_stdtypes(v1::STD_TYPE_STDERR); });
  EXPECT_GE(stderr_only.size(), 30u);
  for (const auto& l : stderr_only) EXPECT_EQ(l.stdtype(), v1::STD_TYPE_STDERR) << l.message();
  // grep is literal: '%' matches itself, '_' only itself.
  auto grep = logs([](auto& r) { r.set_search_text("100%"); });
  EXPECT_EQ(grep.size(), 30u);
  EXPECT_TRUE(logs([](auto& r) { r.set_search_text("std_ut line"); }).empty());
  EXPECT_TRUE(logs([](auto& r) { r.set_search_text("100%%"); }).empty());
  // rank
  EXPECT_EQ(logs([](auto& r) { r.add_ranks(0); }).size(),
            static_cast<size_t>(std::count_if(all.begin(), all.end(), [](auto& l) { return l.has_rank() && l.rank() == 0; })));
  EXPECT_TRUE(logs([](auto& r) { r.add_ranks(1); }).empty());
  // level: the trial's own stdout lines have none; the master's are warnings.
  for (const auto& l : logs([](auto& r) { r.add_levels(v1::LOG_LEVEL_WARNING); })) {
    EXPECT_EQ(l.level(), v1::LOG_LEVEL_WARNING);
  }
  auto unleveled = logs([](auto& r) { r.add_levels(v1::LOG_LEVEL_UNSPECIFIED); });
  EXPECT_GE(std::count_if(unleveled.begin(), unleveled.end(), [&](auto& l) { return contains(l, "stdout line"); }), 30);
  // tail: the last N matching lines
  auto tail = logs([](auto& r) {
    r.set_search_text("stderr 100% line");
    r.set_tail(3);
  });
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_TRUE(contains(tail[2], "line 29")) << tail[2].message();
  auto last5 = logs([](auto& r) { r.set_tail(5); });
  ASSERT_EQ(last5.size(), 5u);
  EXPECT_EQ(last5.back().id(), all.back().id());
  // time range [since, until)
  const auto& from = all[all.size() / 4].timestamp();
  const auto& to = all[all.size() * 3 / 4].timestamp();
  auto ms = [](const google::protobuf::Timestamp& t) { return t.seconds() * 1000 + t.nanos() / 1000000; };
  auto ranged = logs([&](auto& r) {
    *r.mutable_since() = from;
    *r.mutable_until() = to;
  });
  const auto expected = std::count_if(all.begin(), all.end(), [&](auto& l) {
    return ms(l.timestamp()) >= ms(from) && ms(l.timestamp()) < ms(to);
  });
  EXPECT_EQ(static_cast<int64_t>(ranged.size()), expected);
  for (const auto& l : ranged) EXPECT_TRUE(ms(l.timestamp()) >= ms(from) && ms(l.timestamp()) < ms(to));

  // det-cli and REST fill the same fields.
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"trial", "logs", std::to_string(trial), "--stdtype", "stderr", "--grep", "100%", "--tail", "2"},
                        &out, &err),
            0)
      << err;
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_NE(lines[1].find("stderr 100% line 29"), std::string::npos) << out;
  EXPECT_EQ(cluster.Cli({"trial", "logs", std::to_string(trial), "--level", "loud"}, &out, &err), 2);
  nlohmann::json rest = cluster.Get(absl::StrCat("/api/v1/trials/", trial,
                                                 "/logs?stdtypes=STD_TYPE_STDERR&search_text=100%25&tail=4&ranks=0"));
  ASSERT_TRUE(rest.contains("logs")) << rest.dump();
  ASSERT_EQ(rest["logs"].size(), 4u) << rest.dump();
  EXPECT_NE(rest["logs"][3]["message"].get<std::string>().find("line 29"), std::string::npos);
}

TEST(MetricsLogsApiTest, MasterLogsAreForAdmins) {
  TempDir dir;
  IsolateCliAuth(dir.path());
  TestCluster cluster(dir);
  int status = 0;
  nlohmann::json denied = cluster.Get("/api/v1/master/logs", &status);
  EXPECT_EQ(status, 403) << denied.dump();
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"master", "logs"}, &out, &err), 1);
  EXPECT_NE(err.find("PERMISSION_DENIED"), std::string::npos) << err;

  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  ASSERT_FALSE(admin.empty());
  auto res = cluster.Http("GET", "/api/v1/master/logs?search_text=serving%20gRPC&tail=1",
                          {{"Authorization", "Bearer " + admin}});
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
  nlohmann::json j = nlohmann::json::parse(res->body);
  ASSERT_EQ(j["logs"].size(), 1u) << res->body;
  EXPECT_NE(j["logs"][0]["message"].get<std::string>().find("det-master serving gRPC"), std::string::npos);
  EXPECT_EQ(j["logs"][0]["level"], "LOG_LEVEL_INFO");

  setenv("DET_USER_TOKEN", admin.c_str(), 1);
  int rc = cluster.Cli({"master", "logs", "--tail", "50", "--grep", "serving"}, &out, &err);
  unsetenv("DET_USER_TOKEN");
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(out.find("det-master serving gRPC"), std::string::npos) << out;
}

// Local mode (no master) records another group too: on stdout and in
// metrics.csv with its group.
TEST(MetricsLogsApiTest, LocalModeRecordsOtherGroups) {
  TempDir dir;
  WriteFile(dir / "config.yaml", R"(name: local
hyperparameters:
  global_batch_size: 8
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 4
scheduling_unit: 2
)");
  std::string out, err;
  int rc = RunProcess({std::string(DET_BIN_DIR) + "/det-trial", "--local", dir / "config.yaml", kTrialSo,
                       "--output-dir", dir / "out", "--threads", "1"},
                      &out, &err);
  ASSERT_EQ(rc, 0) << out << err;
  EXPECT_NE(out.find("inference  batches 3"), std::string::npos) << out;
  const std::string csv = ReadFile(dir / "out/metrics.csv");
  EXPECT_NE(csv.find("inference,3,"), std::string::npos) << csv;
}

}  // namespace
}  // namespace det::testing
