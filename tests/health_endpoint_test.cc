// The master's health check end to end (issue 47, part 5): a real det-master
// answers GET /api/v1/health, GET /healthz and GET /livez without a token,
// lists the route as public, answers the standard grpc.health.v1.Health
// service on its gRPC port, serves it over HTTPS with TLS, answers 503 naming
// the file once its database is deleted under it (liveness stays 200), 503
// for --shutdown-drain-ms after SIGTERM, 405 to other methods on /healthz;
// and a restarted master refuses to create an empty database over the
// cluster's state.
#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include <future>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_join.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using nlohmann::json;

// grpc.health.v1.Health/Check of `service` ("" = the whole server) on
// `address`; the response's bytes ("\x08\x01" is status SERVING), or the
// call's error as "error: CODE MESSAGE".
std::string GrpcHealthCheck(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status st) { done.set_value(st); });
  grpc::Status st = done.get_future().get();
  if (!st.ok()) return "error: " + std::to_string(st.error_code()) + " " + st.error_message();
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return "error: unreadable response";
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

TEST(HealthEndpoint, PublicOnBothPathsListedAndOnTheGrpcPort) {
  TempDir dir;
  TestCluster cluster(dir);
  for (const std::string path : {"/api/v1/health", "/healthz"}) {
    SCOPED_TRACE(path);
    auto res = cluster.Http("GET", path, {});
    ASSERT_TRUE(res) << "no answer";
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(json::parse(res->body)["status"], "ok") << res->body;
    EXPECT_EQ(res->get_header_value("Cache-Control"), "no-store");
  }
  // The route table lists it as public (auth_test sweeps the others).
  int status = 0;
  json routes = cluster.Get("/api/v1/routes", &status);
  ASSERT_EQ(status, 200) << routes.dump();
  bool listed = false;
  for (const json& r : routes["routes"]) {
    if (r["pattern"] != "/api/v1/health") continue;
    listed = true;
    EXPECT_EQ(r["method"], "GET");
    EXPECT_FALSE(r["authenticated"].get<bool>());
  }
  EXPECT_TRUE(listed) << routes.dump();
  EXPECT_EQ(GrpcHealthCheck(cluster.grpc_address()), std::string("\x08\x01", 2)) << "want SERVING";
}

// With --tls-cert/--tls-key the check is HTTPS like the rest of the port (a
// Kubernetes probe then needs `scheme: HTTPS`): curl -f verifying the
// certificate gets 200. openssl and curl are test dependencies
// (deploy/install-deps.sh): missing, the test fails.
TEST(HealthEndpoint, ServedOverHttpsWithTls) {
  TempDir dir;
  ASSERT_EQ(WriteSelfSignedCert(dir.path()), "");
  ASSERT_EQ(access("/usr/bin/curl", X_OK), 0) << "/usr/bin/curl is missing: run deploy/install-deps.sh";
  TestCluster cluster(
      dir, TestClusterOptions().add_master_flags({"--tls-cert", dir / "cert.pem", "--tls-key", dir / "key.pem"}));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const std::string url = "https://127.0.0.1:" + std::to_string(cluster.http_port()) + "/healthz";
  std::string out, err;
  ASSERT_EQ(RunProcess({"/usr/bin/curl", "-fsS", "--max-time", "10", "--cacert", dir / "cert.pem", url}, &out, &err),
            0)
      << err;
  EXPECT_EQ(json::parse(out)["status"], "ok") << out;
}

// The master writes to a deleted file once det.db is removed under it (an
// operator's rm, a data dir on a lost mount): the check says so within its
// 1 s cache window.
TEST(HealthEndpoint, ADeletedDatabaseAnswers503NamingTheFile) {
  TempDir dir;
  TestCluster cluster(dir);
  auto before = cluster.Http("GET", "/healthz", {});
  ASSERT_TRUE(before);
  ASSERT_EQ(before->status, 200) << before->body;
  ASSERT_EQ(::unlink(cluster.db_path().c_str()), 0) << cluster.db_path();
  std::string body;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto res = cluster.Http("GET", "/api/v1/health", {});
        if (!res || res->status != 503) return false;
        body = res->body;
        return true;
      },
      std::chrono::seconds(10)))
      << "still serving 10 s after det.db was deleted";
  json j = json::parse(body);
  EXPECT_EQ(j["status"], "unavailable");
  EXPECT_NE(j["reason"].get<std::string>().find("the database file " + cluster.db_path() + " is gone"),
            std::string::npos)
      << body;
  // Liveness does not look at the file: a restart would lose what the master
  // still holds (deploy/k8s/master.yaml's livenessProbe is /livez).
  auto live = cluster.Http("GET", "/livez", {});
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200) << live->body;
}

// SIGTERM: the master answers 503 "shutting down" for --shutdown-drain-ms
// (everything else still served, liveness 200) before its ports close, so a
// load balancer polling /healthz sees it; then it exits 0.
TEST(HealthEndpoint, AfterSigtermItAnswers503ForTheDrainThenExits) {
  TempDir dir;
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--shutdown-drain-ms", "3000"}));
  auto before = cluster.Http("GET", "/healthz", {});
  ASSERT_TRUE(before);
  ASSERT_EQ(before->status, 200) << before->body;
  cluster.master().Signal(SIGTERM);
  std::string body;
  std::vector<std::string> seen;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto res = cluster.Http("GET", "/healthz", {});
        seen.push_back(res ? std::to_string(res->status) : httplib::to_string(res.error()));
        if (!res || res->status != 503) return false;
        body = res->body;
        return true;
      },
      std::chrono::seconds(10)))
      << "no 503 after SIGTERM; answers: " << absl::StrJoin(seen, ", ") << "\n" << cluster.MasterLog();
  EXPECT_EQ(json::parse(body)["reason"], "the master is shutting down") << body;
  auto live = cluster.Http("GET", "/livez", {});
  ASSERT_TRUE(live) << "the port closed before the drain ended";
  EXPECT_EQ(live->status, 200) << live->body;
  EXPECT_EQ(cluster.master().Wait(std::chrono::seconds(30)), 0) << cluster.MasterLog();
}

// Another method on /healthz or /livez is 405 naming GET and HEAD, at once
// (curl -X POST sends no Content-Length: the body is never waited for).
TEST(HealthEndpoint, OtherMethodsOnHealthzAnswer405AtOnce) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_EQ(access("/usr/bin/curl", X_OK), 0) << "/usr/bin/curl is missing: run deploy/install-deps.sh";
  for (const std::string path : {"/healthz", "/livez"}) {
    const std::string url = "http://127.0.0.1:" + std::to_string(cluster.http_port()) + path;
    std::string out, err;
    ASSERT_EQ(RunProcess({"/usr/bin/curl", "-sS", "-X", "POST", "--max-time", "10", "-D", "-", "-o", "/dev/null",
                          url},
                         &out, &err),
              0)
        << path << ": " << err;
    EXPECT_NE(out.find("HTTP/1.1 405"), std::string::npos) << out;
    EXPECT_NE(out.find("Allow: GET, HEAD"), std::string::npos) << out;
  }
}

// det.db gone while the data dir holds the cluster's state (its cluster-id,
// written at each start): a restarted master refuses to start an empty
// cluster over it, naming the file and both fixes, and creates nothing;
// with --init-empty-db it starts (empty).
TEST(HealthEndpoint, ARestartedMasterRefusesToCreateAnEmptyDatabaseOverTheClustersState) {
  TempDir dir;
  std::string db;
  {
    TestCluster cluster(dir);
    db = cluster.db_path();
  }
  ASSERT_TRUE(std::filesystem::exists(dir / "master/cluster-id"));
  for (const std::string suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix);
  std::string out, err;
  EXPECT_EQ(RunProcess({std::string(DET_BIN_DIR) + "/det-master", "--data-dir", dir / "master", "--grpc-port", "0",
                        "--http-port", "0"},
                       &out, &err, std::chrono::seconds(60)),
            2)
      << err;
  EXPECT_NE(err.find("det-master: error: the database " + db + " is missing or empty, but the data dir"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("cluster-id (cluster "), std::string::npos) << err;
  EXPECT_NE(err.find("start once with --init-empty-db"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(db)) << "nothing created";
  // Never from a config file, where it would stay and disarm the check.
  WriteFile(dir / "master.toml", "init-empty-db = true\n");
  EXPECT_NE(RunProcess({std::string(DET_BIN_DIR) + "/det-master", "--config", dir / "master.toml", "--data-dir",
                        dir / "master", "--grpc-port", "0", "--http-port", "0"},
                       &out, &err, std::chrono::seconds(60)),
            0);
  EXPECT_NE(err.find("init-empty-db: This option is not allowed in a configuration file"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(db)) << "nothing created";
  std::filesystem::remove(dir / "ports-1.json");  // the first cluster's: the next one writes its own
  TestCluster fresh(dir, TestClusterOptions().add_master_flags({"--init-empty-db"}));
  int status = 0;
  json master = fresh.Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << master.dump();
}

}  // namespace
}  // namespace det::testing
