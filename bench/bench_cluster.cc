#include "bench/bench_cluster.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace det::bench {
namespace v1 = det::api::v1;
using det::testing::PollUntil;
using det::testing::ReadFile;
using det::testing::Subprocess;

namespace {
std::string g_token;
const std::string kBin = DET_BIN_DIR;
}  // namespace

void Authorize(grpc::ClientContext* ctx) { ctx->AddMetadata("authorization", "Bearer " + g_token); }

BenchCluster::BenchCluster(const det::testing::TempDir& dir, int agents, int prestart_pool)
    : dir_(dir), agents_(agents), prestart_pool_(prestart_pool) {}

BenchCluster::~BenchCluster() {
  for (auto& a : agent_procs_) a->Signal(SIGTERM);
  for (auto& a : agent_procs_) a->Wait(std::chrono::seconds(10));
  if (master_) {
    master_->Signal(SIGTERM);
    master_->Wait(std::chrono::seconds(10));
  }
}

v1::Determined::Stub& BenchCluster::api() {
  if (!api_) Start();
  return *api_;
}

void BenchCluster::Start() {
  master_ = std::make_unique<Subprocess>(
      std::vector<std::string>{kBin + "/det-master", "--data-dir", dir_ / "master", "--grpc-port", "0",
                               "--http-port", "0", "--ports-file", dir_ / "ports.json", "--log-level", "warn",
                               "--checkpoint-storage-root", dir_ / "checkpoints"},
      dir_ / "master.out", dir_ / "master.err");
  if (!PollUntil([&] { return !ReadFile(dir_ / "ports.json").empty(); }, std::chrono::seconds(30))) {
    std::fprintf(stderr, "det-master did not start: %s\n", ReadFile(dir_ / "master.err").c_str());
    std::exit(1);
  }
  auto ports = nlohmann::json::parse(ReadFile(dir_ / "ports.json"));
  std::string address = absl::StrCat("127.0.0.1:", ports["grpc"].get<int>());
  for (int i = 0; i < agents_; ++i) {
    std::vector<std::string> argv{kBin + "/det-agent", "--master", address, "--id", absl::StrCat("agent-", i),
                                  "--work-dir", dir_ / absl::StrCat("agent-", i), "--log-level", "warn"};
    if (prestart_pool_ > 0) argv.insert(argv.end(), {"--prestart-pool", std::to_string(prestart_pool_)});
    agent_procs_.push_back(std::make_unique<Subprocess>(argv, dir_ / absl::StrCat("agent-", i, ".out"),
                                                        dir_ / absl::StrCat("agent-", i, ".err")));
  }
  api_ = v1::Determined::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  bool in = PollUntil(
      [&] {
        grpc::ClientContext ctx;
        v1::LoginRequest login;
        login.set_username("determined");
        v1::LoginResponse resp;
        if (!api_->Login(&ctx, login, &resp).ok()) return false;
        g_token = resp.token();
        return true;
      },
      std::chrono::seconds(30));
  bool connected = in && PollUntil(
                             [&] {
                               grpc::ClientContext ctx;
                               Authorize(&ctx);
                               v1::GetAgentsResponse resp;
                               if (!api_->GetAgents(&ctx, v1::GetAgentsRequest(), &resp).ok()) return false;
                               int n = 0;
                               for (const auto& a : resp.agents()) n += a.connected() ? 1 : 0;
                               return n == agents_;
                             },
                             std::chrono::seconds(30));
  if (!connected) {
    std::fprintf(stderr, "the bench cluster did not come up (login %s); see %s\n", in ? "ok" : "failed",
                 dir_.path().c_str());
    std::exit(1);
  }
}

int64_t CreateExperiment(v1::Determined::Stub& api, const std::string& trial_so, const std::string& config_yaml) {
  v1::CreateExperimentRequest create;
  create.set_config_yaml(config_yaml);
  create.set_trial_so(ReadFile(trial_so));
  create.set_activate(true);
  v1::CreateExperimentResponse created;
  grpc::ClientContext ctx;
  Authorize(&ctx);
  auto s = api.CreateExperiment(&ctx, create, &created);
  if (!s.ok()) {
    std::fprintf(stderr, "CreateExperiment: %s\n", s.error_message().c_str());
    std::exit(1);
  }
  return created.experiment().id();
}

v1::Experiment WaitForEnd(v1::Determined::Stub& api, int64_t id, std::chrono::milliseconds timeout,
                          const std::function<void(const v1::Experiment&)>& on_poll) {
  v1::Experiment last;
  bool done = PollUntil(
      [&] {
        grpc::ClientContext ctx;
        Authorize(&ctx);
        v1::GetExperimentRequest r;
        r.set_experiment_id(id);
        v1::GetExperimentResponse e;
        if (!api.GetExperiment(&ctx, r, &e).ok()) return false;
        last = e.experiment();
        auto st = last.state();
        if (st == v1::STATE_COMPLETED || st == v1::STATE_ERROR || st == v1::STATE_CANCELED) return true;
        if (on_poll) on_poll(last);
        return false;
      },
      timeout);
  if (!done) {
    std::fprintf(stderr, "experiment %lld did not finish\n", static_cast<long long>(id));
    std::exit(1);
  }
  return last;
}

v1::GetExperimentTrialsResponse ExperimentTrials(v1::Determined::Stub& api, int64_t id) {
  grpc::ClientContext ctx;
  Authorize(&ctx);
  v1::GetExperimentTrialsRequest r;
  r.set_experiment_id(id);
  r.set_limit(1000);
  v1::GetExperimentTrialsResponse trials;
  auto s = api.GetExperimentTrials(&ctx, r, &trials);
  if (!s.ok()) {
    std::fprintf(stderr, "GetExperimentTrials %lld: %s\n", static_cast<long long>(id), s.error_message().c_str());
    std::exit(1);
  }
  return trials;
}

v1::GetTrialMetricsResponse TrialMetrics(v1::Determined::Stub& api, int64_t trial_id) {
  grpc::ClientContext ctx;
  Authorize(&ctx);
  v1::GetTrialMetricsRequest r;
  r.set_trial_id(trial_id);
  v1::GetTrialMetricsResponse metrics;
  auto s = api.GetTrialMetrics(&ctx, r, &metrics);
  if (!s.ok()) {
    std::fprintf(stderr, "GetTrialMetrics %lld: %s\n", static_cast<long long>(trial_id), s.error_message().c_str());
    std::exit(1);
  }
  return metrics;
}

}  // namespace det::bench
