// The health check (health.h): its cache, its stall bound, the core and store
// probes, and GET /api/v1/health, /healthz and /livez through RestServer (in
// process): public, listed in the route table, 503 with a reason when the
// core is wedged, the database file is gone or the master is shutting down;
// liveness asks the core only.
#include "master/http/health.h"

#include <filesystem>
#include <chrono>
#include <future>
#include <mutex>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "master/core/lock_probe.h"
#include "master/core/master_core.h"
#include "master/http/rest_server.h"
#include "master/store/store.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace det::master {
namespace {

namespace fs = std::filesystem;
using det::testing::TempDir;

// A MasterCore on `dir`/master (checkpoints under `dir`/checkpoints), no
// background thread.
absl::StatusOr<std::unique_ptr<MasterCore>> CoreIn(const TempDir& dir) {
  MasterOptions options;
  options.data_dir = dir / "master";
  options.checkpoint_storage_roots = {dir / "checkpoints"};
  options.background_thread = false;
  return MasterCore::Create(options);
}

TEST(HealthCheckTest, AFloodOfChecksRunsTheProbeOncePerWindow) {
  auto clock = std::make_shared<FakeClock>();
  HealthCheck health([] { return absl::OkStatus(); }, clock, HealthOptions{1000, 5000});
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(health.Check().ok());
  EXPECT_EQ(health.probes(), 1);
  clock->AdvanceMs(999);
  EXPECT_TRUE(health.Check().ok());
  EXPECT_EQ(health.probes(), 1);
  clock->AdvanceMs(1);
  EXPECT_TRUE(health.Check().ok());
  EXPECT_EQ(health.probes(), 2);
}

TEST(HealthCheckTest, AFailedProbeIsUnavailableWithItsReasonUntilItPasses) {
  auto clock = std::make_shared<FakeClock>();
  bool broken = true;
  HealthCheck health(
      [&broken] { return broken ? absl::InternalError("disk on fire") : absl::OkStatus(); }, clock);
  absl::Status st = health.Check();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "disk on fire");
  broken = false;
  EXPECT_FALSE(health.Check().ok()) << "cached for the window";
  clock->AdvanceMs(1000);
  EXPECT_TRUE(health.Check().ok());
}

TEST(HealthCheckTest, ShuttingDownIsUnavailable) {
  HealthCheck health([] { return absl::OkStatus(); }, std::make_shared<FakeClock>());
  ASSERT_TRUE(health.Check().ok());
  health.SetShuttingDown();
  absl::Status st = health.Check();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "the master is shutting down");
}

// A probe stuck in the database: past the stall bound, other requests answer
// 503 at once instead of queueing behind it.
TEST(HealthCheckTest, AStuckProbeAnswersUnavailableAfterTheStallBound) {
  auto clock = std::make_shared<FakeClock>();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  HealthCheck health(
      [released] {
        released.wait();
        return absl::OkStatus();
      },
      clock, HealthOptions{1000, 5000});
  std::thread first([&health] { EXPECT_TRUE(health.Check().ok()); });
  ASSERT_TRUE(det::testing::PollUntil([&health] { return health.probes() == 1; }, std::chrono::seconds(10)));
  clock->AdvanceMs(5000);
  absl::Status st = health.Check();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(st.message(), "has not answered a health probe within 5000 ms")) << st;
  EXPECT_EQ(health.probes(), 1) << "no second probe while one runs";
  release.set_value();
  first.join();
  EXPECT_TRUE(health.Check().ok());
}

TEST(HealthCheckTest, TheStoreProbeNoticesADeletedOrReplacedDatabaseFile) {
  TempDir dir;
  const std::string path = dir / "det.db";
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  HealthCheck::Probe probe = StoreHealthProbe(store->get());
  EXPECT_TRUE(probe().ok());
  fs::copy_file(path, dir / "copy.db");
  fs::remove(path);
  absl::Status gone = probe();
  EXPECT_EQ(gone.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(gone.message(), "the database file " + path + " is gone")) << gone;
  fs::rename(dir / "copy.db", path);  // another file (inode) at the same path
  absl::Status replaced = probe();
  EXPECT_EQ(replaced.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(replaced.message(), "was replaced under the running master")) << replaced;
}

// A wedged core (its lock held: a deadlock, a stall under the lock): the
// probe answers Unavailable once its bound has passed, not never.
// MasterCore::Ping's probe (master/core/lock_probe.h): a thread waiting on
// the mutex, not a try_lock poll; callers wait for its answer, bounded.
TEST(LockProbeTest, AnswersWhetherItsThreadTookTheMutexWithinTheBound) {
  std::mutex target;
  LockProbe probe(target);
  EXPECT_TRUE(probe.Probe(std::chrono::seconds(60))) << "a free mutex";
  std::unique_lock<std::mutex> held(target);
  EXPECT_FALSE(probe.Probe(std::chrono::milliseconds(50))) << "held for the whole bound";
  // Released while a probe waits: its thread, queued on the mutex, takes it.
  std::future<bool> waiting = std::async(std::launch::async, [&] { return probe.Probe(std::chrono::seconds(60)); });
  held.unlock();
  EXPECT_TRUE(waiting.get());
  // Callers at the same time share the probe thread.
  std::vector<std::future<bool>> callers;
  for (int i = 0; i < 8; ++i) {
    callers.push_back(std::async(std::launch::async, [&] { return probe.Probe(std::chrono::seconds(60)); }));
  }
  for (auto& c : callers) EXPECT_TRUE(c.get());
}

TEST(HealthCheckTest, TheCoreProbeAnswersWithinItsBoundWhileTheCoreIsWedged) {
  TempDir dir;
  auto core = CoreIn(dir);
  ASSERT_TRUE(core.ok()) << core.status();
  HealthCheck::Probe probe = CoreHealthProbe(core->get(), 200);
  EXPECT_TRUE(probe().ok());
  {
    std::unique_lock<std::mutex> wedged = (*core)->LockForTesting();
    const auto start = std::chrono::steady_clock::now();
    absl::Status st = probe();
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(absl::StrContains(st.message(), "the master's core has not answered within 200 ms")) << st;
    EXPECT_GE(waited, std::chrono::milliseconds(200));
    EXPECT_LT(waited, std::chrono::seconds(5)) << "bounded";
  }
  EXPECT_TRUE(probe().ok()) << "answers again once the lock is free";
}

TEST(HealthCheckTest, AllProbesAnswersTheFirstFailure) {
  int runs = 0;
  HealthCheck::Probe all = AllProbes({[&runs] { ++runs; return absl::OkStatus(); },
                                      [&runs] { ++runs; return absl::UnavailableError("second"); },
                                      [&runs] { ++runs; return absl::UnavailableError("third"); }});
  EXPECT_EQ(all().message(), "second");
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(AllProbes({})().ok());
}

TEST(HealthCheckTest, HealthAnswerIsJson) {
  HealthReply ok = HealthAnswer(absl::OkStatus());
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, R"({"status":"ok"})");
  HealthReply down = HealthAnswer(absl::UnavailableError("the master is shutting down \xff"));
  EXPECT_EQ(down.status, 503);
  nlohmann::json j = nlohmann::json::parse(down.body);
  EXPECT_EQ(j["status"], "unavailable");
  EXPECT_TRUE(absl::StartsWith(j["reason"].get<std::string>(), "the master is shutting down")) << down.body;
}

class HealthRouteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto core = CoreIn(dir_);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    rest_ = std::make_unique<RestServer>(core_.get());
  }
  // The status line's code and the body of `request` (headers end with a blank line).
  std::pair<int, std::string> Serve(const std::string& request) {
    const std::string raw = rest_->ServeRawForTesting(request);
    const size_t end = raw.find("\r\n\r\n");
    if (raw.size() < 12 || end == std::string::npos) return {0, raw};
    return {std::stoi(raw.substr(9, 3)), raw.substr(end + 4)};
  }
  std::pair<int, std::string> Get(const std::string& path, const std::string& headers = "") {
    return Serve("GET " + path + " HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n");
  }
  TempDir dir_;
  std::unique_ptr<MasterCore> core_;
  std::unique_ptr<RestServer> rest_;
};

TEST_F(HealthRouteTest, BothPathsArePublicAndNeedNoToken) {
  for (const std::string path : {"/api/v1/health", "/healthz", "/api/v1/health?verbose=1", "/livez"}) {
    SCOPED_TRACE(path);
    auto [status, body] = Get(path);
    EXPECT_EQ(status, 200) << body;
    EXPECT_EQ(nlohmann::json::parse(body)["status"], "ok");
    // A bad token or a cross-origin cookie changes nothing: nothing is read.
    EXPECT_EQ(Get(path, "Authorization: Bearer nope\r\n").first, 200);
    EXPECT_EQ(Get(path, "Cookie: det_token=nope\r\nOrigin: http://evil.example\r\n").first, 200);
  }
  auto head = Serve("HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(head.first, 200);
  EXPECT_EQ(head.second, "");
  // Only GET and HEAD are public: anything else on /api/v1/health is an API
  // path like any other; on /healthz and /livez it is 405 naming GET and HEAD.
  EXPECT_EQ(Serve("POST /api/v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}").first, 401);
  EXPECT_EQ(Get("/api/v1/healthy").first, 401);
  for (const std::string request : {"POST /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
                                    "DELETE /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"}) {
    SCOPED_TRACE(request);
    const std::string raw = rest_->ServeRawForTesting(request);
    EXPECT_TRUE(absl::StartsWith(raw, "HTTP/1.1 405")) << raw;
    EXPECT_TRUE(absl::StrContains(raw, "Allow: GET, HEAD\r\n")) << raw;
    EXPECT_TRUE(absl::StrContains(raw, "answers GET and HEAD only")) << raw;
  }
  // Listed as the one public route without an RPC.
  int listed = 0;
  for (const RestServer::Route& r : rest_->routes()) {
    if (r.pattern != kHealthPath) continue;
    ++listed;
    EXPECT_EQ(r.method, "GET");
    EXPECT_FALSE(r.authenticated);
    EXPECT_EQ(r.rpc, "");
  }
  EXPECT_EQ(listed, 1);
}

TEST_F(HealthRouteTest, ShuttingDownAnswers503WithTheReason) {
  ASSERT_EQ(Get("/healthz").first, 200);
  rest_->health().SetShuttingDown();
  for (const std::string path : {"/api/v1/health", "/healthz"}) {
    auto [status, body] = Get(path);
    EXPECT_EQ(status, 503) << body;
    EXPECT_EQ(nlohmann::json::parse(body)["reason"], "the master is shutting down");
  }
}

// Liveness (/livez) asks the core only: a deleted database and shutting
// down leave it 200 (a restart would lose what the master holds), while
// readiness (/healthz) answers 503.
TEST_F(HealthRouteTest, LivenessIgnoresTheDatabaseFileAndShuttingDown) {
  const std::string db = core_->store()->path();
  ASSERT_TRUE(fs::remove(db)) << db;
  EXPECT_EQ(Get("/healthz").first, 503);
  auto [status, body] = Get("/livez");
  EXPECT_EQ(status, 200) << body;
  EXPECT_EQ(nlohmann::json::parse(body)["status"], "ok");
  rest_->health().SetShuttingDown();
  EXPECT_EQ(Get("/livez").first, 200);
}

// A wedged core (its lock held): readiness and liveness both answer 503
// naming it within the probe's bound (kCoreWaitMs), well inside the probes'
// timeouts (deploy/k8s/master.yaml: 3 s and 5 s).
TEST_F(HealthRouteTest, AWedgedCoreAnswers503WithinTheBound) {
  ASSERT_EQ(Get("/healthz").first, 200);
  ASSERT_EQ(Get("/livez").first, 200);
  std::unique_lock<std::mutex> wedged = core_->LockForTesting();
  // Past the 1 s cache window of the answers above.
  ASSERT_TRUE(det::testing::PollUntil(
      [&] {
        const auto start = std::chrono::steady_clock::now();
        auto [status, body] = Get("/healthz");
        const auto took = std::chrono::steady_clock::now() - start;
        if (status == 200) return false;
        EXPECT_EQ(status, 503) << body;
        EXPECT_TRUE(absl::StrContains(nlohmann::json::parse(body)["reason"].get<std::string>(),
                                      "the master's core has not answered within 2000 ms"))
            << body;
        EXPECT_LT(took, std::chrono::milliseconds(kCoreWaitMs + 2000)) << "bounded";
        return true;
      },
      std::chrono::seconds(10)));
  ASSERT_TRUE(det::testing::PollUntil([&] { return Get("/livez").first == 503; }, std::chrono::seconds(10)));
  wedged.unlock();
  EXPECT_TRUE(det::testing::PollUntil([&] { return Get("/healthz").first == 200; }, std::chrono::seconds(10)));
}

TEST_F(HealthRouteTest, ADeletedDatabaseAnswers503NamingTheFile) {
  const std::string db = core_->store()->path();
  ASSERT_TRUE(fs::remove(db)) << db;
  auto [status, body] = Get("/api/v1/health");
  EXPECT_EQ(status, 503) << body;
  EXPECT_TRUE(absl::StrContains(nlohmann::json::parse(body)["reason"].get<std::string>(),
                                "the database file " + db + " is gone"))
      << body;
}

}  // namespace
}  // namespace det::master
