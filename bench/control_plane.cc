// bench/control_plane: what the master adds around a trial.
//
// 1. Latency: a 1-batch trial of the synthetic example through a real
//    det-master and det-agent on loopback (experiment create -> first
//    training metric -> COMPLETED) next to the bare `det-trial --local` run
//    of the same trial, as ratios.
// 2. Metric ingestion: training-metric rows per second reported through the
//    master's TrialService (gRPC, SQLite behind it) next to raw prepared
//    SQLite inserts of the same rows on the same machine (goal: >= 0.5).
//
//   control_plane [--rows N] [--rows-per-request K] [--rounds R] [--before-master PATH]
//
// --before-master runs another det-master build (say, one from before a
// change) in the same rounds, to print its ratios next to this build's.
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "det/agent/v1/agent.grpc.pb.h"
#include "det/api/v1/api.grpc.pb.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "common/det_version.h"
#include "master/store/store.h"
#include "tests/test_util.h"

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using det::testing::PollUntil;
using det::testing::ReadFile;
using det::testing::RestLogin;
using det::testing::Subprocess;
using det::testing::TempDir;
using det::testing::WriteFile;

const std::string kBin = DET_BIN_DIR;
const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";

const char* kConfig = R"(name: one-batch
hyperparameters:
  global_batch_size: 32
  learning_rate: 0.01
  hidden_size: 32
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 1
scheduling_unit: 1
reproducibility:
  experiment_seed: 3
data:
  train_size: 256
  val_size: 64
)";

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Master {
  explicit Master(const TempDir& dir, const std::string& binary = kBin + "/det-master") {
    det::testing::IsolateCliAuth(dir.path());
    proc = std::make_unique<Subprocess>(
        std::vector<std::string>{binary, "--data-dir", dir / "master", "--grpc-port", "0", "--http-port",
                                 "0", "--ports-file", dir / "ports.json", "--log-level", "warn",
                                 // The ingestion bench plays an agent that sends no heartbeats.
                                 "--heartbeat-timeout-ms", "86400000"},
        dir / "master.out", dir / "master.err");
    if (!PollUntil([&] { return !ReadFile(dir / "ports.json").empty(); }, std::chrono::seconds(30))) {
      std::fprintf(stderr, "master did not start: %s\n", ReadFile(dir / "master.err").c_str());
      std::exit(1);
    }
    auto ports = nlohmann::json::parse(ReadFile(dir / "ports.json"));
    grpc = "127.0.0.1:" + std::to_string(ports["grpc"].get<int>());
    http = ports["http"].get<int>();
  }
  ~Master() {
    proc->Signal(SIGTERM);
    proc->Wait(std::chrono::seconds(10));
  }
  nlohmann::json Get(const std::string& path) {
    httplib::Client c("127.0.0.1", http);
    if (token.empty()) token = RestLogin(http);
    c.set_bearer_token_auth(token.c_str());
    auto r = c.Get(path.c_str());
    return r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
  }
  std::unique_ptr<Subprocess> proc;
  std::string grpc;
  int http = 0;
  std::string token;
};

void Latency() {
  TempDir dir;
  WriteFile(dir / "config.yaml", kConfig);
  // Bare local run.
  auto t0 = Clock::now();
  std::string out, err;
  if (det::testing::RunProcess({kBin + "/det-trial", "--local", dir / "config.yaml", kSynthetic, "--output-dir",
                                dir / "local", "--no-progress"},
                               &out, &err) != 0) {
    std::fprintf(stderr, "det-trial --local failed: %s\n", err.c_str());
    std::exit(1);
  }
  double local = Seconds(t0, Clock::now());

  Master master(dir);
  Subprocess agent({kBin + "/det-agent", "--master", master.grpc, "--id", "bench", "--work-dir", dir / "agent"},
                   dir / "agent.out", dir / "agent.err");
  PollUntil([&] { return master.Get("/api/v1/agents").dump().find("\"connected\":true") != std::string::npos; },
            std::chrono::seconds(30));
  auto start = Clock::now();
  if (det::testing::RunProcess({kBin + "/det-cli", "-m", master.grpc, "experiment", "create", dir / "config.yaml",
                                kSynthetic},
                               &out, &err) != 0) {
    std::fprintf(stderr, "experiment create failed: %s\n", err.c_str());
    std::exit(1);
  }
  Clock::time_point first_metric, completed;
  bool have_metric = false;
  PollUntil(
      [&] {
        if (!have_metric) {
          auto m = master.Get("/api/v1/trials/1/metrics?group=training");
          if (m.contains("metrics") && !m["metrics"].empty()) {
            first_metric = Clock::now();
            have_metric = true;
          }
        }
        auto e = master.Get("/api/v1/experiments/1");
        if (e.contains("experiment") && e["experiment"]["state"] == "STATE_COMPLETED") {
          completed = Clock::now();
          if (!have_metric) first_metric = completed;
          return true;
        }
        return false;
      },
      std::chrono::minutes(2));
  agent.Signal(SIGTERM);
  agent.Wait(std::chrono::seconds(10));
  double to_metric = Seconds(start, first_metric);
  double to_done = Seconds(start, completed);
  std::printf("1-batch trial, bare det-trial --local (process start to exit): %.3f s\n", local);
  std::printf("through master+agent: create -> first training metric %.3f s, -> COMPLETED %.3f s\n", to_metric, to_done);
  std::printf("ratio create->first metric / bare run: %.2f\n", to_metric / local);
  std::printf("ratio create->COMPLETED / bare run: %.2f\n", to_done / local);
}

// Raw prepared SQLite inserts of the same rows the master stores. With
// `master_schema` false: into a bare table with one index. With it true:
// into the metrics table of a database the master's own Store created (same
// columns, both indexes, the unique key that de-duplicates retried reports,
// the foreign key to its trial), with the master's INSERT OR IGNORE: what
// SQLite itself costs for what the master must store. Rows get batches
// first_batch.. so later calls on the same file add to its table as the
// master's later runs add to its own.
double RawSqliteRowsPerSecond(const std::string& path, int rows, int per_txn, bool master_schema,
                              int64_t first_batch) {
  if (master_schema && first_batch == 0) {
    auto store = det::master::Store::Open(path);
    if (!store.ok()) std::exit(1);
    det::master::ExperimentRow e;
    e.state = "ACTIVE";
    auto exp_id = (*store)->InsertExperiment(e);
    if (!exp_id.ok()) {
      std::fprintf(stderr, "InsertExperiment: %s\n", exp_id.status().ToString().c_str());
      std::exit(1);
    }
    det::master::TrialRow t;
    t.experiment_id = *exp_id;
    t.state = "ACTIVE";
    auto trial_id = (*store)->InsertTrial(t);
    if (!trial_id.ok() || *trial_id != 1) {
      std::fprintf(stderr, "InsertTrial: %s\n", trial_id.status().ToString().c_str());
      std::exit(1);
    }
  }
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;", nullptr, nullptr,
               nullptr);
  sqlite3_stmt* st = nullptr;
  if (master_schema) {
    sqlite3_prepare_v2(db,
                       "INSERT OR IGNORE INTO metrics(trial_id, trial_run_id, metric_group, total_batches, "
                       "total_epochs, metrics, time_ms, archived) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                       -1, &st, nullptr);
  } else {
    sqlite3_exec(db,
                 "CREATE TABLE IF NOT EXISTS m(id INTEGER PRIMARY KEY, trial_id INTEGER, run INTEGER, grp TEXT, batches INTEGER, "
                 "epochs REAL, metrics TEXT, time_ms INTEGER, archived INTEGER);"
                 "CREATE INDEX IF NOT EXISTS mi ON m(trial_id, batches);",
                 nullptr, nullptr, nullptr);
    sqlite3_prepare_v2(db,
                       "INSERT INTO m(trial_id,run,grp,batches,epochs,metrics,time_ms,archived) VALUES(?,?,?,?,?,?,?,0)",
                       -1, &st, nullptr);
  }
  if (st == nullptr) {
    std::fprintf(stderr, "prepare: %s\n", sqlite3_errmsg(db));
    std::exit(1);
  }
  auto t0 = Clock::now();
  for (int i = 0; i < rows;) {
    sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
    for (int k = 0; k < per_txn && i < rows; ++k, ++i) {
      std::string metrics = "{\"loss\":" + std::to_string(1.0 / (i + 1)) + ",\"accuracy\":0.5}";
      sqlite3_bind_int64(st, 1, 1);
      sqlite3_bind_int64(st, 2, 1);
      sqlite3_bind_text(st, 3, "training", -1, SQLITE_STATIC);
      sqlite3_bind_int64(st, 4, first_batch + i);
      sqlite3_bind_double(st, 5, i / 100.0);
      sqlite3_bind_text(st, 6, metrics.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(st, 7, 1700000000000LL + i);
      sqlite3_step(st);
      sqlite3_reset(st);
    }
    sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  }
  double secs = Seconds(t0, Clock::now());
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rows / secs;
}

// Rows per second through TrialService.ReportTrainingMetrics of one
// det-master. The bench plays the agent (to learn the allocation id and
// token the master hands out).
class IngestionTarget {
 public:
  IngestionTarget(const TempDir& dir, const std::string& binary) : master_(dir, binary) {
    auto channel = grpc::CreateChannel(master_.grpc, grpc::InsecureChannelCredentials());
    auto agent = det::agent::v1::AgentService::NewStub(channel);
    auto api = det::api::v1::Determined::NewStub(channel);
    det::agent::v1::RegisterAgentRequest reg;
    reg.set_agent_id("bench-agent");
    reg.set_version(det::kDetVersion);
    auto* dev = reg.add_devices();
    dev->set_id(0);
    dev->set_type(det::api::v1::DEVICE_TYPE_CPU);
    det::agent::v1::RegisterAgentResponse reg_resp;
    {
      grpc::ClientContext ctx;
      if (!agent->RegisterAgent(&ctx, reg, &reg_resp).ok()) std::exit(1);
    }
    stream_ctx_.AddMetadata("authorization", "Bearer " + reg_resp.session_token());
    stream_ = agent->Connect(&stream_ctx_);

    std::ifstream so(kSynthetic, std::ios::binary);
    std::stringstream bytes;
    bytes << so.rdbuf();
    det::api::v1::CreateExperimentRequest create;
    create.set_config_yaml(std::string(kConfig));
    create.set_trial_so(bytes.str());
    create.set_activate(true);
    det::api::v1::CreateExperimentResponse created;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + RestLogin(master_.http));
    auto s = api->CreateExperiment(&ctx, create, &created);
    if (!s.ok()) {
      std::fprintf(stderr, "CreateExperiment: %s\n", s.error_message().c_str());
      std::exit(1);
    }
    det::agent::v1::MasterMessage msg;
    while (stream_->Read(&msg)) {
      if (msg.has_start_allocation()) {
        allocation_ = msg.start_allocation().allocation_id();
        token_ = msg.start_allocation().allocation_token();
        break;
      }
    }
  }
  ~IngestionTarget() { stream_ctx_.TryCancel(); }

  // `rows` rows, `per_request` to a request, from `clients` connections at
  // once. The requests are built up front: what is timed is the master's
  // side (gRPC, authorization, encoding, SQLite), not the client's. Every
  // run reports new batches: the master de-duplicates repeated reports.
  double Run(int clients, int rows, int per_request) {
    const int64_t base = first_batch_;
    first_batch_ += rows;
    std::vector<std::vector<det::trial::v1::ReportTrainingMetricsRequest>> work(clients);
    for (int i = 0, n = 0; i < rows; ++n) {
      det::trial::v1::ReportTrainingMetricsRequest req;
      req.set_allocation_id(allocation_);
      for (int k = 0; k < per_request && i < rows; ++k, ++i) {
        auto* row = req.add_rows();
        row->set_total_batches(base + i);
        row->set_total_epochs(i / 100.0);
        (*row->mutable_metrics())["loss"] = 1.0 / (i + 1);
        (*row->mutable_metrics())["accuracy"] = 0.5;
      }
      work[n % clients].push_back(std::move(req));
    }
    // A connection per client, opened and used once before the clock starts.
    std::vector<std::unique_ptr<det::trial::v1::TrialService::Stub>> stubs;
    for (int c = 0; c < clients; ++c) {
      grpc::ChannelArguments args;
      args.SetInt("bench-client", c);  // a separate connection per client
      stubs.push_back(det::trial::v1::TrialService::NewStub(
          grpc::CreateCustomChannel(master_.grpc, grpc::InsecureChannelCredentials(), args)));
      det::trial::v1::ReportTrainingMetricsRequest empty;
      empty.set_allocation_id(allocation_);
      Report(*stubs.back(), empty);
    }
    auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        for (const auto& req : work[c]) Report(*stubs[c], req);
      });
    }
    for (auto& t : threads) t.join();
    return rows / Seconds(t0, Clock::now());
  }

 private:
  void Report(det::trial::v1::TrialService::Stub& stub, const det::trial::v1::ReportTrainingMetricsRequest& req) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-allocation-token", token_);
    det::trial::v1::ReportTrainingMetricsResponse resp;
    auto s = stub.ReportTrainingMetrics(&ctx, req, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "ReportTrainingMetrics: %s\n", s.error_message().c_str());
      std::exit(1);
    }
  }

  Master master_;
  grpc::ClientContext stream_ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<det::agent::v1::AgentMessage, det::agent::v1::MasterMessage>> stream_;
  std::string allocation_, token_;
  int64_t first_batch_ = 0;
};

struct Round {
  double bare = 0, raw = 0, one_client = 0, one_client_before = 0;
  double raw4 = 0, four_clients = 0, four_clients_before = 0;
};
// Side by side: each master run (1 client, then 4) comes right after a raw
// SQLite run of as many rows into a table that has grown as much as the
// master's, so a slow spell of the machine and a larger table hit both
// sides of a ratio; the rounds' medians are what is reported. With a
// `before` master (another build of det-master), it runs right after this
// one, on its own database.
std::vector<Round> IngestionRounds(const TempDir& dir, int rows, int per_request, int rounds,
                                   const std::string& before_binary) {
  IngestionTarget after(dir, kBin + "/det-master");
  std::unique_ptr<TempDir> before_dir;
  std::unique_ptr<IngestionTarget> before;
  if (!before_binary.empty()) {
    before_dir = std::make_unique<TempDir>();
    before = std::make_unique<IngestionTarget>(*before_dir, before_binary);
  }
  std::vector<Round> out;
  for (int r = 0; r < rounds; ++r) {
    Round round;
    const int64_t done = 2LL * r * rows;
    round.bare = RawSqliteRowsPerSecond(dir / "bare.db", rows, per_request, false, done);
    round.raw = RawSqliteRowsPerSecond(dir / "raw.db", rows, per_request, true, done);
    round.one_client = after.Run(1, rows, per_request);
    if (before) round.one_client_before = before->Run(1, rows, per_request);
    round.raw4 = RawSqliteRowsPerSecond(dir / "raw.db", rows, per_request, true, done + rows);
    round.four_clients = after.Run(4, rows, per_request);
    if (before) round.four_clients_before = before->Run(4, rows, per_request);
    out.push_back(round);
  }
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 200000, per_request = 100, n_rounds = 5;
  std::string before;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--rows") rows = std::atoi(argv[i + 1]);
    if (a == "--rows-per-request") per_request = std::atoi(argv[i + 1]);
    if (a == "--rounds") n_rounds = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--before-master") before = argv[i + 1];
  }
  Latency();
  TempDir dir;
  std::vector<Round> rounds = IngestionRounds(dir, rows, per_request, n_rounds, before);
  auto median = [&](double (*field)(const Round&)) {
    std::vector<double> v;
    for (const Round& r : rounds) v.push_back(field(r));
    return Median(v);
  };
  std::printf("metric ingestion, %d rows, %d row(s) per request/transaction, median of %d side-by-side rounds:\n", rows,
              per_request, n_rounds);
  std::printf("  raw prepared SQLite inserts, bare one-index table:    %.0f rows/s\n",
              median([](const Round& r) { return r.bare; }));
  std::printf("  raw prepared SQLite inserts, the master's schema:     %.0f rows/s\n",
              median([](const Round& r) { return r.raw; }));
  std::printf("  through det-master, 1 reporting client (sequential): %.0f rows/s\n",
              median([](const Round& r) { return r.one_client; }));
  std::printf("  through det-master, 4 reporting clients at once:      %.0f rows/s\n",
              median([](const Round& r) { return r.four_clients; }));
  std::printf("  ratio master / raw (master's schema): %.3f with 1 client (goal >= 0.5), %.3f with 4\n",
              median([](const Round& r) { return r.one_client / r.raw; }),
              median([](const Round& r) { return r.four_clients / r.raw4; }));
  std::printf("  ratio master / raw (bare table):      %.3f with 1 client, %.3f with 4\n",
              median([](const Round& r) { return r.one_client / r.bare; }),
              median([](const Round& r) { return r.four_clients / r.bare; }));
  std::printf("  1-client ratio per round (master's schema):");
  for (const Round& r : rounds) std::printf(" %.3f", r.one_client / r.raw);
  std::printf("\n");
  if (!before.empty()) {
    std::printf("  before (%s), same rounds:\n", before.c_str());
    std::printf("    ratio before / raw (master's schema): %.3f with 1 client (goal >= 0.5), %.3f with 4\n",
                median([](const Round& r) { return r.one_client_before / r.raw; }),
                median([](const Round& r) { return r.four_clients_before / r.raw4; }));
    std::printf("    ratio after / before: %.3f with 1 client, %.3f with 4\n",
                median([](const Round& r) { return r.one_client / r.one_client_before; }),
                median([](const Round& r) { return r.four_clients / r.four_clients_before; }));
  }
  return 0;
}
