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
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <google/protobuf/message.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

// Sections 2 and 7 (secure defaults, tokens).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>

#include <atomic>
#include <regex>

#include "det/agent/v1/agent.grpc.pb.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/det_version.h"
#include "common/proto_json.h"
#include "common/sha256.h"
#include "det/agent/v1/agent.grpc.pb.h"
#include "det/api/v1/api.grpc.pb.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
namespace agentv1 = ::det::agent::v1;

// The master is still serving and stayed small: every attack test ends with
// this. Its peak RSS over its whole life (VmHWM, the attack included) is
// under 400 MiB, not only its RSS now (RssMiB and PeakRssMiB: test_util.h).
void ExpectMasterHealthy(TestCluster& cluster) {
  int status = 0;
  cluster.Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << "the master stopped answering";
  const int64_t peak = PeakRssMiB(cluster.master().pid());
  std::printf("master peak RSS (VmHWM): %lld MiB\n", static_cast<long long>(peak));
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, 400) << "master peak RSS " << peak << " MiB";
}

// ---------------------------------------------------------------------------
// 1. Ownership and the authorization sweep
// ---------------------------------------------------------------------------

// A gRPC unary call of det.api.v1.Determined `method` with a serialized
// request and a user token; returns the status.
grpc::Status CallApi(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const google::protobuf::Message& request, const std::string& token) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ctx.AddMetadata("authorization", "Bearer " + token);
  std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer req(&slice, 1), resp;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/det.api.v1.Determined/" + method, grpc::StubOptions(), &req, &resp,
                 [&done](grpc::Status st) { done.set_value(st); });
  return done.get_future().get();
}

// The RPCs that change something: each must be refused to a user who is
// neither the owner of what it names nor an admin. The sweep also checks
// that every other RPC of the service is a read (or the caller's own
// session), so that a new mutating RPC cannot be missed.
const std::set<std::string> kMutatingRpcs = {
    "ActivateExperiment", "PauseExperiment", "CancelExperiment", "KillExperiment", "ArchiveExperiment",
    "UnarchiveExperiment", "DeleteExperiment", "PatchExperiment", "KillTrial", "PauseTrial", "ActivateTrial",
    "DeleteCheckpoints", "PatchCheckpoint", "ContinueExperiment", "EnableAgent", "DisableAgent", "EnableSlot", "DisableSlot", "UpdateJob", "PostUser",
    "PatchUser", "ArchiveWorkspace", "UnarchiveWorkspace", "ArchiveProject", "UnarchiveProject"};
bool IsReadOrOwnSession(const std::string& rpc) {
  // BackupDatabase and MasterLogs read, admins only (BackupTest.OnlyAdminsMayBackUp).
  for (const char* prefix : {"Get", "Preview", "Stream", "Download", "TrialLogs", "MasterLogs", "BackupDatabase"}) {
    if (rpc.rfind(prefix, 0) == 0) return true;
  }
  // Creating is open to every user (they own what they create).
  return rpc == "Login" || rpc == "Logout" || rpc == "CreateExperiment" || rpc == "UploadArtifact" ||
         rpc == "PostWorkspace" || rpc == "PostProject";
}

// One trial that keeps training slowly (and checkpoints every 5 batches)
// until it is killed.
std::string SlowTrialConfig(const std::string& checkpoint_dir) {
  return absl::StrCat(R"(name: owned
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: 100
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 100000
min_validation_period:
  batches: 5
min_checkpoint_period:
  batches: 5
scheduling_unit: 5
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoint_dir, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
)");
}

// Must show 2: a second non-admin user (mallory) calling every mutating RPC
// (gRPC) and every mutating REST route (declared and generic) on the first
// user's (determined's) experiment, trial and checkpoint gets
// PERMISSION_DENIED / 403, and nothing changes; the owner and an admin may.
TEST(SecurityTest, AuthorizationSweepAnotherUserCannotChangeAnything) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a1");
  const int64_t exp = cluster.CreateExperiment(SlowTrialConfig(dir / "checkpoints"), "owned");
  ASSERT_GT(exp, 0);
  std::string uuid;
  ASSERT_TRUE(PollUntil(
      [&] {
        nlohmann::json cps = cluster.Get(absl::StrCat("/api/v1/experiments/", exp, "/checkpoints"));
        if (!cps.is_object() || cps["checkpoints"].empty()) return false;
        uuid = cps["checkpoints"][0]["uuid"];
        return true;
      },
      120s))
      << cluster.MasterLog() << cluster.AgentLogs();
  const int64_t trial = cluster.Trials(exp)[0]["id"];
  // determined's workspace and project: both id 2 (1 is Uncategorized).
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"workspace", "create", "team"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"project", "create", "team", "models"}, &out, &err), 0) << err;
  const int64_t owned_workspace_and_project = 2;

  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  ASSERT_FALSE(admin.empty());
  auto created = cluster.Http("POST", "/api/v1/users", {{"Authorization", "Bearer " + admin}},
                              R"({"user": {"username": "mallory"}, "password": "mallory-pw-1"})");
  ASSERT_TRUE(created && created->status == 200) << (created ? created->body : "no answer");
  const std::string mallory = RestLogin(cluster.http_port(), "mallory", "mallory-pw-1");
  ASSERT_FALSE(mallory.empty());
  nlohmann::json me = cluster.Get("/api/v1/me");
  const int64_t determined_id = me["user"]["id"];

  // The fields every mutating request may name, all pointing at determined's.
  const nlohmann::json body = {{"experiment_id", exp},        {"trial_id", trial},
                               {"checkpoint_uuids", {uuid}},  {"checkpoint_uuid", uuid}, {"job_id", absl::StrCat("exp-", exp)},
                               {"user_id", determined_id},    {"agent_id", "a1"},
                               {"slot_id", "0"},              {"name", "pwned"},
                               {"password", "pwned-pw-1"},    {"admin", true},
                               {"user", {{"username", "mallory2"}, {"admin", true}}},
                               {"priority", 1},               {"id", owned_workspace_and_project}};

  // gRPC: every method of the service, typed requests filled from `body`.
  auto channel = grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials());
  google::protobuf::internal::AssignDescriptors(&descriptor_table_det_2fapi_2fv1_2fapi_2eproto);
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName("det.api.v1.Determined");
  ASSERT_NE(service, nullptr);
  int grpc_checked = 0;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* m = service->method(i);
    SCOPED_TRACE(m->name());
    if (!kMutatingRpcs.count(m->name())) {
      EXPECT_TRUE(IsReadOrOwnSession(m->name())) << "a new RPC: add it to kMutatingRpcs or the reads";
      continue;
    }
    std::unique_ptr<google::protobuf::Message> req(
        google::protobuf::MessageFactory::generated_factory()->GetPrototype(m->input_type())->New());
    ASSERT_TRUE(JsonToMessage(body.dump(), req.get()).ok());
    grpc::Status st = CallApi(channel, m->name(), *req, mallory);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
    ++grpc_checked;
  }
  EXPECT_EQ(grpc_checked, static_cast<int>(kMutatingRpcs.size()));

  // REST: every route of a mutating RPC, path fields filled.
  nlohmann::json routes = cluster.Get("/api/v1/routes");
  int rest_checked = 0;
  for (const auto& route : routes["routes"]) {
    const std::string rpc = route.value("rpc", "");
    if (!kMutatingRpcs.count(rpc)) continue;
    std::string path = route["pattern"];
    for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
             {"{experiment_id}", std::to_string(exp)}, {"{trial_id}", std::to_string(trial)},
             {"{checkpoint_uuid}", uuid}, {"{job_id}", absl::StrCat("exp-", exp)},
             {"{user_id}", std::to_string(determined_id)}, {"{agent_id}", "a1"}, {"{slot_id}", "0"},
             {"{id}", std::to_string(owned_workspace_and_project)}}) {
      for (size_t at; (at = path.find(field)) != std::string::npos;) path.replace(at, field.size(), value);
    }
    SCOPED_TRACE(route["method"].get<std::string>() + " " + path);
    auto res = cluster.Http(route["method"], path, {{"Authorization", "Bearer " + mallory}}, body.dump());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 403) << res->body;
    EXPECT_NE(res->body.find("PERMISSION_DENIED"), std::string::npos) << res->body;
    ++rest_checked;
  }
  EXPECT_GE(rest_checked, static_cast<int>(kMutatingRpcs.size()));  // each generic route at least
  std::printf("[ swept    ] %d mutating RPCs and %d REST routes refused to another user\n", grpc_checked,
              rest_checked);

  // Nothing changed: still running under its name, checkpoint and users kept.
  nlohmann::json e = cluster.Get(absl::StrCat("/api/v1/experiments/", exp))["experiment"];
  EXPECT_EQ(e["state"], "STATE_ACTIVE");
  EXPECT_EQ(e["name"], "owned");
  EXPECT_EQ(e["username"], "determined");
  int status = 0;
  cluster.Get("/api/v1/checkpoints/" + uuid, &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(RestLogin(cluster.http_port(), "mallory", "mallory-pw-1").size() > 0);
  EXPECT_EQ(cluster.Get("/api/v1/users")["users"].size(), 3u);  // no mallory2
  EXPECT_TRUE(RestLogin(cluster.http_port(), "determined", "").size() > 0);  // password unchanged
  EXPECT_EQ(cluster.Get("/api/v1/workspaces/2")["workspace"].value("archived", false), false);
  EXPECT_EQ(cluster.Get("/api/v1/projects/2")["project"].value("archived", false), false);

  // The owner may, and so may an admin.
  EXPECT_EQ(cluster.Cli({"experiment", "pause", std::to_string(exp)}), 0);
  auto activate = cluster.Http("POST", absl::StrCat("/api/v1/experiments/", exp, "/activate"),
                               {{"Authorization", "Bearer " + admin}});
  ASSERT_TRUE(activate);
  EXPECT_EQ(activate->status, 200) << activate->body;
  EXPECT_EQ(cluster.Cli({"experiment", "kill", std::to_string(exp)}), 0);
  ExpectMasterHealthy(cluster);
}

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
                      "--advertise-address", "127.0.0.1", "--grpc-port", "0", "--http-port", "0", "--ports-file", dir / "refused-ports.json"},
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
                        TestClusterOptions().add_master_flags(
                            {"--host", "0.0.0.0", "--advertise-address", "127.0.0.1", "--allow-empty-passwords"}));
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_THAT(allowed.MasterLog(), ::testing::HasSubstr("--allow-empty-passwords"));
    ExpectMasterHealthy(allowed);
  }

  WriteFile(dir / "first-password", "  c0rrect-h0rse\n");
  TempDir pw_dir;
  TestCluster cluster(pw_dir, TestClusterOptions().add_master_flags(
                                  {"--host", "0.0.0.0", "--advertise-address", "127.0.0.1",
                                   "--initial-admin-password-file", dir / "first-password"}));
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
  ASSERT_EQ(WriteSelfSignedCert(dir.path()), "");
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
  int64_t rss = PeakRssMiB(cluster.master().pid());
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

namespace trialv1 = ::det::trial::v1;

// Helpers of sections 3 and 6: untrusted trial code with real credentials.

// A stand-in for det-trial (the agent's --det-trial): it saves its
// environment, which holds its allocation id, and its token (read from fd
// DET_ALLOCATION_TOKEN_FD: never in the environment) to
// DIR/trial-env/<allocation id>, prints a flood when the config sets
// FAKE_TRIAL_FLOOD, then sleeps. The test then calls det.trial.v1 as the
// trial's code could.
std::string FakeDetTrial(const TempDir& dir) {
  const std::string envs = dir / "trial-env";
  std::filesystem::create_directories(envs);
  const std::string script = dir / "fake-det-trial.sh";
  WriteFile(script, absl::StrCat(R"(#!/bin/sh
{ env; echo "DET_ALLOCATION_TOKEN=`cat <&$DET_ALLOCATION_TOKEN_FD`"; } > ")", envs, R"(/.$DET_ALLOCATION_ID" && mv ")", envs, R"(/.$DET_ALLOCATION_ID" ")", envs, R"(/$DET_ALLOCATION_ID"
if [ -n "$FAKE_TRIAL_FLOOD" ]; then
  awk 'BEGIN { s = "x"; for (i = 0; i < 19; i++) s = s s; print s;
               for (i = 0; i < 60000; i++) printf "agent flood line %d yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n", i }'
fi
exec sleep 300
)"));
  chmod(script.c_str(), 0755);
  return script;
}

// A fake trial's credentials, as its environment holds them.
struct FakeTrial {
  std::string allocation_id;
  std::string token;
  int64_t trial_id = 0;
};

// The first `n` fake trials that started (fewer after 60 s).
std::vector<FakeTrial> FakeTrials(const TempDir& dir, size_t n) {
  std::vector<FakeTrial> out;
  PollUntil(
      [&] {
        out.clear();
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir / "trial-env", ec)) {
          if (e.path().filename().string().rfind(".", 0) == 0) continue;
          FakeTrial t;
          std::istringstream in(ReadFile(e.path().string()));
          std::string line;
          while (std::getline(in, line)) {
            if (line.rfind("DET_ALLOCATION_ID=", 0) == 0) t.allocation_id = line.substr(18);
            if (line.rfind("DET_ALLOCATION_TOKEN=", 0) == 0) t.token = line.substr(21);
            if (line.rfind("DET_TRIAL_ID=", 0) == 0) t.trial_id = std::stoll(line.substr(13));
          }
          if (!t.token.empty()) out.push_back(t);
        }
        return out.size() >= n;
      },
      60s);
  return out;
}

// A cluster whose agent (`slots` slots) runs FakeDetTrial for every trial.
class FakeTrialCluster : public TestCluster {
 public:
  FakeTrialCluster(const TempDir& dir, int slots, TestClusterOptions options = {})
      : TestCluster(dir, std::move(options)),
        channel_(grpc::CreateChannel(grpc_address(), grpc::InsecureChannelCredentials())),
        stub_(trialv1::TrialService::NewStub(channel_)) {
    WriteFile(dir / "fake.so", FakeTrialSo());
    StartAgent("a", AgentOptions().set_slots(slots).add_flags({"--det-trial", FakeDetTrial(dir)}));
  }
  // Creates a one-trial experiment of `extra` appended to a config whose
  // checkpoints go to `checkpoint_dir` (its checkpoint_storage last).
  int CreateFake(const std::string& name, const std::string& checkpoint_dir, const std::string& extra = "") {
    return CreateExperiment(SingleTrialConfig(name, checkpoint_dir) + extra, name, dir() / "fake.so");
  }
  // Calls det.trial.v1 `method` as trial `t`.
  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (trialv1::TrialService::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                    const FakeTrial& t, Req req, Resp* resp = nullptr,
                    std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
    Resp ignored;
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-allocation-token", t.token);
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    req.set_allocation_id(t.allocation_id);
    return (stub_.get()->*method)(&ctx, req, resp ? resp : &ignored);
  }
  grpc::Status ReportCheckpoint(const FakeTrial& t, const std::string& uuid, int64_t batches) {
    trialv1::ReportCheckpointRequest req;
    req.set_uuid(uuid);
    req.set_total_batches(batches);
    return Call(&trialv1::TrialService::Stub::ReportCheckpoint, t, req);
  }
  trialv1::TrialService::Stub* stub() { return stub_.get(); }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<trialv1::TrialService::Stub> stub_;
};

// The checkpoint's state as REST reports it ("" when unknown).
std::string CheckpointState(TestCluster& cluster, const std::string& uuid) {
  return cluster.Get("/api/v1/checkpoints/" + uuid)["checkpoint"].value("state", "");
}

// Attack: a config whose checkpoint_storage.host_path points outside the
// allowed roots (plainly, by "..", or through a symlink into the master's
// data dir), so that checkpoint GC would later delete there. Refused with
// INVALID_ARGUMENT naming the field and the roots; a master whose root would
// contain its own data refuses to start.
TEST(SecurityTest, CheckpointStorageOutsideTheAllowedRootsIsRefused) {
  TempDir dir;
  TestCluster cluster(dir);
  const std::string root = dir / "checkpoints";
  std::filesystem::create_directories(root);
  std::filesystem::create_directory_symlink(dir / "master", root + "/to-master");
  for (const std::string& host_path :
       {std::string("/tmp"), dir / "master", root + "/../master", root + "/to-master", root + "/to-master/sub",
        std::string("relative/path")}) {
    nlohmann::json body = {{"config_yaml", SingleTrialConfig("outside", host_path)},
                           {"trial_so", absl::Base64Escape(FakeTrialSo())},
                           {"activate", true}};
    int status = 0;
    nlohmann::json resp = cluster.Send("POST", "/api/v1/experiments", body.dump(), &status);
    EXPECT_EQ(status, 400) << host_path << ": " << resp.dump();
    EXPECT_THAT(resp.dump(), ::testing::HasSubstr("checkpoint_storage.host_path")) << host_path;
    EXPECT_THAT(resp.dump(), ::testing::HasSubstr(root)) << "names the allowed roots";
  }
  EXPECT_EQ(cluster.Get("/api/v1/experiments")["experiments"].size(), 0u);
  // Under the root it is fine.
  nlohmann::json ok = {{"config_yaml", SingleTrialConfig("inside", root + "/exp")},
                       {"trial_so", absl::Base64Escape(FakeTrialSo())}};
  int status = 0;
  cluster.Send("POST", "/api/v1/experiments", ok.dump(), &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(std::filesystem::exists(cluster.db_path()));
  ExpectMasterHealthy(cluster);

  // A root that holds the master's own data: the master does not start.
  TempDir other;
  std::string out, err;
  int code = RunProcess({std::string(kTestBinDir) + "/det-master", "--data-dir", other / "master", "--grpc-port", "0",
                         "--http-port", "0", "--checkpoint-storage-root", other.path()},
                        &out, &err, 30s);
  EXPECT_EQ(code, 1) << out << err;
  EXPECT_THAT(err, ::testing::HasSubstr("contains the master's own"));
}

// Attack: trial code reports checkpoints named "../../master/det.db",
// "det.db", or a UUID that is a symlink it made to the master's data dir,
// so that GC would delete the master's database. Each is INVALID_ARGUMENT
// naming `uuid`; nothing is recorded and det.db is intact.
TEST(SecurityTest, TrialCannotNameACheckpointOutsideItsDirectory) {
  TempDir dir;
  FakeTrialCluster cluster(dir, 1);
  const std::string ckdir = dir / "checkpoints/exp";
  ASSERT_GT(cluster.CreateFake("names", ckdir), 0);
  auto trials = FakeTrials(dir, 1);
  ASSERT_EQ(trials.size(), 1u) << cluster.AgentLogs();
  const FakeTrial& t = trials[0];
  std::filesystem::create_directories(ckdir);
  const std::string link_uuid = "0f3c9a1e-5b2d-4c6e-8f10-112233445566";
  std::filesystem::create_directory_symlink(dir / "master", ckdir + "/" + link_uuid);
  for (const std::string& uuid : {std::string("../../master/det.db"), std::string("det.db"), std::string(".."),
                                  std::string("0F3C9A1E-5B2D-4C6E-8F10-112233445566"), link_uuid}) {
    grpc::Status st = cluster.ReportCheckpoint(t, uuid, 10);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << uuid << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), ::testing::HasSubstr("uuid")) << uuid;
  }
  EXPECT_EQ(cluster.Get(absl::StrCat("/api/v1/trials/", t.trial_id, "/checkpoints"))["checkpoints"].size(), 0u);
  // A real one is accepted (so the refusals above were the names').
  const std::string good = "1a2b3c4d-0000-4000-8000-00000000abcd";
  std::filesystem::create_directories(ckdir + "/" + good);
  EXPECT_TRUE(cluster.ReportCheckpoint(t, good, 10).ok());
  EXPECT_TRUE(std::filesystem::exists(cluster.db_path()));
  EXPECT_TRUE(std::filesystem::exists(dir / "master/artifacts"));
  ExpectMasterHealthy(cluster);
}

// Attack (issue 49): trial code asks the master for S3 credentials with its
// own allocation token, naming another trial or storage it has no business
// reading. GetCheckpointStorageCredentials answers only for the caller's
// trial and its own experiment's s3 storage (or a checkpoint it starts
// from): here, shared_fs experiments, so nothing at all.
TEST(SecurityTest, TrialCannotGetAnotherTrialsStorageCredentials) {
  TempDir dir;
  FakeTrialCluster cluster(dir, 2);
  ASSERT_GT(cluster.CreateFake("attacker", dir / "checkpoints"), 0);
  ASSERT_GT(cluster.CreateFake("victim", dir / "checkpoints"), 0);
  auto trials = FakeTrials(dir, 2);
  ASSERT_EQ(trials.size(), 2u) << cluster.AgentLogs();
  auto ask = [&](const FakeTrial& as, int64_t trial_id, const std::string& path) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-allocation-token", as.token);
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    trialv1::GetCheckpointStorageCredentialsRequest req;
    req.set_trial_id(trial_id);
    req.set_storage_path(path);
    trialv1::GetCheckpointStorageCredentialsResponse resp;
    grpc::Status st = cluster.stub()->GetCheckpointStorageCredentials(&ctx, req, &resp);
    EXPECT_TRUE(resp.secret_access_key().empty());
    return st.error_code();
  };
  const FakeTrial& attacker = trials[0];
  const FakeTrial& victim = trials[1];
  EXPECT_EQ(ask(attacker, victim.trial_id, "s3://det-test/x"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ask(attacker, attacker.trial_id, "s3://det-test/x"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ask(attacker, attacker.trial_id, "/etc"), grpc::StatusCode::INVALID_ARGUMENT);
  FakeTrial no_token = attacker;
  no_token.token.clear();
  EXPECT_EQ(ask(no_token, attacker.trial_id, "s3://det-test/x"), grpc::StatusCode::UNAUTHENTICATED);
  ExpectMasterHealthy(cluster);
}

// Attack: after reporting real checkpoints, trial code swaps a checkpoint's
// directory, or the storage directory above it, for a symlink to data it
// wants destroyed; then its trial ends and GC deletes the checkpoints. GC
// never follows either link: the targets are untouched, while a checkpoint
// left alone is deleted.
TEST(SecurityTest, CheckpointGcNeverFollowsASymlink) {
  TempDir dir;
  FakeTrialCluster cluster(dir, 2);
  const std::string gc = "  save_experiment_best: 0\n  save_trial_best: 0\n  save_trial_latest: 0\n";
  const std::string ck1 = dir / "checkpoints/one", ck2 = dir / "checkpoints/two";
  int e1 = cluster.CreateFake("one", ck1, gc);
  int e2 = cluster.CreateFake("two", ck2, gc);
  ASSERT_GT(e1, 0);
  ASSERT_GT(e2, 0);
  auto trials = FakeTrials(dir, 2);
  ASSERT_EQ(trials.size(), 2u) << cluster.AgentLogs();
  const int64_t trial1 = cluster.Trials(e1)[0].value("id", int64_t{0});
  const FakeTrial& t1 = trials[0].trial_id == trial1 ? trials[0] : trials[1];
  const FakeTrial& t2 = trials[0].trial_id == trial1 ? trials[1] : trials[0];
  const std::string swapped = "aaaaaaaa-0000-4000-8000-000000000001", plain = "aaaaaaaa-0000-4000-8000-000000000002",
                    under_link = "aaaaaaaa-0000-4000-8000-000000000003";
  for (const auto& [d, u] : {std::pair{ck1, swapped}, std::pair{ck1, plain}, std::pair{ck2, under_link}}) {
    std::filesystem::create_directories(d + "/" + u);
    WriteFile(d + "/" + u + "/model.pt", "weights");
  }
  ASSERT_TRUE(cluster.ReportCheckpoint(t1, swapped, 10).ok());
  ASSERT_TRUE(cluster.ReportCheckpoint(t1, plain, 20).ok());
  ASSERT_TRUE(cluster.ReportCheckpoint(t2, under_link, 10).ok());
  // What the trial wants destroyed: the master's data and a directory that
  // holds a same-named checkpoint.
  const std::string precious = dir / "precious";
  std::filesystem::create_directories(precious + "/" + under_link);
  WriteFile(precious + "/" + under_link + "/keep", "keep");
  std::filesystem::remove_all(ck1 + "/" + swapped);
  std::filesystem::create_directory_symlink(dir / "master", ck1 + "/" + swapped);
  std::filesystem::rename(ck2, ck2 + "-moved");
  std::filesystem::create_directory_symlink(precious, ck2);

  for (int e : {e1, e2}) {
    int status = 0;
    cluster.Send("POST", absl::StrCat("/api/v1/experiments/", e, "/kill"), "{}", &status);
    EXPECT_EQ(status, 200);
  }
  // GC ran: the plain checkpoint's directory is gone.
  EXPECT_TRUE(PollUntil([&] { return !std::filesystem::exists(ck1 + "/" + plain); }, 60s)) << cluster.MasterLog();
  for (const std::string& u : {swapped, plain, under_link}) {
    EXPECT_TRUE(PollUntil([&] { return CheckpointState(cluster, u) == "CHECKPOINT_STATE_DELETED"; }, 60s))
        << u << ": " << CheckpointState(cluster, u);
  }
  EXPECT_TRUE(std::filesystem::exists(cluster.db_path()));
  EXPECT_TRUE(std::filesystem::exists(dir / "master/artifacts"));
  EXPECT_TRUE(std::filesystem::is_symlink(ck1 + "/" + swapped));
  EXPECT_EQ(ReadFile(precious + "/" + under_link + "/keep"), "keep");
  EXPECT_TRUE(std::filesystem::exists(ck2 + "-moved/" + under_link + "/model.pt"));
  EXPECT_THAT(cluster.MasterLog(), ::testing::HasSubstr("not deleting"));
  ExpectMasterHealthy(cluster);
}

// ---------------------------------------------------------------------------
// 4. Agents
// ---------------------------------------------------------------------------

// Helpers of sections 4 and 5: a master with a cluster secret, fake agents
// speaking det.agent.v1 with it, and the processes of a running trial.

constexpr char kAgentSecret[] = "agents-secret-5d1c0e7a94b3";

// A master whose agents must present dir/secret.
TestClusterOptions SecretClusterOptions(const TempDir& dir) {
  WriteFile(dir / "secret", std::string(kAgentSecret) + "\n");
  return TestClusterOptions().add_master_flags({"--cluster-secret-file", dir / "secret"});
}

AgentOptions SecretAgent(const TempDir& dir) {
  return AgentOptions().add_flags({"--cluster-secret-file", dir / "secret"});
}

// One synthetic trial of `batches` batches, each `delay_ms` long, with
// `env` ("NAME=value" lines) in its environment.
std::string OneTrial(const std::string& name, int batches, int delay_ms, const std::vector<std::string>& env = {}) {
  std::string out = absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: )", delay_ms, R"(
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: )", batches, R"(
max_restarts: 0
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
)");
  for (const auto& e : env) absl::StrAppend(&out, "    - ", e, "\n");
  absl::StrAppend(&out, "data:\n  train_size: 256\n  val_size: 64\n");
  return out;
}

// The allocation agent `agent_id` runs ("" when none).
std::string AllocationOn(TestCluster& cluster, const std::string& agent_id) {
  auto agents = cluster.Get("/api/v1/agents");
  if (!agents.is_object() || !agents.contains("agents")) return "";
  for (const auto& a : agents["agents"]) {
    if (a.value("id", "") != agent_id) continue;
    for (const auto& id : a.value("allocation_ids", nlohmann::json::array())) return id.get<std::string>();
  }
  return "";
}

// Pids of live processes whose environment holds `entry` ("NAME=value").
std::vector<pid_t> PidsWithEnv(const std::string& entry) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = ReadFile(e.path() / "environ");
    if (std::string("\0", 1).append(env).find(std::string("\0", 1) + entry + std::string("\0", 1)) !=
        std::string::npos) {
      out.push_back(static_cast<pid_t>(std::stoi(name)));
    }
  }
  return out;
}

// Pids of live (not zombie) processes whose command line holds `marker`.
std::vector<pid_t> PidsWithCmdline(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadFile(e.path() / "stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') continue;
    std::string cmdline = ReadFile(e.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos) out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

// The "Uid:" line's real uid of /proc/PID/status, -1 when unknown.
int64_t ProcessUid(pid_t pid) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/status")));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) == 0) return std::stoll(line.substr(4));
  }
  return -1;
}

// A fake agent: det.agent.v1 calls with the cluster secret.
class FakeAgent {
 public:
  explicit FakeAgent(const std::string& address)
      : stub_(agentv1::AgentService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

  grpc::Status Register(const std::string& id, const std::string& credential,
                        agentv1::RegisterAgentResponse* resp) {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_hostname("evil-host");
    req.add_addresses("127.0.0.1");
    req.add_devices()->set_id(0);
    req.set_version(det::kDetVersion);
    req.set_agent_credential(credential);
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-cluster-secret", kAgentSecret);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->RegisterAgent(&ctx, req, resp);
  }

  // Downloads artifact `sha256` (discarding it); the call's status.
  grpc::Status Fetch(const std::string& session_token, const std::string& sha256) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-cluster-secret", kAgentSecret);
    ctx.AddMetadata("authorization", "Bearer " + session_token);
    agentv1::FetchArtifactRequest req;
    req.set_sha256(sha256);
    auto reader = stub_->FetchArtifact(&ctx, req);
    agentv1::FetchArtifactResponse chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }

  // Opens the session's Connect stream and sends `messages` on it.
  void Send(const std::string& session_token, const std::vector<agentv1::AgentMessage>& messages) {
    ctx_ = std::make_unique<grpc::ClientContext>();
    ctx_->AddMetadata("x-det-cluster-secret", kAgentSecret);
    ctx_->AddMetadata("authorization", "Bearer " + session_token);
    stream_ = stub_->Connect(ctx_.get());
    for (const auto& m : messages) ASSERT_TRUE(stream_->Write(m));
  }

  ~FakeAgent() {
    if (stream_) {
      stream_->WritesDone();
      ctx_->TryCancel();
      stream_->Finish();
    }
  }

 private:
  std::unique_ptr<agentv1::AgentService::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<agentv1::AgentMessage, agentv1::MasterMessage>> stream_;
};

// An agent's message may only be about allocations placed on it: a fake
// agent (with the cluster secret, registered under its own id) downloading
// another agent's trial.so, reporting its allocation TERMINATED and writing
// its trial's logs is refused; the real allocation keeps running and
// completes.
TEST(SecurityTest, AgentMessagesAboutAnotherAgentsAllocationAreRefused) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  cluster.StartAgent("a", SecretAgent(dir));
  const int exp = cluster.CreateExperiment(OneTrial("placement", 150, 20), "placement");
  ASSERT_GT(exp, 0);
  std::string alloc;
  ASSERT_TRUE(PollUntil([&] { return !(alloc = AllocationOn(cluster, "a")).empty(); }, 60s)) << cluster.AgentLogs();
  const int64_t trial = cluster.Trials(exp)[0].value("id", int64_t{0});
  ASSERT_GT(trial, 0);

  FakeAgent evil(cluster.grpc_address());
  agentv1::RegisterAgentResponse reg;
  grpc::Status st = evil.Register("evil", "", &reg);
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<agentv1::AgentMessage> attack(2);
  auto* ps = attack[0].mutable_process_state();
  ps->set_allocation_id(alloc);
  ps->set_rank(0);
  ps->set_state(agentv1::PROCESS_STATE_TERMINATED);
  ps->set_exit_code(1);
  auto* log = attack[1].mutable_logs()->add_logs();
  log->set_allocation_id(alloc);
  log->set_trial_id(trial);
  log->set_message("forged-log-line-by-evil");
  // Another agent's trial.so is not this agent's to download either.
  grpc::Status fetch = evil.Fetch(reg.session_token(), Sha256File(kTestSyntheticTrial).value());
  EXPECT_EQ(fetch.error_code(), grpc::StatusCode::PERMISSION_DENIED) << fetch.error_message();
  evil.Send(reg.session_token(), attack);
  ASSERT_TRUE(PollUntil(
      [&] {
        const std::string log = cluster.MasterLog();
        return absl::StrContains(log, "agent evil: refused a state change") &&
               absl::StrContains(log, "agent evil: refused log lines");
      },
      30s))
      << cluster.MasterLog();

  EXPECT_EQ(AllocationOn(cluster, "a"), alloc) << "the forged TERMINATED ended the allocation";
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 120s)) << cluster.MasterLog();
  auto t = cluster.Trials(exp)[0];
  EXPECT_EQ(t.value("restarts", 0), 0);
  auto logs = cluster.Get(absl::StrCat("/api/v1/trials/", trial, "/logs"));
  EXPECT_FALSE(absl::StrContains(logs.dump(), "forged-log-line-by-evil"));
  ExpectMasterHealthy(cluster);
}

// The cluster secret alone cannot take over a known (here disconnected)
// agent id: without its per-agent credential, or with a wrong one,
// RegisterAgent is PERMISSION_DENIED; the real agent, restarted with its
// credential file, comes back.
TEST(SecurityTest, RegisterAgentWithoutItsCredentialIsRefused) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  cluster.StartAgent("a", SecretAgent(dir));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s)) << cluster.AgentLogs();
  const std::string credential_file = dir / "agent-a/agent-credential";
  struct stat st {};
  ASSERT_EQ(stat(credential_file.c_str(), &st), 0) << "the agent did not keep its credential";
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  cluster.KillAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 0; }, 30s));

  FakeAgent evil(cluster.grpc_address());
  agentv1::RegisterAgentResponse resp;
  grpc::Status none = evil.Register("a", "", &resp);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::PERMISSION_DENIED) << none.error_message();
  EXPECT_THAT(none.error_message(), ::testing::HasSubstr("credential"));
  grpc::Status wrong = evil.Register("a", std::string(64, 'f'), &resp);
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::PERMISSION_DENIED) << wrong.error_message();
  EXPECT_EQ(cluster.ConnectedAgents(), 0);

  // The real agent (its work dir holds the credential) registers again.
  std::filesystem::create_directories(dir / "agent-a-1");
  std::filesystem::copy_file(credential_file, dir / "agent-a-1/agent-credential");
  cluster.StartAgent("a", SecretAgent(dir));
  EXPECT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s)) << cluster.AgentLogs();
  ExpectMasterHealthy(cluster);
}

// The cluster secret is read from its file only: it is in no process's
// environment (master, agent, trial), and an agent given it only through
// DET_CLUSTER_SECRET does not use it (refused, exits).
TEST(SecurityTest, ClusterSecretIsInNoProcessEnvironment) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  Subprocess& agent = cluster.StartAgent("a", SecretAgent(dir));
  const int exp = cluster.CreateExperiment(OneTrial("environ", 100, 50), "environ");
  ASSERT_GT(exp, 0);
  std::string alloc;
  std::vector<pid_t> trial_pids;
  ASSERT_TRUE(PollUntil(
      [&] {
        alloc = AllocationOn(cluster, "a");
        if (!alloc.empty()) trial_pids = PidsWithEnv("DET_ALLOCATION_ID=" + alloc);
        return !trial_pids.empty();
      },
      60s))
      << cluster.AgentLogs();
  for (pid_t pid : std::vector<pid_t>{cluster.master().pid(), agent.pid(), trial_pids[0]}) {
    const std::string env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    EXPECT_FALSE(env.empty()) << "cannot read /proc/" << pid << "/environ";
    EXPECT_FALSE(absl::StrContains(env, kAgentSecret)) << "the secret is in /proc/" << pid << "/environ";
    EXPECT_FALSE(absl::StrContains(env, "DET_CLUSTER_SECRET")) << pid;
  }

  Subprocess& env_only = cluster.StartAgent(
      "b", AgentOptions().set_prefix({"/usr/bin/env", std::string("DET_CLUSTER_SECRET=") + kAgentSecret}));
  const int rc = env_only.Wait(30s);
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "an agent without the secret file kept running";
  EXPECT_THAT(env_only.Stdout() + env_only.Stderr(), ::testing::HasSubstr("UNAUTHENTICATED"));
  EXPECT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 120s)) << cluster.MasterLog();
  ExpectMasterHealthy(cluster);
}

// --trial-user: the trial process runs as that user (nobody), and still
// reads its trial.so, works in its directory and checkpoints.
TEST(SecurityTest, TrialUserRunsTrialsAsThatUser) {
  if (geteuid() != 0) GTEST_SKIP() << "--trial-user needs the agent to run as root; this test runs as uid " << geteuid();
  TempDir dir;
  // The trial (uid 65534) must reach the agent's work dir and write its
  // checkpoints: the test dir is 0700 by default.
  chmod(dir.path().c_str(), 0755);
  TestCluster cluster(dir, SecretClusterOptions(dir));
  // The default checkpoint root is in the master's data dir, 0700 since
  // issue 46: let the trial's uid through it (search only).
  chmod((dir / "master").c_str(), 0711);
  std::filesystem::create_directories(dir / "master/checkpoints");
  chmod((dir / "master/checkpoints").c_str(), 01777);
  cluster.StartAgent("a", SecretAgent(dir).add_flags({"--trial-user", "nobody"}));
  const int exp = cluster.CreateExperiment(OneTrial("trial-user", 100, 30), "trial-user");
  ASSERT_GT(exp, 0);
  std::vector<pid_t> pids;
  ASSERT_TRUE(PollUntil(
      [&] {
        const std::string alloc = AllocationOn(cluster, "a");
        if (!alloc.empty()) pids = PidsWithEnv("DET_ALLOCATION_ID=" + alloc);
        return !pids.empty();
      },
      60s))
      << cluster.AgentLogs();
  for (pid_t pid : pids) EXPECT_EQ(ProcessUid(pid), 65534) << "pid " << pid;
  const int64_t trial = cluster.Trials(exp)[0].value("id", int64_t{0});
  EXPECT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 120s))
      << cluster.Get(absl::StrCat("/api/v1/trials/", trial, "/logs")).dump(1) << cluster.MasterLog();

  // Only root may use it.
  Subprocess& unprivileged = cluster.StartAgent(
      "b", SecretAgent(dir).add_flags({"--trial-user", "nobody"}).set_prefix({"/usr/sbin/runuser", "-u", "nobody", "--"}));
  const int rc = unprivileged.Wait(30s);
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(unprivileged.Stdout() + unprivileged.Stderr(), ::testing::HasSubstr("needs det-agent to run as root"));
  ExpectMasterHealthy(cluster);
}

// ---------------------------------------------------------------------------
// 5. Containment
// ---------------------------------------------------------------------------

// The cgroup v2 path of process `pid` ("0::PATH" of /proc/PID/cgroup,
// relative to the hierarchy's root), or "" when it has none or is gone.
std::string CgroupOf(pid_t pid) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/cgroup")));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

// Where the cgroup v2 hierarchy is mounted, or "".
std::string CgroupV2Mount() {
  std::istringstream in(ReadFile("/proc/self/mountinfo"));
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string f[5];
    for (std::string& field : f) fields >> field;
    if (f[3] == "/") return f[4];
  }
  return "";
}

// Why an agent this test starts cannot put trials in cgroups, or "" when it
// can: the agent runs in this test's cgroup and must create a child there,
// and ending a cgroup's processes needs cgroup.kill.
std::string WhyNoCgroups() {
  const std::string mount = CgroupV2Mount();
  if (mount.empty()) return "no cgroup v2 hierarchy is mounted (/proc/self/mountinfo)";
  const std::string own = CgroupOf(getpid());
  if (own.empty() || absl::StrContains(own, "/..")) return "this test is in no cgroup v2 group it can see";
  const std::string probe = absl::StrCat(mount, own == "/" ? "" : own, "/det-security-probe-", getpid());
  if (mkdir(probe.c_str(), 0755) != 0) {
    return absl::StrCat("cannot create a cgroup v2 group (mkdir ", probe, ": ", std::strerror(errno),
                        "): run the tests as root or in a delegated cgroup");
  }
  const bool has_kill = access((probe + "/cgroup.kill").c_str(), F_OK) == 0;
  rmdir(probe.c_str());
  return has_kill ? "" : "this kernel's cgroup v2 has no cgroup.kill (Linux 5.14 or later has)";
}

// A trial that starts a daemon escaping its process group (setsid, like
// `setsid sleep inf &`) and then finishes: once the trial has ended, the
// daemon is gone too. With the agent's cgroups (the agent says so, and the
// daemon is in the trial's cgroup under the agent's, removed at the end),
// and without them (process group and reaper only: the agent says so, and
// the daemon stays in the agent's own cgroup).
void ExpectEscapedProcessEndsWithTheTrial(bool cgroups) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  std::vector<std::string> flags;
  if (!cgroups) flags.push_back("--no-cgroups");
  const pid_t agent = cluster.StartAgent("a", SecretAgent(dir).add_flags(flags)).pid();
  // escape_trial.so runs `setsid sleep $ESCAPE_SLEEP_SECONDS &` when loaded.
  const std::string marker = absl::StrCat("3141.", getpid(), cgroups ? 0 : 1);
  const int exp = cluster.CreateExperiment(OneTrial("escape", 60, 50, {"ESCAPE_SLEEP_SECONDS=" + marker}), "escape",
                                           std::string(DET_TRIALS_DIR) + "/escape_trial.so");
  ASSERT_GT(exp, 0);
  std::string daemon_cgroup;
  ASSERT_TRUE(PollUntil(
      [&] {
        for (pid_t pid : PidsWithCmdline("sleep " + marker)) daemon_cgroup = CgroupOf(pid);
        return !daemon_cgroup.empty();
      },
      60s))
      << "the trial never started its daemon\n" << cluster.AgentLogs();
  const std::string agent_cgroup = CgroupOf(agent);
  const std::string agent_dir = absl::StrCat(agent_cgroup == "/" ? "" : agent_cgroup, "/det-agent-", agent);
  if (cgroups) {
    EXPECT_THAT(cluster.AgentLogs(), ::testing::HasSubstr("trial containment: cgroup v2 under " + CgroupV2Mount() + agent_dir));
    EXPECT_THAT(daemon_cgroup, ::testing::StartsWith(agent_dir + "/det-alloc-"))
        << "the escaped daemon is not in its trial's cgroup\n" << cluster.AgentLogs();
  } else {
    EXPECT_THAT(cluster.AgentLogs(), ::testing::HasSubstr("trial containment: process group and reaper only (--no-cgroups)"));
    EXPECT_EQ(daemon_cgroup, agent_cgroup);
  }
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 120s)) << cluster.MasterLog() << cluster.AgentLogs();
  // The rank's exit is reported only after its processes are gone.
  EXPECT_EQ(PidsWithCmdline("sleep " + marker), std::vector<pid_t>{}) << "a process outlived its trial";
  if (cgroups && absl::StartsWith(daemon_cgroup, agent_dir + "/")) {
    EXPECT_FALSE(std::filesystem::exists(CgroupV2Mount() + daemon_cgroup)) << "the trial's cgroup is left";
  }
  EXPECT_EQ(cluster.BusySlots(), 0);
  ExpectMasterHealthy(cluster);
}

TEST(SecurityTest, EscapedTrialProcessEndsWithTheTrialInItsCgroup) {
  if (std::string why = WhyNoCgroups(); !why.empty()) GTEST_SKIP() << "no cgroups for the agent here: " << why;
  ExpectEscapedProcessEndsWithTheTrial(true);
}

TEST(SecurityTest, EscapedTrialProcessEndsWithTheTrialWithoutCgroups) { ExpectEscapedProcessEndsWithTheTrial(false); }

// The agent's artifact cache: a cached trial.so is read-only, and one
// swapped by someone with the agent's uid (who chmods it writable first) is
// detected at the next launch, deleted and fetched again; the trial runs
// the real library.
TEST(SecurityTest, SwappedCachedTrialSoIsDetectedAndFetchedAgain) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  cluster.StartAgent("a", SecretAgent(dir));
  const int first = cluster.CreateExperiment(OneTrial("cache-1", 20, 0), "cache-1");
  ASSERT_GT(first, 0);
  ASSERT_TRUE(cluster.WaitForState(first, "STATE_COMPLETED", 120s)) << cluster.MasterLog() << cluster.AgentLogs();
  const std::string sha = Sha256File(kTestSyntheticTrial).value();
  const std::string cached = dir / ("agent-a/cache/" + sha + ".so");
  struct stat st {};
  ASSERT_EQ(stat(cached.c_str(), &st), 0) << cached;
  EXPECT_EQ(st.st_mode & 0777, 0444u) << "cached artifacts must be read-only";

  // The attack: another experiment's library in place of this one.
  ASSERT_EQ(chmod(cached.c_str(), 0644), 0);
  std::filesystem::copy_file(std::string(DET_TRIALS_DIR) + "/no_entry_trial.so", cached,
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_NE(Sha256File(cached).value(), sha);

  const int second = cluster.CreateExperiment(OneTrial("cache-2", 20, 0), "cache-2");
  ASSERT_GT(second, 0);
  EXPECT_TRUE(cluster.WaitForState(second, "STATE_COMPLETED", 120s)) << cluster.MasterLog() << cluster.AgentLogs();
  EXPECT_THAT(cluster.AgentLogs(), ::testing::HasSubstr("was tampered with"));
  EXPECT_EQ(Sha256File(cached).value(), sha);
  ASSERT_EQ(stat(cached.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  ExpectMasterHealthy(cluster);
}

// ---------------------------------------------------------------------------
// 6. Bounds
// ---------------------------------------------------------------------------

// (section 6 tests)

// A config whose searcher section is `searcher`, with `hparams` under
// hyperparameters and `extra` appended (no checkpoint_storage: the master's
// default root).
std::string BoundsConfig(const std::string& searcher, const std::string& hparams = "",
                         const std::string& extra = "") {
  return "name: bounds\nhyperparameters:\n  global_batch_size: 16\n" + hparams + "searcher:\n" + searcher +
         "  metric: validation_loss\n  max_length:\n    batches: 10\n" + extra;
}

// 473 bytes of nested aliases that expand to 9^9 strings (the issue's
// attack; also fuzz/corpus/experiment_config/alias_bomb.yaml).
std::string AliasBomb() {
  std::string s =
      "name: billion-lol\nhyperparameters:\n  global_batch_size: 32\n"
      "  a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  const std::string levels = "abcdefghi";
  for (size_t i = 1; i < levels.size(); ++i) {
    std::string refs;
    for (int k = 0; k < 9; ++k) refs += std::string(k == 0 ? "" : ",") + "*" + levels[i - 1];
    s += std::string("  ") + levels[i] + ": &" + levels[i] + " [" + refs + "]\n";
  }
  return s + "searcher: {name: single, metric: loss, max_length: 1}\n";
}

// Runs det-cli ARGS, expecting it to fail with INVALID_ARGUMENT and a message
// containing `what`.
void ExpectCliInvalid(TestCluster& cluster, const std::vector<std::string>& args, const std::string& what) {
  std::string out, err;
  int rc = cluster.Cli(args, &out, &err);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(err.find("INVALID_ARGUMENT"), std::string::npos) << err;
  EXPECT_NE(err.find(what), std::string::npos) << "expected '" << what << "' in: " << err;
}

// Creates `yaml` through det-cli, expecting INVALID_ARGUMENT naming `what`.
void ExpectCreateInvalid(TestCluster& cluster, const std::string& yaml, const std::string& name,
                         const std::string& what) {
  std::string path = cluster.dir() / (name + ".yaml");
  WriteFile(path, yaml);
  ExpectCliInvalid(cluster, {"experiment", "create", path, kTestSyntheticTrial, "--paused"}, what);
}

int ExperimentCount(TestCluster& cluster) {
  auto list = cluster.Get("/api/v1/experiments");
  return list.is_object() && list.contains("experiments") ? static_cast<int>(list["experiments"].size()) : -1;
}

TEST(SecurityBoundsTest, AliasBombIsRefusedQuicklyAndTheMasterStaysSmall) {
  TempDir dir;
  TestCluster cluster(dir);
  std::string bomb = AliasBomb();
  ASSERT_EQ(bomb.size(), 473u);
  std::string path = dir / "bomb.yaml";
  WriteFile(path, bomb);
  const std::string limit = "YAML expands to more than 100000 nodes (aliases included); the limit is 100000";

  // Each call is bounded by det-cli's deadline / the harness's 10 s REST read
  // timeout: before the limits one bomb kept a core busy for over 60 s.
  // Labelled latency (tests/latency_tests.cmake): the slowest refusal is
  // timed and printed; the 10 s bound is 5x or more its median.
  double slowest = 0;
  auto timed = [&](auto call) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    slowest = std::max(slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  timed([&] { ExpectCliInvalid(cluster, {"preview-search", path}, limit); });
  timed([&] { ExpectCreateInvalid(cluster, bomb, "bomb-create", limit); });
  // REST too (the generic route and the experiments route answer 400).
  int status = 0;
  nlohmann::json preview, created;
  timed([&] {
    preview = cluster.Send("POST", "/api/v1/PreviewSearch", nlohmann::json{{"config_yaml", bomb}}.dump(), &status);
  });
  EXPECT_EQ(status, 400) << preview.dump();
  EXPECT_NE(preview.dump().find("100000 nodes"), std::string::npos) << preview.dump();
  timed([&] {
    created = cluster.Send("POST", "/api/v1/experiments",
                           nlohmann::json{{"config_yaml", bomb}, {"trial_so", "f0VMRg=="}}.dump(), &status);
  });
  EXPECT_EQ(status, 400) << created.dump();
  std::printf("[ latency  ] slowest of 4 alias-bomb refusals (2 det-cli, 2 REST) took %.3f s (bound 10.0 s)\n",
              slowest);
  EXPECT_LT(slowest, 10.0);

  EXPECT_EQ(ExperimentCount(cluster), 0) << "nothing created";
  ExpectMasterHealthy(cluster);
}

TEST(SecurityBoundsTest, ConfigSizeAndDepthAreLimited) {
  TempDir dir;
  TestCluster cluster(dir);
  // 2 MiB of comment: over the 1 MiB config limit (under gRPC's 4 MiB).
  ExpectCreateInvalid(cluster, BoundsConfig("  name: single\n") + "#" + std::string(2 << 20, 'x') + "\n", "big",
                      "the limit is 1048576 bytes (1 MiB)");
  ExpectCreateInvalid(cluster, BoundsConfig("  name: single\n", "", "data: " + std::string(100, '[') +
                                                                       std::string(100, ']') + "\n"),
                      "deep", "YAML nests more than 32 levels deep (aliases included); the limit is 32");
  EXPECT_EQ(ExperimentCount(cluster), 0);
  ExpectMasterHealthy(cluster);
}

TEST(SecurityBoundsTest, SearchSizesAreCapped) {
  TempDir dir;
  TestCluster cluster(dir);
  // max_trials 10^9 in a random search: refused, not expanded.
  ExpectCreateInvalid(cluster, BoundsConfig("  name: random\n  max_trials: 1000000000\n"), "random",
                      "field 'searcher.max_trials' must be between 1 and 10000, got 1000000000");
  std::string path = dir / "random-preview.yaml";
  WriteFile(path, BoundsConfig("  name: random\n  max_trials: 1000000000\n"));
  ExpectCliInvalid(cluster, {"preview-search", path}, "must be between 1 and 10000");
  // A 10^6-point grid: six hyperparameters of 10 points.
  std::string axes;
  for (const char* k : {"a", "b", "c", "d", "e", "f"}) {
    axes += std::string("  ") + k + ": {type: int, minval: 1, maxval: 10, count: 10}\n";
  }
  ExpectCreateInvalid(cluster, BoundsConfig("  name: grid\n", axes), "grid",
                      "the grid of 'hyperparameters' has more than 10000 points (the limit)");
  path = dir / "grid-preview.yaml";
  WriteFile(path, BoundsConfig("  name: grid\n", axes));
  ExpectCliInvalid(cluster, {"preview-search", path}, "more than 10000 points");
  // 2^32 slots used to become a 0-slot allocation rescheduled for ever.
  ExpectCreateInvalid(cluster, BoundsConfig("  name: single\n", "", "resources:\n  slots_per_trial: 4294967296\n"),
                      "slots", "field 'resources.slots_per_trial' must be between 1 and 1024, got 4294967296");
  EXPECT_EQ(ExperimentCount(cluster), 0) << "nothing created";
  ExpectMasterHealthy(cluster);
}

// At the caps the master still answers at once: an adaptive_asha preview of
// 10,000 trials spun a core past det-cli's 30 s deadline (a scan of every
// trial per simulated event), and 10,000 pending trials cost a quarter of a
// core in every background pass (a scan per scheduling pick).
TEST(SecurityBoundsTest, SearchesAtTheCapsStayCheap) {
  TempDir dir;
  TestCluster cluster(dir);
  std::string hparams = "  lr: {type: double, minval: 0.001, maxval: 0.1}\n";
  std::string asha = BoundsConfig("  name: adaptive_asha\n  max_trials: 10000\n", hparams);
  asha = asha.substr(0, asha.find("    batches: 10\n")) + "    batches: 100000\n";
  std::string path = dir / "asha.yaml";
  WriteFile(path, asha);
  std::string out, err;
  // Within det-cli's deadline (it was DEADLINE_EXCEEDED when ASHA was
  // quadratic in the number of trials).
  EXPECT_EQ(cluster.Cli({"preview-search", path}, &out, &err), 0) << err;
  EXPECT_NE(out.find("Total: 10000 trials"), std::string::npos) << out;

  // 10,000 trials waiting for slots that never come (no agent).
  int id = cluster.CreateExperiment(BoundsConfig("  name: random\n  max_trials: 10000\n", hparams), "random");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        auto e = cluster.Get(absl::StrCat("/api/v1/experiments/", id));
        return e.is_object() && e.contains("experiment") && e["experiment"].value("num_trials", 0) == 10000;
      },
      60s));
  ExpectMasterHealthy(cluster);
}

TEST(SecurityBoundsTest, SlotsPerTrialBeyondThePoolIsInvalidArgument) {
  TempDir dir;
  TestCluster cluster(dir);
  std::string three = BoundsConfig("  name: single\n", "", "resources:\n  slots_per_trial: 3\n");
  // No agent known yet: accepted (only the config's cap applies).
  std::string path = dir / "before-agents.yaml";
  WriteFile(path, three);
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"experiment", "create", path, kTestSyntheticTrial, "--paused"}, &out, &err), 0) << err;

  cluster.StartAgent("only", AgentOptions().set_slots(2));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s));
  ExpectCreateInvalid(cluster, three, "three",
                      "field 'resources.slots_per_trial' is 3, more than resource pool 'default' can offer "
                      "(its agents have 2 slot(s) in all)");
  // Another pool, of no known agent: accepted.
  std::string other = BoundsConfig("  name: single\n", "",
                                   "resources:\n  slots_per_trial: 3\n  resource_pool: elsewhere\n");
  path = dir / "other.yaml";
  WriteFile(path, other);
  EXPECT_EQ(cluster.Cli({"experiment", "create", path, kTestSyntheticTrial, "--paused"}, &out, &err), 0) << err;
  EXPECT_EQ(ExperimentCount(cluster), 2) << "only the two accepted ones";
  ExpectMasterHealthy(cluster);
}

// Ids are int64 end to end: experiment 2^32 + 1 is not experiment 1 (today's
// attack patched experiment 1 through a truncated id), on every transport.
TEST(SecurityTest, IdsAreInt64AndNeverTruncated) {
  TempDir dir;
  TestCluster cluster(dir);
  const int64_t exp = cluster.CreateExperiment(SlowTrialConfig(dir / "checkpoints"), "ids");
  ASSERT_EQ(exp, 1);
  int status = 0;
  nlohmann::json r = cluster.Send("PATCH", "/api/v1/experiments/4294967297", R"({"name": "pwned"})", &status);
  EXPECT_EQ(status, 404) << r.dump();
  r = cluster.Send("POST", "/api/v1/PatchExperiment", R"({"experiment_id": 4294967297, "name": "pwned"})", &status);
  EXPECT_EQ(status, 404) << r.dump();
  r = cluster.Send("PATCH", "/api/v1/experiments/18446744073709551617", R"({"name": "pwned"})", &status);
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_NE(r.dump().find("experiment_id"), std::string::npos) << r.dump();
  auto channel = grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials());
  det::api::v1::PatchExperimentRequest patch;
  patch.set_experiment_id(4294967297);
  patch.set_name("pwned");
  EXPECT_EQ(CallApi(channel, "PatchExperiment", patch, cluster.Token()).error_code(), grpc::StatusCode::NOT_FOUND);
  // A trial id past 2^31 in a log read is NOT_FOUND too, not trial 1's logs.
  cluster.Get("/api/v1/trials/4294967297/logs", &status);
  EXPECT_EQ(status, 404);
  EXPECT_EQ(cluster.Get("/api/v1/experiments/1")["experiment"]["name"], "owned");  // unchanged
  ExpectMasterHealthy(cluster);
}

// Logs and long-polls

// Every line of trial `trial_id` through the paged REST read (GET
// .../logs?after_id=N, at most 1000 lines a page, `more` and next_after_id
// saying where to go on); *pages counts the pages.
std::vector<nlohmann::json> AllLogLines(TestCluster& cluster, int64_t trial_id, int* pages = nullptr) {
  std::vector<nlohmann::json> lines;
  int64_t after = 0;
  for (int page = 0; page < 1000; ++page) {
    nlohmann::json r = cluster.Get(absl::StrCat("/api/v1/trials/", trial_id, "/logs?after_id=", after));
    const nlohmann::json logs = r.value("logs", nlohmann::json::array());
    EXPECT_LE(logs.size(), 1000u);
    for (const auto& l : logs) lines.push_back(l);
    if (pages != nullptr) *pages = page + 1;
    if (!r.value("more", false)) break;
    EXPECT_EQ(r.value("next_after_id", int64_t{0}), logs.back().value("id", int64_t{-1}));
    after = r.value("next_after_id", int64_t{0});
  }
  return lines;
}

int64_t LogBytes(const std::vector<nlohmann::json>& lines) {
  int64_t n = 0;
  for (const auto& l : lines) n += static_cast<int64_t>(l.value("message", "").size());
  return n;
}

// Checks what a 1 MiB-per-trial master stored: within the volume (each line
// counted as its bytes + 64), one marker line, the oldest, and ids in order.
void ExpectBoundedLog(const std::vector<nlohmann::json>& lines) {
  EXPECT_LE(LogBytes(lines) + 64 * static_cast<int64_t>(lines.size()), 1 << 20);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines[0].value("message", ""), ::testing::HasSubstr("earlier lines dropped (log limit of 1048576 bytes"));
  int markers = 0;
  for (const auto& l : lines) {
    markers += l.value("message", "").find("earlier lines dropped") != std::string::npos;
    EXPECT_LE(l.value("message", "").size(), (64u << 10) + 64);
  }
  EXPECT_EQ(markers, 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_LT(lines[i - 1].value("id", int64_t{0}), lines[i].value("id", int64_t{0}));
  }
}

// Attack: a trial's output (through its agent: a 512 KiB line and 4 MB of
// lines), then its code (through ReportTrialLogs: a 1 MiB line, 20001 lines
// in one message, 4 MB more) flood a master that keeps 1 MiB per trial.
// Stored: lines cut to 64 KiB with a marker, the oldest lines dropped behind
// one marker line, the oversized message INVALID_ARGUMENT; the REST read is
// paged and det-cli still reads everything.
TEST(SecurityTest, TrialLogFloodIsStoredBoundedAndReadInPages) {
  TempDir dir;
  FakeTrialCluster cluster(dir, 1, TestClusterOptions().add_master_flags({"--max-trial-log-mib", "1"}));
  ASSERT_GT(cluster.CreateFake("flood", dir / "checkpoints",
                               "environment:\n  environment_variables:\n    - FAKE_TRIAL_FLOOD=1\n"),
            0);
  auto trials = FakeTrials(dir, 1);
  ASSERT_EQ(trials.size(), 1u) << cluster.AgentLogs();
  const FakeTrial& t = trials[0];
  // The agent's part: everything it forwards has arrived once its last line has.
  auto has_line = [&](const std::string& prefix) {
    for (const auto& l : AllLogLines(cluster, t.trial_id)) {
      if (l.value("message", "").rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  ASSERT_TRUE(PollUntil([&] { return has_line("agent flood line 59999 "); }, 120s)) << cluster.AgentLogs();
  ExpectBoundedLog(AllLogLines(cluster, t.trial_id));

  // The trial code's part.
  trialv1::ReportTrialLogsRequest big;
  big.add_logs()->set_message(std::string(1 << 20, 'b'));
  EXPECT_TRUE(cluster.Call(&trialv1::TrialService::Stub::ReportTrialLogs, t, big).ok());
  EXPECT_TRUE(has_line(std::string(64 << 10, 'b') + " ... [line truncated: 1048576 bytes]"));
  trialv1::ReportTrialLogsRequest many;
  for (int i = 0; i < 20001; ++i) many.add_logs()->set_message("x");
  grpc::Status st = cluster.Call(&trialv1::TrialService::Stub::ReportTrialLogs, t, many);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("logs"));
  for (int m = 0; m < 40; ++m) {
    trialv1::ReportTrialLogsRequest req;
    for (int i = 0; i < 1000; ++i) req.add_logs()->set_message(absl::StrCat("rpc flood ", m * 1000 + i, " ", std::string(80, 'r')));
    ASSERT_TRUE(cluster.Call(&trialv1::TrialService::Stub::ReportTrialLogs, t, req).ok());
  }
  int pages = 0;
  auto lines = AllLogLines(cluster, t.trial_id, &pages);
  EXPECT_GT(pages, 1);
  ExpectBoundedLog(lines);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().value("message", ""), "rpc flood 39999 " + std::string(80, 'r'));
  // A client limit above the page size is capped; a small one is honoured.
  nlohmann::json page = cluster.Get(absl::StrCat("/api/v1/trials/", t.trial_id, "/logs?limit=100000"));
  EXPECT_EQ(page["logs"].size(), 1000u);
  EXPECT_TRUE(page.value("more", false));
  page = cluster.Get(absl::StrCat("/api/v1/trials/", t.trial_id, "/logs?limit=5"));
  EXPECT_EQ(page["logs"].size(), 5u);
  // det-cli (a gRPC stream) still reads every line, past any page.
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"trial", "logs", std::to_string(t.trial_id)}, &out, &err), 0) << err;
  EXPECT_THAT(out, ::testing::HasSubstr("earlier lines dropped"));
  EXPECT_THAT(out, ::testing::HasSubstr("rpc flood 39999 "));
  ExpectMasterHealthy(cluster);
}

// Attack: one trial opens 600 ShouldPreempt long-polls of 60 s at once (more
// than the master's 512 long-poll threads). Only its ranks + 1 wait; the rest
// are answered at once, and another trial's ShouldPreempt is answered without
// delay.
TEST(SecurityTest, OneAllocationsLongPollsDoNotStarveAnother) {
  TempDir dir;
  FakeTrialCluster cluster(dir, 2);
  ASSERT_GT(cluster.CreateFake("attacker", dir / "checkpoints"), 0);
  ASSERT_GT(cluster.CreateFake("victim", dir / "checkpoints"), 0);
  auto trials = FakeTrials(dir, 2);
  ASSERT_EQ(trials.size(), 2u) << cluster.AgentLogs();
  const FakeTrial& attacker = trials[0];
  const FakeTrial& victim = trials[1];

  constexpr int kPolls = 600;
  struct Poll {
    grpc::ClientContext ctx;
    trialv1::ShouldPreemptRequest req;
    trialv1::ShouldPreemptResponse resp;
  };
  std::vector<std::unique_ptr<Poll>> polls;
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0, finished_ok = 0;
  // Labelled latency (tests/latency_tests.cmake): both bounds below are 5x
  // or more the medians measured, printed here.
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const auto polls_sent = std::chrono::steady_clock::now();
  for (int i = 0; i < kPolls; ++i) {
    auto p = std::make_unique<Poll>();
    p->ctx.AddMetadata("x-det-allocation-token", attacker.token);
    p->ctx.set_deadline(std::chrono::system_clock::now() + 90s);
    p->req.set_allocation_id(attacker.allocation_id);
    p->req.set_timeout_ms(60000);
    cluster.stub()->async()->ShouldPreempt(&p->ctx, &p->req, &p->resp, [&](grpc::Status s) {
      std::lock_guard<std::mutex> l(mu);
      ++finished;
      finished_ok += s.ok();
      cv.notify_all();
    });
    polls.push_back(std::move(p));
  }
  // All but ranks + 1 = 2 come back at once, with the current state.
  {
    std::unique_lock<std::mutex> l(mu);
    EXPECT_TRUE(cv.wait_for(l, 20s, [&] { return finished >= kPolls - 2; })) << finished << " of " << kPolls;
    std::printf("[ latency  ] %d of %d long-polls of one allocation answered in %.3f s (bound 20.0 s)\n", finished,
                kPolls, seconds_since(polls_sent));
    EXPECT_EQ(finished_ok, finished);
  }
  // The victim's call has a 5 s deadline (without the per-allocation bound
  // it waited about 30 s behind the attacker's long-polls: DEADLINE_EXCEEDED).
  trialv1::ShouldPreemptRequest quick;
  quick.set_timeout_ms(0);
  trialv1::ShouldPreemptResponse resp;
  const auto victim_sent = std::chrono::steady_clock::now();
  grpc::Status st = cluster.Call(&trialv1::TrialService::Stub::ShouldPreempt, victim, quick, &resp, 5s);
  std::printf("[ latency  ] the victim's ShouldPreempt answered in %.3f s (bound 5.0 s)\n", seconds_since(victim_sent));
  EXPECT_TRUE(st.ok()) << st.error_message() << " (the victim's ShouldPreempt waited behind the attacker's)";
  EXPECT_FALSE(resp.preempt());
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_LE(kPolls - finished, 2) << "more than ranks + 1 long-polls of one allocation waited";
  }
  for (auto& p : polls) p->ctx.TryCancel();
  {
    std::unique_lock<std::mutex> l(mu);
    EXPECT_TRUE(cv.wait_for(l, 30s, [&] { return finished == kPolls; }));
  }
  ExpectMasterHealthy(cluster);
}

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
  // A trial that keeps running (and reporting) until it is killed.
  const int64_t id = cluster.CreateExperiment(SlowTrialConfig(dir / "checkpoints"), "hashed");
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
  // quota, --grpc-memory-mib, 128, and freed when refused): nine 64 MiB calls
  // (576 MiB) must not add up. Freed buffers may stay resident in the
  // allocator's per-thread arenas, so the growth measured on two loaded
  // cores ranged 113-193 MiB over repeated runs (a bound of 192 failed one run
  // in six); half of what the calls would add up to is the bound.
  EXPECT_LT(rss_after - rss_before, 288) << rss_before << " -> " << rss_after << " MiB";
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

// The config fuzzer, run on the alias bomb with the RSS and malloc limits
// fuzz/run_fuzzer.sh uses: it must pass quickly (before the YAML limits it
// was an out-of-memory finding).
TEST(SecurityFuzzersTest, ConfigFuzzerPassesTheAliasBombWithinItsLimits) {
  // The fuzz-only clang build lives beside bin/ (fuzz/CMakeLists.txt).
  std::string fuzzer = std::string(DET_BIN_DIR) + "/../fuzz/bin/experiment_config_fuzzer";
  if (access(fuzzer.c_str(), X_OK) != 0) {
    GTEST_SKIP() << fuzzer << " was not built (the fuzzers need clang++ with libFuzzer; see CONTRIBUTING.md, 'Fuzzing')";
  }
  std::string bomb = std::string(DET_SOURCE_DIR) + "/fuzz/corpus/experiment_config/alias_bomb.yaml";
  ASSERT_EQ(access(bomb.c_str(), R_OK), 0) << bomb;
  TempDir dir;
  std::string log = dir / "fuzzer.log";
  std::string cmd = absl::StrCat(fuzzer, " -rss_limit_mb=512 -malloc_limit_mb=512 -timeout=10 ", bomb, " > ", log,
                                 " 2>&1");
  int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << output;
}

// A master listening on every interface with no --advertise-address would
// hand trials "0.0.0.0:PORT" to dial from other nodes: it refuses to start,
// naming the key. With the address given as a bare host, trials dial it
// with the bound gRPC port appended, and a trial completes.
TEST(SecurityTest, WildcardMasterNeedsAnAdvertiseAddress) {
  TempDir dir;
  Subprocess refused({std::string(kTestBinDir) + "/det-master", "--data-dir", dir / "refused", "--host", "0.0.0.0",
                      "--grpc-port", "0", "--http-port", "0", "--allow-empty-passwords", "--ports-file",
                      dir / "refused-ports.json"},
                     dir / "refused.out", dir / "refused.err");
  const int code = refused.Wait(30s);
  EXPECT_EQ(code, 2) << refused.Stderr();
  EXPECT_THAT(refused.Stderr(), ::testing::HasSubstr("advertise-address"));
  EXPECT_TRUE(ReadFile(dir / "refused-ports.json").empty()) << "it served";

  TempDir cluster_dir;
  TestCluster cluster(cluster_dir, TestClusterOptions().add_master_flags(
                                       {"--host", "0.0.0.0", "--advertise-address", "127.0.0.1",
                                        "--allow-empty-passwords"}));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  cluster.StartAgent("a");
  const int exp = cluster.CreateExperiment(OneTrial("advertised", 20, 0), "advertised");
  ASSERT_GT(exp, 0);
  EXPECT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 120s)) << cluster.MasterLog() << cluster.AgentLogs();
}

}  // namespace
}  // namespace det::testing
