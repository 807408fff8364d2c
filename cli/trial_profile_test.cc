// Tests of det-cli trial profile: the pure summary (cli/trial_profile.h)
// over made-up `profiling` and `system` rows, and the command
// (cli/trial_profile_command.h) against an in-process fake master that
// pages its rows.
#include "cli/trial_profile.h"

#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "cli/trial_profile_command.h"
#include "det/api/v1/api.grpc.pb.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using ::testing::HasSubstr;

v1::MetricsReport Row(const std::string& group, int64_t batch, std::map<std::string, double> metrics) {
  v1::MetricsReport r;
  r.set_group(group);
  r.set_total_batches(batch);
  for (const auto& [k, v] : metrics) (*r.mutable_metrics())[k] = v;
  return r;
}

// One window: 2 s of wall time, 10 batches of 8 samples, each phase its own
// figure (the eight measured ones 1.96 s, 0.04 s unattributed).
v1::MetricsReport Window(int64_t batch) {
  return Row("profiling", batch,
             {{"wall_s", 2.0}, {"data_loader_s", 0.8}, {"forward_s", 0.4}, {"backward_s", 0.3},
              {"allreduce_s", 0.1}, {"optimizer_step_s", 0.1}, {"checkpoint_s", 0.1}, {"validation_s", 0.1},
              {"runtime_s", 0.06}, {"unattributed_s", 0.04}, {"batches", 10}, {"samples", 80}});
}

const ProfilePhase& Phase(const TrialProfile& p, const std::string& metric) {
  for (const auto& phase : p.phases) {
    if (phase.metric == metric) return phase;
  }
  static ProfilePhase none;
  ADD_FAILURE() << "no phase " << metric;
  return none;
}

TEST(TrialProfileTest, SumsWindowsIntoSharesOfWallTimeAndThroughput) {
  const TrialProfile p = SummarizeProfile({Window(20), Window(10), Row("training", 10, {{"loss", 1}})}, {});
  EXPECT_EQ(p.windows, 2);
  EXPECT_EQ(p.first_batch, 10);
  EXPECT_EQ(p.last_batch, 20);
  EXPECT_DOUBLE_EQ(p.wall_seconds, 4.0);
  ASSERT_EQ(p.phases.size(), 9u);
  EXPECT_EQ(p.phases[0].label, "data loader");
  EXPECT_DOUBLE_EQ(Phase(p, "data_loader_s").seconds, 1.6);
  EXPECT_DOUBLE_EQ(Phase(p, "data_loader_s").share, 0.4);
  EXPECT_DOUBLE_EQ(Phase(p, "allreduce_s").share, 0.05);
  double shares = 0;
  for (const auto& phase : p.phases) shares += phase.share;
  EXPECT_NEAR(shares, 1.0, 1e-9);
  EXPECT_NEAR(p.phase_seconds, 3.92, 1e-9) << "the measured phases, not unattributed_s";
  EXPECT_DOUBLE_EQ(Phase(p, "unattributed_s").share, 0.02);
  EXPECT_DOUBLE_EQ(p.batches_per_second, 5.0);
  EXPECT_DOUBLE_EQ(p.samples_per_second, 40.0);
  EXPECT_EQ(p.system_samples, 0);
}

// A hostile or broken row cannot make a share negative or infinite.
TEST(TrialProfileTest, NonFiniteAndNegativeValuesCountAsZero) {
  const TrialProfile p = SummarizeProfile(
      {Row("profiling", 5, {{"wall_s", 1}, {"forward_s", -3}, {"backward_s", std::nan("")},
                            {"data_loader_s", 1.0 / 0.0}, {"runtime_s", 0.5}, {"batches", -1}})},
      {});
  EXPECT_DOUBLE_EQ(Phase(p, "forward_s").seconds, 0);
  EXPECT_DOUBLE_EQ(Phase(p, "backward_s").seconds, 0);
  EXPECT_DOUBLE_EQ(Phase(p, "data_loader_s").seconds, 0);
  EXPECT_DOUBLE_EQ(Phase(p, "runtime_s").share, 0.5);
  EXPECT_DOUBLE_EQ(p.batches, 0);
  // No wall time: shares and rates are 0, not NaN.
  const TrialProfile none = SummarizeProfile({Row("profiling", 5, {{"forward_s", 1}})}, {});
  EXPECT_DOUBLE_EQ(Phase(none, "forward_s").share, 0);
  EXPECT_DOUBLE_EQ(none.batches_per_second, 0);
}

TEST(TrialProfileTest, SystemSamplesGiveCpuRssAndPerGpuFigures) {
  const TrialProfile p = SummarizeProfile(
      {Window(10)},
      {Row("system", 0, {{"cpu_ratio", 0.5}, {"rss_bytes", 100 << 20}, {"gpu0_utilization_ratio", 0.2},
                         {"gpu0_memory_used_bytes", 1 << 30}, {"gpu1_utilization_ratio", 0.9}}),
       Row("system", 10, {{"cpu_ratio", 1.5}, {"rss_bytes", 200 << 20}, {"gpu0_utilization_ratio", 0.4},
                          {"gpu0_memory_used_bytes", 512 << 20}, {"gpu64_utilization_ratio", 1},
                          {"gpux_utilization_ratio", 1}, {"gpu_utilization_ratio", 1}})});
  EXPECT_EQ(p.system_samples, 2);
  EXPECT_DOUBLE_EQ(p.cpu_ratio_mean, 1.0);
  EXPECT_DOUBLE_EQ(p.cpu_ratio_max, 1.5);
  EXPECT_DOUBLE_EQ(p.rss_max_bytes, 200 << 20);
  ASSERT_EQ(p.gpus.size(), 2u);  // gpu64 (over the bound) and malformed names ignored
  EXPECT_EQ(p.gpus[0].index, 0);
  EXPECT_NEAR(p.gpus[0].utilization_mean, 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(p.gpus[0].memory_used_max_bytes, 1 << 30);
  EXPECT_EQ(p.gpus[1].index, 1);
  EXPECT_DOUBLE_EQ(p.gpus[1].utilization_mean, 0.9);
}

TEST(TrialProfileTest, TableListsEveryPhaseWithItsShareAndTheRates) {
  const TrialProfile p = SummarizeProfile(
      {Window(10)}, {Row("system", 0, {{"cpu_ratio", 0.5}, {"rss_bytes", 3 << 20},
                                        {"gpu0_utilization_ratio", 0.25}, {"gpu0_memory_used_bytes", 1 << 30}})});
  const std::string text = FormatProfile(7, p);
  for (const char* label : {"data loader", "forward", "backward", "all-reduce", "optimizer step", "checkpoint",
                            "validation", "runtime", "unattributed", "measured phases"}) {
    EXPECT_THAT(text, HasSubstr(label));
  }
  EXPECT_THAT(text, HasSubstr("40.0%"));  // data loader: 0.8 of 2 s
  EXPECT_THAT(text, HasSubstr("Throughput: 5.00 batches/s, 40.00 samples/s"));
  EXPECT_THAT(text, HasSubstr("CPU 0.50 mean, 0.50 max"));
  EXPECT_THAT(text, HasSubstr("RSS 3.0 MiB max"));
  EXPECT_THAT(text, HasSubstr("GPU 0: 25.0% mean utilisation, 1.0 GiB max memory used"));
  const nlohmann::json j = ProfileJson(7, p);
  EXPECT_EQ(j["trial_id"], 7);
  EXPECT_EQ(j["phases"].size(), 9u);
  EXPECT_EQ(j["phases"][0]["phase"], "data loader");
  EXPECT_DOUBLE_EQ(j["phases"][0]["share"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(j["batches_per_second"].get<double>(), 5.0);
  EXPECT_EQ(j["system"]["gpus"].size(), 1u);
}

// Trial 7 has `windows` profiling rows (paged `limit` at a time); any other
// trial is NOT_FOUND.
class FakeMaster final : public v1::Determined::Service {
 public:
  explicit FakeMaster(int windows) : windows_(windows) {}
  grpc::Status GetTrialMetrics(grpc::ServerContext*, const v1::GetTrialMetricsRequest* req,
                               v1::GetTrialMetricsResponse* resp) override {
    if (req->trial_id() != 7) return grpc::Status(grpc::StatusCode::NOT_FOUND, "trial 8 not found");
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    if (req->group() != "profiling" || !req->full_resolution()) return grpc::Status::OK;
    const int limit = req->limit() > 0 ? req->limit() : 10000;
    int64_t id = req->after_id();
    for (; id < windows_ && resp->metrics_size() < limit; ++id) {
      *resp->add_metrics() = Window(10 * (id + 1));
      resp->mutable_metrics()->rbegin()->set_id(id + 1);
    }
    resp->set_has_more(id < windows_);
    resp->set_next_after_total_batches(10 * id);
    resp->set_next_after_id(id);
    return grpc::Status::OK;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  const int windows_;
  std::mutex mu_;
  int calls_ = 0;
};

struct Served {
  explicit Served(int windows) : fake(windows) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake);
    server = builder.BuildAndStart();
    options.master = "127.0.0.1:" + std::to_string(port);
    options.token = "t";
    options.deadline = std::chrono::seconds(10);
  }
  ~Served() { server->Shutdown(); }
  FakeMaster fake;
  std::unique_ptr<grpc::Server> server;
  ClientOptions options;
};

TEST(TrialProfileCommandTest, ReadsEveryPageAndSummarisesThem) {
  Served m(5);
  Client client(m.options);
  std::ostringstream out, err;
  CommandIo io{out, err};
  io.json = true;
  ASSERT_EQ(TrialProfileCommand(client, 7, io, /*page_size=*/2), 0) << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["windows"], 5);  // pages of 2, 2 and 1
  EXPECT_EQ(j["last_batch"], 50);
  EXPECT_DOUBLE_EQ(j["wall_seconds"].get<double>(), 10.0);
  EXPECT_EQ(m.fake.calls(), 3 + 1);  // three profiling pages, one system page
}

// det-cli's own cap: it stops reading pages at the cap and says so.
TEST(TrialProfileCommandTest, StopsAtItsRowCapAndSaysSo) {
  Served m(50);
  Client client(m.options);
  std::ostringstream out, err;
  CommandIo io{out, err};
  io.json = true;
  ASSERT_EQ(TrialProfileCommand(client, 7, io, /*page_size=*/2, /*max_rows=*/5), 0) << err.str();
  EXPECT_EQ(nlohmann::json::parse(out.str())["windows"], 5);
  EXPECT_THAT(err.str(), HasSubstr("trial 7 has more than 5 'profiling' rows; the summary covers the first 5"));
  EXPECT_LE(m.fake.calls(), 3 + 1);
}

TEST(TrialProfileCommandTest, NoRowsSaysHowToEnableProfilingAndUnknownTrialIsNotFound) {
  Served m(0);
  Client client(m.options);
  std::ostringstream out, err;
  CommandIo io{out, err};
  EXPECT_EQ(TrialProfileCommand(client, 7, io), 1);
  EXPECT_THAT(err.str(), HasSubstr("trial 7 has no profile: set profiling.enabled: true in the experiment config"));
  EXPECT_EQ(out.str(), "");
  std::ostringstream err2;
  CommandIo io2{out, err2};
  EXPECT_EQ(TrialProfileCommand(client, 8, io2), 1);
  EXPECT_THAT(err2.str(), HasSubstr("NOT_FOUND"));
}

}  // namespace
}  // namespace det::cli
