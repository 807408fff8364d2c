// Tests of experiment list-checkpoints --best and experiment download
// --top-n (cli/experiment_best_commands.h) against an in-process fake
// master, and of their flags' bounds through CLI11.
#include "cli/experiment_best_commands.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "cli/cli_errors.h"
#include "tests/test_util.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

const char kBest[] = "00000000-0000-4000-8000-00000000000c";
const char kSecond[] = "00000000-0000-4000-8000-00000000000a";
const char kThird[] = "00000000-0000-4000-8000-00000000000d";

// Experiment 3 (metric "accuracy", larger is better) with three checkpoints
// in the order the master ranks them; each downloads as one file
// "model.pt" holding its uuid. `uuids` can be replaced (a hostile master).
class FakeMaster final : public v1::Determined::Service {
 public:
  grpc::Status GetExperiment(grpc::ServerContext*, const v1::GetExperimentRequest* req,
                             v1::GetExperimentResponse* resp) override {
    if (req->experiment_id() != 3) return grpc::Status(grpc::StatusCode::NOT_FOUND, "experiment not found");
    resp->mutable_experiment()->set_id(3);
    resp->mutable_experiment()->set_searcher_metric("accuracy");
    resp->mutable_experiment()->set_smaller_is_better(false);
    return grpc::Status::OK;
  }
  grpc::Status GetExperimentCheckpoints(grpc::ServerContext*, const v1::GetExperimentCheckpointsRequest* req,
                                        v1::GetExperimentCheckpointsResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    last_list_ = *req;
    const std::vector<double> metrics = {0.97, 0.95, 0.9};
    for (size_t i = 0; i < uuids_.size() && (req->limit() == 0 || static_cast<int>(i) < req->limit()); ++i) {
      auto* c = resp->add_checkpoints();
      c->set_uuid(uuids_[i]);
      c->set_trial_id(static_cast<int64_t>(10 + i));
      c->set_total_batches(100 * static_cast<int64_t>(i + 1));
      c->set_state(v1::CHECKPOINT_STATE_COMPLETED);
      c->set_size_bytes(36);
      if (i < metrics.size()) c->set_searcher_metric(metrics[i]);
    }
    resp->mutable_pagination()->set_total(static_cast<int32_t>(uuids_.size()));
    return grpc::Status::OK;
  }
  grpc::Status DownloadCheckpoint(grpc::ServerContext*, const v1::DownloadCheckpointRequest* req,
                                  grpc::ServerWriter<v1::DownloadCheckpointResponse>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      downloads_.push_back(req->checkpoint_uuid());
    }
    v1::DownloadCheckpointResponse chunk;
    chunk.set_path("model.pt");
    chunk.set_file_size(static_cast<int64_t>(req->checkpoint_uuid().size()));
    chunk.set_data(req->checkpoint_uuid());
    writer->Write(chunk);
    return grpc::Status::OK;
  }

  void set_uuids(std::vector<std::string> u) {
    std::lock_guard<std::mutex> lock(mu_);
    uuids_ = std::move(u);
  }
  v1::GetExperimentCheckpointsRequest last_list() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_list_;
  }
  std::vector<std::string> downloads() {
    std::lock_guard<std::mutex> lock(mu_);
    return downloads_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> uuids_ = {kBest, kSecond, kThird};
  v1::GetExperimentCheckpointsRequest last_list_;
  std::vector<std::string> downloads_;
};

class BestCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    options_.master = "127.0.0.1:" + std::to_string(port);
    options_.token = "t";
    options_.deadline = std::chrono::seconds(10);
  }
  void TearDown() override { server_->Shutdown(); }

  // Parses `args` (after "experiment") as det-cli would; the parse error's
  // message, "" when parsing succeeded.
  std::string Parse(const std::vector<std::string>& args, ExperimentBestArgs* parsed) {
    CLI::App app;
    auto* experiment = app.add_subcommand("experiment");
    bool registered = false;
    AddExperimentBestCommands(experiment, *parsed, [&](auto) { registered = true; });
    std::vector<std::string> argv = {"experiment"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::reverse(argv.begin(), argv.end());  // CLI11 takes them last first
    try {
      app.parse(argv);
    } catch (const CLI::ParseError& e) {
      return FailureMessage(&app, e);
    }
    return registered ? "" : "no command registered";
  }

  FakeMaster fake_;
  std::unique_ptr<grpc::Server> server_;
  ClientOptions options_;
  det::testing::TempDir dir_;
  std::ostringstream out_, err_;
};

// --best and --top-n are 1..1000; anything else is refused naming the flag
// before the master is asked.
TEST_F(BestCommandsTest, CountsAreBoundedAndTheErrorNamesTheFlag) {
  EXPECT_EQ(CheckBestCount("--best", "1"), "");
  EXPECT_EQ(CheckBestCount("--best", "1000"), "");
  for (const char* bad : {"0", "-1", "1001", "2.5", "many", ""}) {
    EXPECT_THAT(CheckBestCount("--best", bad), HasSubstr("--best must be a whole number from 1 to 1000")) << bad;
  }
  ExperimentBestArgs args;
  EXPECT_EQ(Parse({"list-checkpoints", "3", "--best", "2"}, &args), "");
  EXPECT_EQ(*args.best, 2);
  EXPECT_THAT(Parse({"list-checkpoints", "3", "--best", "0"}, &args),
              HasSubstr("--best: must be a whole number from 1 to 1000 (how many of the best checkpoints), got '0'"));
  EXPECT_THAT(Parse({"list-checkpoints", "3", "--best", "5000"}, &args), HasSubstr("--best: must be"));
  EXPECT_THAT(Parse({"download", "3", "--top-n", "1001", "-o", "x"}, &args), HasSubstr("--top-n: must be"));
  EXPECT_THAT(Parse({"download", "3", "-o", "x"}, &args), HasSubstr("--top-n"));  // required
  EXPECT_EQ(Parse({"download", "3", "--top-n", "2", "-o", "x"}, &args), "");
  Client client(options_);
  CommandIo io{out_, err_};
  EXPECT_EQ(ExperimentListBestCheckpoints(client, 3, 0, io), 2);
  EXPECT_EQ(ExperimentDownloadTopN(client, 3, 1001, (fs::path(dir_.path()) / "x").string(), io), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--top-n must be"));
  EXPECT_EQ(fake_.last_list().experiment_id(), 0) << "the master was asked";
}

// --best N asks for the N best COMPLETED checkpoints by the searcher metric
// and prints them in the master's order, ranked, under the metric's sense.
TEST_F(BestCommandsTest, ListBestAsksForTheSearcherMetricOrderAndRanks) {
  Client client(options_);
  CommandIo io{out_, err_};
  ASSERT_EQ(ExperimentListBestCheckpoints(client, 3, 2, io), 0) << err_.str();
  const v1::GetExperimentCheckpointsRequest req = fake_.last_list();
  EXPECT_EQ(req.experiment_id(), 3);
  EXPECT_EQ(req.sort_by(), v1::GetExperimentCheckpointsRequest::SORT_BY_SEARCHER_METRIC);
  EXPECT_EQ(req.order_by(), v1::ORDER_BY_ASC);
  EXPECT_EQ(req.limit(), 2);
  ASSERT_EQ(req.states_size(), 1);
  EXPECT_EQ(req.states(0), v1::CHECKPOINT_STATE_COMPLETED);
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("Best 2 of 3 completed checkpoints of experiment 3 by accuracy (larger is better):"));
  const size_t first = out.find(kBest), second = out.find(kSecond);
  ASSERT_NE(first, std::string::npos) << out;
  ASSERT_NE(second, std::string::npos) << out;
  EXPECT_LT(first, second) << out;
  EXPECT_EQ(out.find(kThird), std::string::npos) << out;
  EXPECT_THAT(out, HasSubstr("0.97"));
  // Unknown experiment: the master's error.
  EXPECT_EQ(ExperimentListBestCheckpoints(client, 9, 1, io), 1);
  EXPECT_THAT(err_.str(), HasSubstr("experiment not found"));
}

// download --top-n 2 -o DIR writes DIR/<uuid>/ for the two best and says
// which went where.
TEST_F(BestCommandsTest, DownloadTopNWritesEachIntoItsUuidDirectory) {
  Client client(options_);
  CommandIo io{out_, err_};
  const fs::path out_dir = fs::path(dir_.path()) / "best";
  ASSERT_EQ(ExperimentDownloadTopN(client, 3, 2, out_dir.string(), io), 0) << err_.str();
  EXPECT_EQ(fake_.downloads(), (std::vector<std::string>{kBest, kSecond}));
  EXPECT_EQ(det::testing::ReadFile(out_dir / kBest / "model.pt"), kBest);
  EXPECT_EQ(det::testing::ReadFile(out_dir / kSecond / "model.pt"), kSecond);
  EXPECT_FALSE(fs::exists(out_dir / kThird));
  EXPECT_THAT(out_.str(), HasSubstr(std::string("#1 trial 10, batch 100, accuracy 0.97: ") + kBest + " -> " +
                                    (out_dir / kBest).string()));
  EXPECT_THAT(out_.str(), HasSubstr(std::string("#2 trial 11, batch 200, accuracy 0.95: ") + kSecond));
  // More than there are: all three, and it says so.
  out_.str("");
  ASSERT_EQ(ExperimentDownloadTopN(client, 3, 5, (fs::path(dir_.path()) / "all").string(), io), 0) << err_.str();
  EXPECT_TRUE(fs::exists(fs::path(dir_.path()) / "all" / kThird / "model.pt"));
  EXPECT_THAT(out_.str(), HasSubstr("has 3 completed checkpoint(s), fewer than --top-n 5"));
}

// An existing DIR/<uuid> (a directory or a symlink) is never overwritten:
// nothing at all is downloaded.
TEST_F(BestCommandsTest, DownloadRefusesAnExistingUuidDirectoryBeforeDownloading) {
  Client client(options_);
  CommandIo io{out_, err_};
  const fs::path out_dir = fs::path(dir_.path()) / "best";
  fs::create_directories(out_dir / kSecond);
  det::testing::WriteFile(out_dir / kSecond / "mine.txt", "keep");
  EXPECT_EQ(ExperimentDownloadTopN(client, 3, 2, out_dir.string(), io), 1);
  EXPECT_THAT(err_.str(), HasSubstr((out_dir / kSecond).string() + " already exists: not overwriting it"));
  EXPECT_TRUE(fake_.downloads().empty());
  EXPECT_FALSE(fs::exists(out_dir / kBest));
  EXPECT_EQ(det::testing::ReadFile(out_dir / kSecond / "mine.txt"), "keep");
  fs::remove_all(out_dir / kSecond);
  fs::create_symlink(fs::path(dir_.path()) / "elsewhere", out_dir / kSecond);
  err_.str("");
  EXPECT_EQ(ExperimentDownloadTopN(client, 3, 2, out_dir.string(), io), 1);
  EXPECT_THAT(err_.str(), HasSubstr("already exists"));
  EXPECT_TRUE(fake_.downloads().empty());
  EXPECT_FALSE(fs::exists(fs::path(dir_.path()) / "elsewhere"));
}

// A master that sends a uuid that is a path ("../x", "/tmp/x") cannot make
// det-cli write outside DIR.
TEST_F(BestCommandsTest, DownloadRefusesAUuidThatIsAPath) {
  Client client(options_);
  CommandIo io{out_, err_};
  const fs::path out_dir = fs::path(dir_.path()) / "inner" / "best";
  for (const std::string evil : {std::string("../escape"), (fs::path(dir_.path()) / "abs").string(), std::string(".."),
                                 std::string("00000000-0000-4000-8000-00000000000C")}) {
    fake_.set_uuids({kBest, evil});
    err_.str("");
    EXPECT_EQ(ExperimentDownloadTopN(client, 3, 2, out_dir.string(), io), 1) << evil;
    EXPECT_THAT(err_.str(), HasSubstr("is not a uuid")) << evil;
  }
  EXPECT_TRUE(fake_.downloads().empty());
  EXPECT_FALSE(fs::exists(fs::path(dir_.path()) / "inner" / "escape"));
  EXPECT_FALSE(fs::exists(fs::path(dir_.path()) / "abs"));
  EXPECT_FALSE(fs::exists(out_dir));
}

}  // namespace
}  // namespace det::cli
