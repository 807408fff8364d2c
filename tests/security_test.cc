// Security: the attacks of the security issue, each tried end to end against
// a real master (and agents where they matter) and refused with the stated
// status, nothing deleted or changed, and the master alive and small.
//
// One section per area; each test is the attack as an attacker would run it:
//   1. Ownership and the authorization sweep
//   2. Secure defaults (passwords, throttling, TLS)
//   3. Paths (checkpoint storage roots, checkpoint ids, GC)
//   4. Agents (placement, per-agent credential, secret, --trial-user)
//   5. Containment (a trial's processes, the artifact cache)
//   6. Bounds (configs, ids, logs, message sizes, long-polls)
//   7. Tokens (revocation races, allocation tokens)
//   8. Fuzzers (RSS and malloc limits)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

// Sections 2 and 7 (secure defaults, tokens).
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>

#include <atomic>
#include <regex>

#include "det/agent/v1/agent.grpc.pb.h"
#include "det/api/v1/api.grpc.pb.h"

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;

// Resident set size of `pid` in MiB (VmRSS of /proc/PID/status), -1 when
// unknown.
int64_t RssMiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) / 1024;
  }
  return -1;
}

// The master is still serving and small: every attack test ends with this.
void ExpectMasterHealthy(TestCluster& cluster) {
  int status = 0;
  cluster.Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << "the master stopped answering";
  int64_t rss = RssMiB(cluster.master().pid());
  EXPECT_GT(rss, 0);
  EXPECT_LT(rss, 400) << "master RSS " << rss << " MiB";
}

// ---------------------------------------------------------------------------
// 1. Ownership and the authorization sweep
// ---------------------------------------------------------------------------

// (section 1 tests)

// ---------------------------------------------------------------------------
// 2. Secure defaults
// ---------------------------------------------------------------------------

using json = nlohmann::json;

// Sends `request` as is to 127.0.0.1:`port` and returns the response head
// (what came within 10 s; "" when it cannot connect).
std::string RawHttp(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n;
    // Up to the end of the response head: the status line is what counts.
    while (reply.find("\r\n\r\n") == std::string::npos && (n = recv(fd, buf, sizeof(buf), 0)) > 0) {
      reply.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return reply;
}

// A master bound beyond loopback (0.0.0.0, port 0) with the built-in users'
// empty passwords refuses to start, naming them and the fixes; with
// --allow-empty-passwords it starts; with --initial-admin-password-file the
// empty passwords are gone.
TEST(SecurityTest, NonLoopbackMasterRefusesEmptyPasswords) {
  TempDir dir;
  Subprocess refused({std::string(kTestBinDir) + "/det-master", "--data-dir", dir / "refused", "--host", "0.0.0.0",
                      "--grpc-port", "0", "--http-port", "0", "--ports-file", dir / "refused-ports.json"},
                     dir / "refused.out", dir / "refused.err");
  const int code = refused.Wait(30s);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "the master kept running";
  EXPECT_THAT(refused.Stderr(), ::testing::HasSubstr("admin, determined have an empty password"));
  EXPECT_THAT(refused.Stderr(), ::testing::HasSubstr("--initial-admin-password-file"));
  EXPECT_THAT(refused.Stderr(), ::testing::HasSubstr("--allow-empty-passwords"));
  EXPECT_TRUE(ReadFile(dir / "refused-ports.json").empty()) << "it served";

  {
    TempDir allowed_dir;
    TestCluster allowed(allowed_dir,
                        TestClusterOptions().add_master_flags({"--host", "0.0.0.0", "--allow-empty-passwords"}));
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_THAT(allowed.MasterLog(), ::testing::HasSubstr("--allow-empty-passwords"));
    ExpectMasterHealthy(allowed);
  }

  WriteFile(dir / "first-password", "  c0rrect-h0rse\n");
  TempDir pw_dir;
  TestCluster cluster(pw_dir, TestClusterOptions().add_master_flags(
                                  {"--host", "0.0.0.0", "--initial-admin-password-file", dir / "first-password"}));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_EQ(RestLogin(cluster.http_port(), "admin", ""), "");
  EXPECT_EQ(RestLogin(cluster.http_port(), "determined", ""), "");
  EXPECT_NE(RestLogin(cluster.http_port(), "admin", "c0rrect-h0rse"), "");
  const std::string token = RestLogin(cluster.http_port(), "determined", "c0rrect-h0rse");
  auto me = cluster.Http("GET", "/api/v1/me", {{"Authorization", "Bearer " + token}}, "");
  ASSERT_TRUE(me);
  EXPECT_EQ(me->status, 200);
  // An empty file is refused.
  WriteFile(dir / "empty-password", "\n");
  Subprocess empty({std::string(kTestBinDir) + "/det-master", "--data-dir", dir / "empty", "--grpc-port", "0",
                    "--http-port", "0", "--initial-admin-password-file", dir / "empty-password"},
                   dir / "empty.out", dir / "empty.err");
  EXPECT_NE(empty.Wait(30s), 0);
  EXPECT_THAT(empty.Stderr(), ::testing::HasSubstr("--initial-admin-password-file"));
}

// Changing one's own password needs the current one (REST and det-cli); a
// stolen session token alone cannot lock the owner out.
TEST(SecurityTest, OwnPasswordChangeNeedsTheOldPassword) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  int status = 0;
  json me = cluster.Get("/api/v1/me", &status);
  ASSERT_EQ(status, 200);
  const int64_t id = me["user"].value("id", int64_t{0});
  json resp = cluster.Send("PATCH", absl::StrCat("/api/v1/users/", id), R"({"password": "stolen"})", &status);
  EXPECT_EQ(status, 400) << resp.dump();
  EXPECT_THAT(resp.dump(), ::testing::HasSubstr("old_password"));
  resp = cluster.Send("PATCH", absl::StrCat("/api/v1/users/", id), R"({"password": "stolen", "oldPassword": "guess"})",
                      &status);
  EXPECT_EQ(status, 403) << resp.dump();
  EXPECT_THAT(resp.dump(), ::testing::HasSubstr("old_password"));
  EXPECT_NE(RestLogin(cluster.http_port(), "determined", ""), "") << "the password changed";
  EXPECT_EQ(RestLogin(cluster.http_port(), "determined", "stolen"), "");
  resp = cluster.Send("PATCH", absl::StrCat("/api/v1/users/", id), R"({"password": "n3w", "oldPassword": ""})",
                      &status);
  EXPECT_EQ(status, 200) << resp.dump();
  EXPECT_NE(RestLogin(cluster.http_port(), "determined", "n3w"), "");
  ExpectMasterHealthy(cluster);
}

// Password guessing: after 5 failures for a user the master refuses further
// attempts (429, "retry in N s") even with the right password, before
// hashing anything; other users are unaffected.
TEST(SecurityTest, FailedLoginsAreThrottled) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ASSERT_FALSE(cluster.Token().empty());  // the harness's own session, before the attack
  auto login = [&](const std::string& user, const std::string& password) {
    auto r = cluster.Http("POST", "/api/v1/auth/login", {},
                          json{{"username", user}, {"password", password}}.dump());
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  };
  // Guess until refused: 5 failures are allowed, then each one backs off
  // (1 s, 2 s, ...) and attempts during the backoff are refused unchecked.
  std::pair<int, std::string> refused;
  int failures = 0;
  for (int i = 0; i < 12 && refused.first != 429; ++i) {
    refused = login("determined", absl::StrCat("guess", i));
    if (refused.first == 401) ++failures;
  }
  EXPECT_GE(failures, 6);
  EXPECT_EQ(refused.first, 429) << refused.second;
  EXPECT_THAT(refused.second, ::testing::HasSubstr("too many failed logins, retry in"));
  EXPECT_EQ(login("determined", "").first, 429) << "the right password during the backoff";
  EXPECT_EQ(login("admin", "").first, 200);  // another user still logs in
  // Unknown names are throttled alike: the answer does not reveal them.
  bool nobody_refused = false;
  for (int i = 0; i < 12 && !nobody_refused; ++i) nobody_refused = login("nobody", "x").first == 429;
  EXPECT_TRUE(nobody_refused);
  // The backoff passes.
  EXPECT_TRUE(PollUntil([&] { return login("determined", "").first == 200; }, 90s));
  ExpectMasterHealthy(cluster);
}

// TLS on the REST port with the gRPC certificate: HTTPS answers, plain HTTP
// gets nothing, det-cli works over gRPC TLS with --tls-ca.
TEST(SecurityTest, RestServesHttpsWithTheGrpcCertificate) {
  if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/openssl to make a certificate";
  if (access("/usr/bin/curl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/curl to speak HTTPS";
  TempDir dir;
  std::string out, err;
  ASSERT_EQ(RunProcess({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        dir / "key.pem", "-out", dir / "cert.pem", "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"},
                       &out, &err),
            0)
      << err;
  TestCluster cluster(
      dir, TestClusterOptions().add_master_flags({"--tls-cert", dir / "cert.pem", "--tls-key", dir / "key.pem"}));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const std::string port = std::to_string(cluster.http_port());
  EXPECT_EQ(RunProcess({"/usr/bin/curl", "-sS", "--max-time", "10", "--cacert", dir / "cert.pem",
                        "https://127.0.0.1:" + port + "/api/v1/master"},
                       &out, &err),
            0)
      << err;
  EXPECT_THAT(out, ::testing::HasSubstr("\"version\""));
  // Login over HTTPS, then an authenticated call.
  ASSERT_EQ(RunProcess({"/usr/bin/curl", "-sS", "--max-time", "10", "--cacert", dir / "cert.pem", "-d",
                        R"({"username": "determined", "password": ""})", "https://127.0.0.1:" + port + "/api/v1/auth/login"},
                       &out, &err),
            0)
      << err;
  const std::string token = json::parse(out, nullptr, false).value("token", "");
  ASSERT_FALSE(token.empty()) << out;
  EXPECT_EQ(RunProcess({"/usr/bin/curl", "-sS", "--max-time", "10", "--cacert", dir / "cert.pem", "-H",
                        "Authorization: Bearer " + token, "https://127.0.0.1:" + port + "/api/v1/me"},
                       &out, &err),
            0)
      << err;
  EXPECT_THAT(out, ::testing::HasSubstr("determined"));
  // Plain HTTP on the same port: no HTTP answer.
  int plain = 0;
  cluster.Get("/api/v1/master", &plain);
  EXPECT_NE(plain, 200);
  EXPECT_NE(RunProcess({"/usr/bin/curl", "-sS", "--max-time", "10", "http://127.0.0.1:" + port + "/api/v1/master"},
                       &out, &err),
            0);
  // det-cli over gRPC TLS.
  EXPECT_EQ(cluster.Cli({"--tls-ca", dir / "cert.pem", "user", "whoami"}, &out, &err), 0) << err;
  EXPECT_NE(cluster.Cli({"user", "whoami"}, &out, &err), 0) << "plaintext gRPC to a TLS master";
  int64_t rss = RssMiB(cluster.master().pid());
  EXPECT_GT(rss, 0);
  EXPECT_LT(rss, 400);
}

// Bodies: without a user token, a REST request announcing a body over 64 KiB
// is refused (413) from its Content-Length alone, before any of it is read
// (the 100 MB are never sent: a master that waited for them would hang).
TEST(SecurityTest, AnonymousRestBodiesAreRefusedBeforeReading) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  for (const char* path : {"/api/v1/auth/login", "/api/v1/GetMaster", "/api/v1/Login"}) {
    const std::string reply = RawHttp(cluster.http_port(), absl::StrCat("POST ", path,
                                                                        " HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                                                        "application/json\r\nContent-Length: "
                                                                        "100000000\r\n\r\n{"));
    EXPECT_THAT(reply, ::testing::StartsWith("HTTP/1.1 413")) << path << ": " << reply;
  }
  // Without a token any /api/ path is 401 before its body is read.
  const std::string reply = RawHttp(
      cluster.http_port(),
      "POST /api/v1/experiments HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n{");
  EXPECT_THAT(reply, ::testing::StartsWith("HTTP/1.1 401")) << reply;
  // A small anonymous body still works.
  EXPECT_NE(RestLogin(cluster.http_port()), "");
  ExpectMasterHealthy(cluster);
}

// ---------------------------------------------------------------------------
// 3. Paths
// ---------------------------------------------------------------------------

// (section 3 tests)

// ---------------------------------------------------------------------------
// 4. Agents
// ---------------------------------------------------------------------------

// (section 4 tests)

// ---------------------------------------------------------------------------
// 5. Containment
// ---------------------------------------------------------------------------

// (section 5 tests)

// ---------------------------------------------------------------------------
// 6. Bounds
// ---------------------------------------------------------------------------

// (section 6 tests)

// ---------------------------------------------------------------------------
// 7. Tokens
// ---------------------------------------------------------------------------

// The cluster secret file for a master (dir/cluster-secret); returns its path.
std::string WriteSecret(const TempDir& dir) {
  WriteFile(dir / "cluster-secret", "s3cret-for-the-agents\n");
  return dir / "cluster-secret";
}

// Logout while the token is in use from another connection: once Logout has
// answered, no request with the token succeeds, however the token cache and
// the in-flight requests interleave.
TEST(SecurityTest, RevokedTokenStaysRevokedUnderConcurrentUse) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  for (int round = 0; round < 3; ++round) {
    const std::string token = RestLogin(cluster.http_port());
    ASSERT_FALSE(token.empty());
    std::atomic<bool> logged_out{false};
    std::atomic<int> after{0}, accepted_after{0}, before_ok{0};
    std::thread user([&] {
      httplib::Client client("127.0.0.1", cluster.http_port());
      while (after < 30) {
        const bool started_after = logged_out.load();
        auto r = client.Get("/api/v1/me", {{"Authorization", "Bearer " + token}});
        if (!started_after) {
          if (r && r->status == 200) ++before_ok;
          continue;
        }
        ++after;
        if (r && r->status == 200) ++accepted_after;
      }
    });
    ASSERT_TRUE(PollUntil([&] { return before_ok > 2; }, 30s));
    auto out = cluster.Http("POST", "/api/v1/auth/logout", {{"Authorization", "Bearer " + token}}, "");
    ASSERT_TRUE(out);
    EXPECT_EQ(out->status, 200);
    logged_out = true;
    user.join();
    EXPECT_EQ(accepted_after, 0) << "a revoked token was accepted (round " << round << ")";
    auto again = cluster.Http("GET", "/api/v1/me", {{"Authorization", "Bearer " + token}}, "");
    ASSERT_TRUE(again);
    EXPECT_EQ(again->status, 401);
  }
  ExpectMasterHealthy(cluster);
}

// The database holds only hashes of allocation tokens: someone who reads
// det.db (a backup, a leaked file) cannot act as a running trial. The trial
// still authenticates with its token (its metrics arrive).
TEST(SecurityTest, AllocationTokensAreStoredHashed) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  cluster.StartAgent("a1");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s));
  const int id = cluster.CreateExperiment(absl::StrCat(R"(name: hashed-token
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
    batches: 1000000
min_validation_period:
  batches: 100000
scheduling_unit: 10
checkpoint_storage:
  type: shared_fs
  host_path: )", dir / "checkpoints", R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 128
  val_size: 32
)"),
                                          "hashed");
  ASSERT_GT(id, 0);
  std::vector<std::string> tokens;
  ASSERT_TRUE(PollUntil(
      [&] {
        tokens.clear();
        sqlite3* db = nullptr;
        if (sqlite3_open_v2(cluster.db_path().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
          sqlite3_busy_timeout(db, 1000);
          sqlite3_stmt* st = nullptr;
          if (sqlite3_prepare_v2(db, "SELECT token FROM allocations", -1, &st, nullptr) == SQLITE_OK) {
            while (sqlite3_step(st) == SQLITE_ROW) {
              tokens.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
            }
          }
          sqlite3_finalize(st);
        }
        sqlite3_close(db);
        return !tokens.empty();
      },
      60s))
      << cluster.MasterLog();
  for (const std::string& t : tokens) {
    EXPECT_TRUE(std::regex_match(t, std::regex("[0-9a-f]{64}"))) << "not a SHA-256: " << t;
  }
  // The trial's own (clear) token works: it reports training metrics.
  json trials;
  ASSERT_TRUE(PollUntil(
      [&] {
        trials = cluster.Trials(id);
        return trials.size() == 1 && !cluster.Metrics(trials[0].value("id", 0), "training").empty();
      },
      120s))
      << cluster.MasterLog() << cluster.AgentLogs();
  // Stop it (no GC of anything), and the master stays healthy.
  int status = 0;
  cluster.Send("POST", absl::StrCat("/api/v1/experiments/", id, "/kill"), "{}", &status);
  ExpectMasterHealthy(cluster);
}

// Messages the master accepts before knowing who sends them are bounded: a
// 64 MiB Login, GetMaster or RegisterAgent is RESOURCE_EXHAUSTED (the limit
// is --max-message-mib, 8) and the master stays small. (Large trial.so files go through UploadArtifact in
// 1 MiB chunks, which needs a token.)
TEST(SecurityTest, UnauthenticatedMessagesAreBounded) {
  TempDir dir;
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--cluster-secret-file", WriteSecret(dir)}));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials(), args);
  auto api = ::det::api::v1::Determined::NewStub(channel);
  auto agents = ::det::agent::v1::AgentService::NewStub(channel);
  const std::string big(64 << 20, 'x');
  const int64_t rss_before = RssMiB(cluster.master().pid());
  for (int i = 0; i < 3; ++i) {
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 60s);
      ::det::api::v1::LoginRequest req;
      req.set_username("determined");
      req.set_password(big);
      ::det::api::v1::LoginResponse resp;
      EXPECT_EQ(api->Login(&ctx, req, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    }
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 60s);
      ::det::api::v1::GetMasterRequest req;
      req.GetReflection()->MutableUnknownFields(&req)->AddLengthDelimited(1000, big);
      ::det::api::v1::GetMasterResponse resp;
      EXPECT_EQ(api->GetMaster(&ctx, req, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    }
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 60s);
      ::det::agent::v1::RegisterAgentRequest req;
      req.set_agent_id("a1");
      req.set_hostname(big);
      ::det::agent::v1::RegisterAgentResponse resp;
      EXPECT_EQ(agents->RegisterAgent(&ctx, req, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    }
  }
  // Concurrently, from several connections: still refused, still bounded.
  std::vector<std::thread> attackers;
  std::atomic<int> exhausted{0};
  for (int t = 0; t < 4; ++t) {
    attackers.emplace_back([&] {
      auto own = ::det::api::v1::Determined::NewStub(
          grpc::CreateCustomChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials(), args));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 60s);
      ::det::api::v1::LoginRequest req;
      req.set_password(big);
      ::det::api::v1::LoginResponse resp;
      if (own->Login(&ctx, req, &resp).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++exhausted;
    });
  }
  for (auto& t : attackers) t.join();
  EXPECT_EQ(exhausted, 4);
  const int64_t rss_after = RssMiB(cluster.master().pid());
  // gRPC 1.51 assembles a message before its size check, so the one in
  // flight costs memory while it arrives (bounded by the master's gRPC memory
  // quota, --grpc-memory-mib, and freed when refused): nine 64 MiB calls
  // (576 MiB) must not add up.
  EXPECT_LT(rss_after - rss_before, 192) << rss_before << " -> " << rss_after << " MiB";
  // A normal login still works.
  EXPECT_NE(RestLogin(cluster.http_port()), "");
  ExpectMasterHealthy(cluster);
}

// Large trial libraries still work, in chunks and only for users: det-cli
// uploads a 12 MiB trial.so with UploadArtifact and creates the experiment
// by hash; the same bytes inline are RESOURCE_EXHAUSTED, and UploadArtifact
// without a token is UNAUTHENTICATED.
TEST(SecurityTest, LargeTrialLibrariesGoThroughUploadArtifact) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const std::string big_so = ReadFile(kTestSyntheticTrial) + std::string(12 << 20, '\0');
  WriteFile(dir / "big_trial.so", big_so);
  const int id = cluster.CreateExperiment(SingleTrialConfig("big", dir / "checkpoints"), "big", dir / "big_trial.so");
  EXPECT_GT(id, 0);
  json exp = cluster.Get(absl::StrCat("/api/v1/experiments/", id));
  EXPECT_NE(exp.dump().find(absl::StrCat(big_so.size())), std::string::npos) << "its trial.so size: " << exp.dump();

  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto api = ::det::api::v1::Determined::NewStub(
      grpc::CreateCustomChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials(), args));
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + cluster.Token());
    ::det::api::v1::CreateExperimentRequest req;
    req.set_config_yaml(SingleTrialConfig("inline", dir / "checkpoints"));
    req.set_trial_so(big_so);
    ::det::api::v1::CreateExperimentResponse resp;
    EXPECT_EQ(api->CreateExperiment(&ctx, req, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    grpc::ClientContext ctx;
    ::det::api::v1::UploadArtifactResponse resp;
    auto writer = api->UploadArtifact(&ctx, &resp);
    ::det::api::v1::UploadArtifactRequest first;
    first.set_sha256(std::string(64, 'a'));
    first.set_size_bytes(1 << 20);
    first.set_chunk(std::string(1 << 20, 'x'));
    writer->Write(first);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  ExpectMasterHealthy(cluster);
}

// ---------------------------------------------------------------------------
// 8. Fuzzers
// ---------------------------------------------------------------------------

// (section 8 tests)

TEST(SecurityTest, MasterStartsHealthy) {
  TempDir dir;
  TestCluster cluster(dir);
  ExpectMasterHealthy(cluster);
}

}  // namespace
}  // namespace det::testing
