// Tests of det-cli's commands against an in-process fake master.
#include "cli/commands.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "cli/cli_errors.h"
#include "cli/client.h"
#include "cli/experiment_fork_commands.h"
#include "cli/trial_metrics_command.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using ::testing::HasSubstr;

// Implements a few RPCs of the master: experiment 1 exists (and reaches
// COMPLETED after a few polls), every other id is NOT_FOUND.
class FakeMaster final : public v1::Determined::Service {
 public:
  grpc::Status CreateExperiment(grpc::ServerContext* ctx, const v1::CreateExperimentRequest* req,
                                v1::CreateExperimentResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    last_create_ = *req;
    auto md = ctx->client_metadata().find("authorization");
    if (md != ctx->client_metadata().end()) last_authorization_ = std::string(md->second.data(), md->second.size());
    if (req->config_yaml().find("bogus") != std::string::npos) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "config:3: unknown field 'bogus'");
    }
    resp->mutable_experiment()->set_id(1);
    resp->mutable_experiment()->set_state(req->activate() ? v1::STATE_ACTIVE : v1::STATE_PAUSED);
    return grpc::Status::OK;
  }

  grpc::Status GetExperiment(grpc::ServerContext*, const v1::GetExperimentRequest* req,
                             v1::GetExperimentResponse* resp) override {
    if (req->experiment_id() != 1) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "experiment " + std::to_string(req->experiment_id()) +
                                                           " not found");
    }
    int polls = ++polls_;
    auto* e = resp->mutable_experiment();
    e->set_id(1);
    e->set_name("fake");
    e->set_state(polls < 3 ? v1::STATE_ACTIVE : final_state_.load());
    e->set_searcher_metric("loss");
    return grpc::Status::OK;
  }

  // Checkpoint "...-000000000001" is at 40 batches, 2.5 epochs; any other
  // at 40 batches with no epoch length known (total_epochs 0).
  grpc::Status GetCheckpoint(grpc::ServerContext*, const v1::GetCheckpointRequest* req,
                             v1::GetCheckpointResponse* resp) override {
    auto* c = resp->mutable_checkpoint();
    c->set_uuid(req->checkpoint_uuid());
    c->set_total_batches(40);
    if (req->checkpoint_uuid() == "0f3c9a1e-5b2d-4c6e-8f10-000000000001") c->set_total_epochs(2.5);
    c->set_size_bytes(2048);
    return grpc::Status::OK;
  }

  grpc::Status GetExperimentTrials(grpc::ServerContext*, const v1::GetExperimentTrialsRequest* req,
                                   v1::GetExperimentTrialsResponse* resp) override {
    if (req->experiment_id() != 1) return grpc::Status(grpc::StatusCode::NOT_FOUND, "experiment not found");
    auto* t = resp->add_trials();
    t->set_id(7);
    t->set_experiment_id(1);
    t->set_state(v1::STATE_ACTIVE);
    t->set_total_batches_processed(10 * polls_.load());
    t->set_searcher_target_batches(100);
    resp->mutable_pagination()->set_total(1);
    return grpc::Status::OK;
  }

  // The chart view: one report (group "training": marked downsampled).
  // full_resolution: trial 7 has five reports at batches 10..50 (ids 1..5),
  // paged as the master pages them; trial 9 answers "more" with a cursor
  // that never moves.
  grpc::Status GetTrialMetrics(grpc::ServerContext*, const v1::GetTrialMetricsRequest* req,
                               v1::GetTrialMetricsResponse* resp) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      metric_requests_.push_back(*req);
    }
    auto add = [&](int64_t batches, int64_t id) {
      auto* r = resp->add_metrics();
      r->set_id(id);
      r->set_trial_id(req->trial_id());
      r->set_total_batches(batches);
      r->set_group(req->group());
      (*r->mutable_metrics())["validation_loss"] = 0.25 + static_cast<double>(id);
    };
    if (!req->full_resolution()) {
      add(60, 0);
      resp->set_downsampled(req->group() == "training");
      return grpc::Status::OK;
    }
    if (req->trial_id() == 9) {
      add(10, 1);
      resp->set_has_more(true);
      resp->set_next_after_total_batches(req->after_total_batches());
      resp->set_next_after_id(req->after_id());
      return grpc::Status::OK;
    }
    const int64_t limit = req->limit() > 0 ? req->limit() : 10000;
    for (int64_t id = 1; id <= 5; ++id) {
      const int64_t b = 10 * id;
      const bool after = req->after_id() > 0 ? (b > req->after_total_batches() ||
                                                (b == req->after_total_batches() && id > req->after_id()))
                                             : b > req->after_total_batches();
      if (!after) continue;
      if (resp->metrics_size() == limit) {
        resp->set_has_more(true);
        break;
      }
      add(b, id);
    }
    if (resp->metrics_size() > 0) {
      resp->set_next_after_total_batches(resp->metrics().rbegin()->total_batches());
      resp->set_next_after_id(resp->metrics().rbegin()->id());
    }
    return grpc::Status::OK;
  }

  // Two reports (the second archived), then the trial "ends".
  grpc::Status StreamTrialMetrics(grpc::ServerContext*, const v1::StreamTrialMetricsRequest* req,
                                  grpc::ServerWriter<v1::StreamTrialMetricsResponse>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_stream_ = *req;
    }
    for (int64_t id = 1; id <= 2; ++id) {
      v1::StreamTrialMetricsResponse resp;
      auto* r = resp.add_metrics();
      r->set_id(id);
      r->set_total_batches(16 * id);
      r->set_group("training");
      r->set_archived(id == 2);
      (*r->mutable_metrics())["loss"] = 0.5 * static_cast<double>(id);
      resp.set_next_after_id(id);
      writer->Write(resp);
    }
    return grpc::Status::OK;
  }

  grpc::Status TrialLogs(grpc::ServerContext*, const v1::TrialLogsRequest* req,
                         grpc::ServerWriter<v1::TrialLogsResponse>* writer) override {
    v1::TrialLogsResponse resp;
    for (int i = 1; i <= 2; ++i) {
      auto* log = resp.add_logs();
      log->set_id(i);
      log->set_trial_id(req->trial_id());
      log->set_message("line " + std::to_string(i));
    }
    writer->Write(resp);
    return grpc::Status::OK;
  }

  std::vector<v1::GetTrialMetricsRequest> metric_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return metric_requests_;
  }
  v1::StreamTrialMetricsRequest last_stream() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_stream_;
  }
  v1::CreateExperimentRequest last_create() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_create_;
  }
  std::string last_authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_authorization_;
  }
  void set_final_state(v1::State s) { final_state_ = s; }

 private:
  std::mutex mu_;
  v1::CreateExperimentRequest last_create_;
  std::vector<v1::GetTrialMetricsRequest> metric_requests_;
  v1::StreamTrialMetricsRequest last_stream_;
  std::string last_authorization_;
  std::atomic<int> polls_{0};
  std::atomic<v1::State> final_state_{v1::STATE_COMPLETED};
};

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    options_.master = "127.0.0.1:" + std::to_string(port);
    options_.token = "secret-token";
    options_.deadline = std::chrono::seconds(10);
    dir_ = std::filesystem::temp_directory_path() / ("cli_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }

  std::string WriteFile(const std::string& name, const std::string& content) {
    auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << content;
    return path.string();
  }

  FakeMaster fake_;
  std::unique_ptr<grpc::Server> server_;
  ClientOptions options_;
  std::filesystem::path dir_;
  std::ostringstream out_, err_;
};

TEST_F(CommandsTest, CreateSendsConfigTextAndTrialBytes) {
  const std::string config = "name: x\nsearcher:\n  name: single\n";
  const std::string trial_bytes("\x7f" "ELF\0\x01\x02 binary", 15);
  ExperimentCreateArgs args;
  args.config_path = WriteFile("config.yaml", config);
  args.trial_path = WriteFile("trial.so", trial_bytes);
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentCreate(client, args, io), 0) << err_.str();
  EXPECT_EQ(out_.str(), "Created experiment 1\n");
  auto req = fake_.last_create();
  EXPECT_EQ(req.config_yaml(), config);
  EXPECT_EQ(req.trial_so(), trial_bytes);
  EXPECT_TRUE(req.activate());
  EXPECT_EQ(fake_.last_authorization(), "Bearer secret-token");
}

// A Latin-1 file name is sent as UTF-8 (proto3 strings must be), its other
// bytes as '?' (an invalid string made the request fail to parse).
TEST_F(CommandsTest, CreateSendsANonUtf8FileNameAsUtf8) {
  ExperimentCreateArgs args;
  args.config_path = WriteFile("config.yaml", "name: x\nsearcher:\n  name: single\n");
  args.trial_path = WriteFile("tr\xe9" "al\xc3\xa9.so", std::string("\x7f" "ELF\0\x01\x02 binary", 15));
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentCreate(client, args, io), 0) << err_.str();
  EXPECT_EQ(fake_.last_create().trial_so_name(), "tr?al\xc3\xa9.so");
}

// An overrides file is untrusted input: one over 1 MiB is refused, naming
// it, before the master is asked anything (it was read cut at the bound and
// merged before).
TEST_F(CommandsTest, ForkRefusesAnOverridesFileOverTheBoundBeforeAskingTheMaster) {
  const std::string big = WriteFile("overrides.yaml", "name: x\n" + std::string(1 << 20, '#'));
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentFork(client, 1, big, true, io), 2);
  EXPECT_EQ(err_.str(), "det-cli: error: overrides file '" + big + "' is larger than 1048576 bytes\n");
  EXPECT_EQ(fake_.last_create().parent_id(), 0) << "no experiment may be created";
  err_.str("");
  EXPECT_EQ(ExperimentFork(client, 1, (dir_ / "none.yaml").string(), true, io), 2);
  EXPECT_THAT(err_.str(), HasSubstr("none.yaml': cannot read it"));
}

TEST_F(CommandsTest, CreatePausedDoesNotActivate) {
  ExperimentCreateArgs args;
  args.config_path = WriteFile("config.yaml", "name: x\n");
  args.trial_path = WriteFile("trial.so", "bytes");
  args.paused = true;
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentCreate(client, args, io), 0) << err_.str();
  EXPECT_FALSE(fake_.last_create().activate());
}

TEST_F(CommandsTest, CreateFollowExitsZeroWhenCompleted) {
  ExperimentCreateArgs args;
  args.config_path = WriteFile("config.yaml", "name: x\n");
  args.trial_path = WriteFile("trial.so", "bytes");
  args.follow = true;
  args.poll_interval = std::chrono::milliseconds(10);
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentCreate(client, args, io), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("Created experiment 1"));
  EXPECT_THAT(out_.str(), HasSubstr("Experiment 1 ACTIVE"));
  EXPECT_THAT(out_.str(), HasSubstr("Experiment 1 COMPLETED"));
  EXPECT_THAT(out_.str(), HasSubstr("Trial 7 ACTIVE"));
}

TEST_F(CommandsTest, FollowExitsOneWhenCanceled) {
  fake_.set_final_state(v1::STATE_CANCELED);
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentFollow(client, 1, std::chrono::milliseconds(10), io), 1);
  EXPECT_THAT(err_.str(), HasSubstr("CANCELED"));
}

TEST_F(CommandsTest, NotFoundBecomesThePrintedError) {
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentDescribe(client, 999, io), 1);
  EXPECT_EQ(err_.str(), "det-cli: error: experiment 999 not found (NOT_FOUND)\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CommandsTest, DescribeJsonUsesProtoFieldNames) {
  Client client(options_);
  CommandIo io{out_, err_, /*json=*/true};
  EXPECT_EQ(ExperimentDescribe(client, 1, io), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\"searcher_metric\": \"loss\""));
  EXPECT_THAT(out_.str(), HasSubstr("\"num_trials\": 0"));  // primitive fields always printed
}

// Issue 45: a checkpoint whose epoch length is unknown says so, not 0.
TEST_F(CommandsTest, CheckpointDescribeSaysEpochsUnknownWithoutAnEpochLength) {
  Client client(options_);
  CommandIo io{out_, err_};
  ASSERT_EQ(CheckpointDescribe(client, "0f3c9a1e-5b2d-4c6e-8f10-000000000002", io), 0) << err_.str();
  EXPECT_THAT(out_.str(), ::testing::ContainsRegex("Epochs: +unknown\n"));
  out_.str("");
  ASSERT_EQ(CheckpointDescribe(client, "0f3c9a1e-5b2d-4c6e-8f10-000000000001", io), 0) << err_.str();
  EXPECT_THAT(out_.str(), ::testing::ContainsRegex("Epochs: +2.5\n"));
}

TEST_F(CommandsTest, TrialMetricsTableAndJson) {
  Client client(options_);
  CommandIo io{out_, err_};
  TrialMetricsArgs args;
  args.group = "validation";
  args.metric_names = {"validation_loss"};
  EXPECT_EQ(TrialMetrics(client, 7, args, io), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("validation_loss"));
  EXPECT_THAT(out_.str(), HasSubstr("0.25"));
  EXPECT_EQ(err_.str(), "");  // not downsampled: no note
  std::ostringstream json_out;
  CommandIo json_io{json_out, err_, true};
  EXPECT_EQ(TrialMetrics(client, 7, args, json_io), 0);
  EXPECT_THAT(json_out.str(), HasSubstr("\"total_batches\": 60"));
  const v1::GetTrialMetricsRequest sent = fake_.metric_requests().back();
  EXPECT_EQ(sent.group(), "validation");
  ASSERT_EQ(sent.metric_names_size(), 1);
  EXPECT_EQ(sent.metric_names(0), "validation_loss");
  EXPECT_FALSE(sent.full_resolution());
}

TEST_F(CommandsTest, TrialMetricsSaysWhenTheChartViewLeftReportsOut) {
  Client client(options_);
  CommandIo io{out_, err_};
  TrialMetricsArgs args;
  args.group = "training";
  EXPECT_EQ(TrialMetrics(client, 7, args, io), 0) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("note: trial 7 has more reports than the chart view holds"));
  EXPECT_THAT(err_.str(), HasSubstr("--full"));
}

TEST_F(CommandsTest, TrialMetricsFullPagesThroughEveryReport) {
  Client client(options_);
  CommandIo io{out_, err_};
  TrialMetricsArgs args;
  args.full = true;
  args.page_size = 2;
  ASSERT_EQ(TrialMetrics(client, 7, args, io), 0) << err_.str();
  for (const char* v : {"1.25", "2.25", "3.25", "4.25", "5.25"}) EXPECT_THAT(out_.str(), HasSubstr(v));
  std::vector<v1::GetTrialMetricsRequest> sent = fake_.metric_requests();
  ASSERT_EQ(sent.size(), 3u);  // 2 + 2 + 1, each page after the previous one's last report
  EXPECT_TRUE(sent[0].full_resolution());
  EXPECT_EQ(sent[0].limit(), 2);
  EXPECT_EQ(sent[1].after_total_batches(), 20);
  EXPECT_EQ(sent[1].after_id(), 2);
  EXPECT_EQ(sent[2].after_total_batches(), 40);
  EXPECT_EQ(sent[2].after_id(), 4);

  // --json: one report a line, as the pages arrive.
  std::ostringstream json_out;
  CommandIo json_io{json_out, err_, true};
  ASSERT_EQ(TrialMetrics(client, 7, args, json_io), 0) << err_.str();
  const std::string lines = json_out.str();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 5);
}

TEST_F(CommandsTest, TrialMetricsFullStopsWhenTheCursorDoesNotMove) {
  // A master (or a proxy) that answers "more" without moving the cursor
  // must not keep det-cli asking for the same page forever.
  Client client(options_);
  CommandIo io{out_, err_};
  TrialMetricsArgs args;
  args.full = true;
  ASSERT_EQ(TrialMetrics(client, 9, args, io), 0) << err_.str();
  EXPECT_EQ(fake_.metric_requests().size(), 1u);
}

TEST_F(CommandsTest, TrialMetricsFollowPrintsTheStreamUntilItEnds) {
  Client client(options_);
  CommandIo io{out_, err_};
  TrialMetricsArgs args;
  args.follow = true;
  args.group = "training";
  ASSERT_EQ(TrialMetrics(client, 7, args, io), 0) << err_.str();
  EXPECT_EQ(out_.str(), "16 training loss=0.5\n32 training loss=1 (archived)\n");
  EXPECT_TRUE(fake_.last_stream().follow());
  EXPECT_EQ(fake_.last_stream().trial_id(), 7);
  EXPECT_EQ(fake_.last_stream().group(), "training");
}

TEST_F(CommandsTest, ExperimentLogsPrintsEveryTrialsLines) {
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentLogs(client, 1, io), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("[trial 7] line 1"));
  EXPECT_THAT(out_.str(), HasSubstr("[trial 7] line 2"));
}

TEST_F(CommandsTest, UnimplementedRpcIsReported) {
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(MasterInfo(client, io), 1);
  EXPECT_THAT(err_.str(), HasSubstr("(UNIMPLEMENTED)"));
}

TEST(ClientTest, UnreachableMasterIsNamed) {
  ClientOptions options;
  options.master = "127.0.0.1:1";
  options.deadline = std::chrono::seconds(5);
  Client client(options);
  std::ostringstream out, err;
  CommandIo io{out, err};
  EXPECT_EQ(MasterInfo(client, io), 1);
  EXPECT_THAT(err.str(), HasSubstr("det-cli: error: no master answered at 127.0.0.1:1"));
}

// Issue 45: errors that name the fix. (tests/cli_errors_test.cc runs det-cli
// against a real master's REST port and a port nobody listens on.)
TEST(ClientTest, NoMasterSaysStartOneOrSetDetMaster) {
  grpc::Status refused(grpc::StatusCode::UNAVAILABLE,
                       "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9: Failed to connect "
                       "to remote host: Connection refused");
  std::string msg = FormatRpcError("127.0.0.1:9", refused, /*connected=*/false);
  EXPECT_THAT(msg, ::testing::StartsWith("no master answered at 127.0.0.1:9 (UNAVAILABLE: "));
  EXPECT_THAT(msg, HasSubstr("start one (deploy/cluster.sh start) or point det-cli at yours with -m HOST:PORT or "
                             "DET_MASTER"));
}

TEST(ClientTest, RestPortSaysUseTheGrpcPort) {
  // A real master's REST port, and another HTTP/1 server.
  for (const char* grpc_message :
       {"failed to connect to all addresses; last error: INTERNAL: ipv4:127.0.0.1:8080: Trying to connect an "
        "http1.x server",
        "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:8080: Failed parsing HTTP/2"}) {
    grpc::Status status(grpc::StatusCode::UNAVAILABLE, grpc_message);
    std::string msg = FormatRpcError("127.0.0.1:8080", status, /*connected=*/false);
    EXPECT_THAT(msg, HasSubstr("127.0.0.1:8080")) << msg;
    EXPECT_THAT(msg, HasSubstr("this looks like the master's REST port; det-cli speaks gRPC: use the gRPC port "
                               "(8090 by default)"))
        << msg;
  }
}

TEST(ClientTest, AnAnsweringMastersErrorIsPrintedAsItIs) {
  grpc::Status denied(grpc::StatusCode::UNAUTHENTICATED, "invalid credentials");
  EXPECT_EQ(FormatRpcError("m:1", denied, /*connected=*/false), "invalid credentials (UNAUTHENTICATED)");
  grpc::Status busy(grpc::StatusCode::UNAVAILABLE, "shutting down");
  EXPECT_EQ(FormatRpcError("m:1", busy, /*connected=*/true), "shutting down (UNAVAILABLE)");
}

TEST(NameConfigFileTest, RewritesOnlyTheLeadingConfigPrefix) {
  EXPECT_EQ(NameConfigFile("config:12: field x", "const.yaml"), "const.yaml:12: field x");
  EXPECT_EQ(NameConfigFile("config: not a mapping", "a b.yaml"), "a b.yaml: not a mapping");
  EXPECT_EQ(NameConfigFile("trial.so: not an ELF file", "const.yaml"), "trial.so: not an ELF file");
  EXPECT_EQ(NameConfigFile("configuration: x", "const.yaml"), "configuration: x");
}

TEST_F(CommandsTest, CreateConfigErrorNamesTheUsersFile) {
  ExperimentCreateArgs args;
  args.config_path = WriteFile("const.yaml", "name: x\nsearcher:\nbogus: 1\n");
  args.trial_path = WriteFile("trial.so", "x");
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentCreate(client, args, io), 1);
  EXPECT_EQ(err_.str(), "det-cli: error: " + args.config_path + ":3: unknown field 'bogus' (INVALID_ARGUMENT)\n");
}

TEST(ClientTest, OptionsFromEnv) {
  ::setenv("DET_MASTER", "example:1234", 1);
  ::setenv("DET_USER_TOKEN", "tok", 1);
  EXPECT_EQ(ClientOptionsFromEnv("").master, "example:1234");
  EXPECT_EQ(ClientOptionsFromEnv("flag:1").master, "flag:1");
  EXPECT_EQ(ClientOptionsFromEnv("").token, "tok");
  ::unsetenv("DET_MASTER");
  ::unsetenv("DET_USER_TOKEN");
  EXPECT_EQ(ClientOptionsFromEnv("").master, "localhost:8090");
  EXPECT_EQ(ClientOptionsFromEnv("").token, "");
}

}  // namespace
}  // namespace det::cli
