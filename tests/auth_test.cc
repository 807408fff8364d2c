// End-to-end tests of authentication (issue 7, must show 2): a real master
// (with a cluster secret) and agent. Every RPC of every gRPC service, taken
// from the protobuf descriptors so that a new RPC can never be forgotten, and
// every REST route, taken from the master's own route table
// (GET /api/v1/routes: the declared routes and the generic
// POST /api/v1/<RpcName> ones), is called without credentials, with bad ones
// and with another trial's allocation token.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/generated_message_reflection.h>
#include <google/protobuf/message.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "det/agent/v1/agent.grpc.pb.h"
#include "det/api/v1/api.grpc.pb.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "master/store/store.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
namespace pb = google::protobuf;

const std::string kBin = DET_BIN_DIR;
const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";
constexpr char kSecret[] = "sweep-secret-0123456789";

// Two trials that keep training (slowly) until the test ends.
std::string SlowSearch(const std::string& checkpoint_dir) {
  return absl::StrCat(R"(name: auth-sweep
hyperparameters:
  global_batch_size: 16
  learning_rate:
    type: log
    minval: -3
    maxval: -1
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: 200
searcher:
  name: random
  metric: validation_loss
  smaller_is_better: true
  max_trials: 2
  max_concurrent_trials: 2
  max_length:
    batches: 100000
min_validation_period:
  batches: 1000
scheduling_unit: 10
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoint_dir, R"(
reproducibility:
  experiment_seed: 3
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
)");
}

using Metadata = std::vector<std::pair<std::string, std::string>>;

// Calls `method` ("/pkg.Service/Method") with one serialized request
// message, whatever its streaming kind (unary, client, server or bidi
// streaming all look the same on the wire), and returns the final status.
grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& request, const Metadata& metadata) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
  grpc::CompletionQueue cq;
  void* tag = nullptr;
  bool ok = false;
  auto call = stub.PrepareCall(&ctx, method, &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice slice(request);
  grpc::ByteBuffer buffer(&slice, 1);
  call->Write(buffer, reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  call->WritesDone(reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer response;
  for (int reads = 0; reads < 1000; ++reads) {
    call->Read(&response, reinterpret_cast<void*>(4));
    cq.Next(&tag, &ok);
    if (!ok) break;
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  return status;
}

// Every method of every service in our API protos.
struct Rpc {
  const pb::MethodDescriptor* method;
  std::string path;  // "/det.api.v1.Determined/GetMaster"
};
std::vector<Rpc> AllRpcs() {
  std::vector<Rpc> out;
  // Builds the files' descriptors in the generated pool (api.proto defines
  // only the service, so nothing else would pull it into the binary).
  for (const pb::internal::DescriptorTable* table :
       {&descriptor_table_det_2fapi_2fv1_2fapi_2eproto, &descriptor_table_det_2fagent_2fv1_2fagent_2eproto,
        &descriptor_table_det_2ftrial_2fv1_2ftrial_2eproto}) {
    pb::internal::AssignDescriptors(table);
  }
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  for (const char* name : {det::api::v1::Determined::service_full_name(),
                                  det::agent::v1::AgentService::service_full_name(),
                                  det::trial::v1::TrialService::service_full_name()}) {
    const pb::ServiceDescriptor* found = pool->FindServiceByName(name);
    EXPECT_NE(found, nullptr) << name;
    if (found == nullptr) continue;
    const pb::FileDescriptor* file = found->file();
    for (int s = 0; s < file->service_count(); ++s) {
      const pb::ServiceDescriptor* service = file->service(s);
      for (int m = 0; m < service->method_count(); ++m) {
        out.push_back({service->method(m), absl::StrCat("/", service->full_name(), "/", service->method(m)->name())});
      }
    }
  }
  // A file may define several services: each counted once.
  std::sort(out.begin(), out.end(), [](const Rpc& a, const Rpc& b) { return a.path < b.path; });
  out.erase(std::unique(out.begin(), out.end(), [](const Rpc& a, const Rpc& b) { return a.path == b.path; }),
            out.end());
  return out;
}

// A default request of `method`'s input type with `allocation_id` set when it
// has that field.
// An empty request of `method`, naming the allocation (its allocation_id) or,
// for a call that names its trial instead (GetCheckpointStorageCredentials),
// the allocation's trial (trial_id).
std::string Request(const pb::MethodDescriptor* method, const std::string& allocation_id = "", int64_t trial_id = 0) {
  std::unique_ptr<pb::Message> m(pb::MessageFactory::generated_factory()->GetPrototype(method->input_type())->New());
  if (!allocation_id.empty()) {
    const pb::FieldDescriptor* f = method->input_type()->FindFieldByName("allocation_id");
    if (f != nullptr) m->GetReflection()->SetString(m.get(), f, allocation_id);
  }
  const pb::FieldDescriptor* t = method->input_type()->FindFieldByName("trial_id");
  if (trial_id != 0 && t != nullptr && t->type() == pb::FieldDescriptor::TYPE_INT64) {
    m->GetReflection()->SetInt64(m.get(), t, trial_id);
  }
  return m->SerializeAsString();
}

// A master with the cluster secret dir/secret, reached by REST (30 s read
// timeouts) and by a gRPC channel without credentials.
class AuthCluster : public TestCluster {
 public:
  explicit AuthCluster(const TempDir& dir)
      : TestCluster(dir, Options(dir)),
        channel_(grpc::CreateChannel(grpc_address(), grpc::InsecureChannelCredentials())) {}
  // A `slots`-slot agent that reads its secret from `secret_file`.
  Subprocess& StartAgent(const std::string& id, int slots, const std::string& secret_file) {
    return TestCluster::StartAgent(
        id, AgentOptions().set_slots(slots).add_flags({"--cluster-secret-file", secret_file}));
  }
  json GetJson(const std::string& path, const std::string& token) {
    auto res = Http("GET", path, {{"Authorization", "Bearer " + token}});
    if (!res) return nullptr;
    return json::parse(res->body, nullptr, false);
  }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  std::string db() const { return db_path(); }

 private:
  // Writes the secret before the master starts.
  static TestClusterOptions Options(const TempDir& dir) {
    WriteFile(dir / "secret", std::string(kSecret) + "\n");
    return TestClusterOptions()
        .add_master_flags({"--cluster-secret-file", dir / "secret"})
        .set_http_read_timeout(std::chrono::seconds(30));
  }

  std::shared_ptr<grpc::Channel> channel_;
};

// The concrete path of a route pattern: "{checkpoint_uuid}" -> a uuid, any
// other "{field}" -> "1".
std::string ExamplePath(std::string pattern) {
  pattern = std::regex_replace(pattern, std::regex(R"(\{checkpoint_uuid\})"), "5f0e6a9c-1d2b-4c3d-8e4f-000000000001");
  return std::regex_replace(pattern, std::regex(R"(\{[a-z_]+\})"), "1");
}

// A det-trial wrapper (the agent's --det-trial): it saves the clear
// allocation token, which det-agent passes on fd DET_ALLOCATION_TOKEN_FD and
// never in the environment (issue 46), to DIR/tokens/<allocation id>, then
// runs the real det-trial with it.
std::string TokenSavingDetTrial(const TempDir& dir) {
  std::filesystem::create_directories(dir / "tokens");
  const std::string script = dir / "token-det-trial.sh";
  WriteFile(script, absl::StrCat("#!/bin/sh\ntok=$(cat <&\"$DET_ALLOCATION_TOKEN_FD\")\nT='", dir / "tokens",
                                 "'\nprintf '%s' \"$tok\" > \"$T/.$DET_ALLOCATION_ID\" && mv \"$T/.$DET_ALLOCATION_ID\" "
                                 "\"$T/$DET_ALLOCATION_ID\"\nunset DET_ALLOCATION_TOKEN_FD\nDET_ALLOCATION_TOKEN=\"$tok\" "
                                 "exec '", kBin, "/det-trial' \"$@\"\n"));
  chmod(script.c_str(), 0755);
  return script;
}

// The clear allocation token of `allocation_id` TokenSavingDetTrial saved
// under `dir`; "" if none yet.
std::string AllocationTokenOf(const TempDir& dir, const std::string& allocation_id) {
  std::error_code ec;
  const std::string path = dir / ("tokens/" + allocation_id);
  if (!std::filesystem::exists(path, ec)) return "";
  return ReadFile(path);
}

// Must show 2: without a token, or with another trial's token, every API
// returns UNAUTHENTICATED / PERMISSION_DENIED.
TEST(AuthTest, EveryRpcAndRouteNeedsCredentials) {
  TempDir dir;
  AuthCluster cluster(dir);
  const std::string token = RestLogin(cluster.http_port());
  ASSERT_FALSE(token.empty()) << "login as determined failed";
  const std::string admin = RestLogin(cluster.http_port(), "admin");
  ASSERT_FALSE(admin.empty()) << "login as admin failed";

  // Two trials running, so that two allocation tokens exist.
  cluster.TestCluster::StartAgent("a", AgentOptions().set_slots(2).add_flags(
                                          {"--cluster-secret-file", dir / "secret", "--det-trial", TokenSavingDetTrial(dir)}));
  WriteFile(dir / "slow.yaml", SlowSearch(dir / "checkpoints"));
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"experiment", "create", dir / "slow.yaml", kSynthetic}, &out, &err), 0) << out << err;
  std::vector<master::AllocationRow> allocs;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto store = master::Store::Open(cluster.db());
        if (!store.ok()) return false;
        auto rows = (*store)->ListAllocations();
        if (!rows.ok() || rows->size() < 2) return false;
        allocs = *rows;
        return allocs[0].trial_id != allocs[1].trial_id;
      },
      std::chrono::seconds(60)))
      << "two trials never got allocations";
  // The database holds only the tokens' hashes: take the clear ones the
  // det-trial wrapper saved.
  master::AllocationRow a = allocs[0];
  master::AllocationRow b = allocs[1];
  ASSERT_TRUE(PollUntil(
      [&] {
        a.token = AllocationTokenOf(dir, a.id);
        b.token = AllocationTokenOf(dir, b.id);
        return !a.token.empty() && !b.token.empty();
      },
      std::chrono::seconds(60)))
      << "no token saved by the det-trial wrapper";

  // Sanity: a trial's own token works, so the denials below are the token's.
  const auto rpcs = AllRpcs();
  const Rpc* report_progress = nullptr;
  for (const auto& r : rpcs) {
    if (r.path == "/det.trial.v1.TrialService/ReportProgress") report_progress = &r;
  }
  ASSERT_NE(report_progress, nullptr);
  grpc::Status own = CallRaw(cluster.channel(), report_progress->path, Request(report_progress->method, a.id),
                             {{"x-det-allocation-token", a.token}});
  EXPECT_TRUE(own.ok()) << own.error_message();

  std::map<std::string, int> per_service;
  for (const Rpc& rpc : rpcs) {
    const std::string service = rpc.method->service()->full_name();
    const std::string name = rpc.method->name();
    ++per_service[service];
    SCOPED_TRACE(rpc.path);
    const std::string plain = Request(rpc.method);
    grpc::Status none = CallRaw(cluster.channel(), rpc.path, plain, {});
    if (service == "det.api.v1.Determined" && name == "GetMaster") {
      EXPECT_TRUE(none.ok()) << none.error_message();  // documented exception
    } else {
      // Login's empty username is also UNAUTHENTICATED ("invalid credentials").
      EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED) << none.error_message();
    }
    if (service == "det.api.v1.Determined") {
      if (name == "GetMaster" || name == "Login") continue;
      for (const std::string& bad : {std::string("not-a-token"), a.token, std::string(kSecret)}) {
        grpc::Status st = CallRaw(cluster.channel(), rpc.path, plain, {{"authorization", "Bearer " + bad}});
        EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << bad << ": " << st.error_message();
      }
      // A valid (admin) token passes authentication, whatever the call's
      // own answer to an empty request is. Logout revokes its token.
      const std::string good_token = name == "Logout" ? RestLogin(cluster.http_port(), "admin") : admin;
      grpc::Status good = CallRaw(cluster.channel(), rpc.path, plain, {{"authorization", "Bearer " + good_token}});
      EXPECT_NE(good.error_code(), grpc::StatusCode::UNAUTHENTICATED) << good.error_message();
      EXPECT_NE(good.error_code(), grpc::StatusCode::PERMISSION_DENIED) << good.error_message();
    } else if (service == "det.agent.v1.AgentService") {
      for (const Metadata& md : {Metadata{{"x-det-cluster-secret", "wrong"}},
                                 Metadata{{"authorization", "Bearer " + token}},
                                 Metadata{{"x-det-allocation-token", a.token}}}) {
        grpc::Status st = CallRaw(cluster.channel(), rpc.path, plain, md);
        EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << md[0].first << ": " << st.error_message();
      }
    } else if (service == "det.trial.v1.TrialService") {
      // Every call names its allocation, or its trial (whose allocation's token it needs).
      ASSERT_TRUE(rpc.method->input_type()->FindFieldByName("allocation_id") != nullptr ||
                  rpc.method->input_type()->FindFieldByName("trial_id") != nullptr);
      // Trial b's token on trial a's allocation.
      grpc::Status other = CallRaw(cluster.channel(), rpc.path, Request(rpc.method, a.id, a.trial_id),
                                   {{"x-det-allocation-token", b.token}});
      EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED) << other.error_message();
      // A user token is no allocation token.
      grpc::Status user = CallRaw(cluster.channel(), rpc.path, Request(rpc.method, a.id, a.trial_id),
                                  {{"authorization", "Bearer " + token}});
      EXPECT_EQ(user.error_code(), grpc::StatusCode::UNAUTHENTICATED) << user.error_message();
    } else {
      ADD_FAILURE() << "a service the test does not know: " << service;
    }
  }
  EXPECT_GE(per_service["det.api.v1.Determined"], 40);
  EXPECT_EQ(per_service["det.agent.v1.AgentService"], 3);
  EXPECT_GE(per_service["det.trial.v1.TrialService"], 11);

  // REST: the master's route table, the declared routes and the generic
  // POST /api/v1/<RpcName> of every RPC but the client-streaming ones.
  json routes = cluster.GetJson("/api/v1/routes", token);
  ASSERT_TRUE(routes.contains("routes")) << routes.dump();
  ASSERT_GE(routes["routes"].size(), 80u) << routes.dump();
  int checked = 0;
  int generic = 0;
  for (const auto& route : routes["routes"]) {
    const std::string method = route["method"];
    const std::string path = ExamplePath(route["pattern"]);
    const std::string rpc = route.value("rpc", "");
    const bool is_generic = route.value("generic", false);
    SCOPED_TRACE(method + " " + path + " (" + route["pattern"].get<std::string>() + ")");
    if (is_generic) {
      ++generic;
      EXPECT_EQ(method, "POST");
      EXPECT_EQ(path, "/api/v1/" + rpc);
    }
    if (!route["authenticated"].get<bool>()) {
      EXPECT_TRUE((method == "GET" && path == "/api/v1/master") || (method == "POST" && path == "/api/v1/auth/login") ||
                  (method == "GET" && path == "/api/v1/health") ||
                  (method == "POST" && path == "/api/v1/GetMaster") || (method == "POST" && path == "/api/v1/Login"))
          << "undocumented public route";
      continue;
    }
    for (const httplib::Headers& h :
         {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer not-a-token"}},
          httplib::Headers{{"Authorization", "Bearer " + a.token}}, httplib::Headers{{"Cookie", "det_token=nope"}},
          httplib::Headers{{"x-det-allocation-token", a.token}}}) {
      auto res = cluster.Http(method, path, h);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 401) << res->body;
      EXPECT_THAT(res->body, HasSubstr("UNAUTHENTICATED"));
    }
    // The token works as a header and as the dashboard's cookie (reads
    // only: GET routes and the generic Get* RPCs, with {}; no side effects
    // on the cluster).
    // Admin-only reads (master logs, agents) refuse the plain user with 403
    // and take an admin's token.
    const bool read_only = method == "GET" || (is_generic && rpc.rfind("Get", 0) == 0);
    const bool admin_only = route.value("admin_only", false);
    if (read_only && admin_only) {
      auto res = cluster.Http(method, path, {{"Authorization", "Bearer " + token}});
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 403) << res->body;
    }
    const std::string& reader = admin_only ? admin : token;
    // A cookie-only POST (the generic Get* reads) must name the master's own
    // origin, as the dashboard's page would (master/http/csrf.h).
    const std::string origin = absl::StrCat("http://127.0.0.1:", cluster.http_port());
    for (const httplib::Headers& h : {httplib::Headers{{"Authorization", "Bearer " + reader}},
                                      httplib::Headers{{"Cookie", "theme=dark; det_token=" + reader}, {"Origin", origin}}}) {
      if (!read_only) break;
      auto res = cluster.Http(method, path, h);
      ASSERT_TRUE(res);
      EXPECT_NE(res->status, 401) << res->body;
      EXPECT_NE(res->status, 403) << res->body;
    }
    ++checked;
  }
  EXPECT_GE(checked, 75);
  // One generic route per Determined RPC that is not client-streaming.
  int client_streaming = 0;
  for (const Rpc& rpc : rpcs) {
    if (rpc.method->service()->full_name() == "det.api.v1.Determined" && rpc.method->client_streaming()) {
      ++client_streaming;
    }
  }
  EXPECT_EQ(generic, per_service["det.api.v1.Determined"] - client_streaming);
  std::printf("[ swept    ] %zu RPCs (%d Determined, %d AgentService, %d TrialService), %d authenticated REST "
              "routes (%d generic routes)\n",
              rpcs.size(), per_service["det.api.v1.Determined"], per_service["det.agent.v1.AgentService"],
              per_service["det.trial.v1.TrialService"], checked, generic);
  // Paths with no route are not an oracle either.
  auto unknown = cluster.Http("GET", "/api/v1/no-such-route", {});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 401);
  // Public: the master's version and login.
  auto master = cluster.Http("GET", "/api/v1/master", {});
  ASSERT_TRUE(master);
  EXPECT_EQ(master->status, 200);
  EXPECT_TRUE(json::parse(master->body)["auth_required"].get<bool>());
  auto login = cluster.Http("POST", "/api/v1/auth/login", {}, R"({"username": "determined", "password": "x"})");
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 401);
  auto generic_master = cluster.Http("POST", "/api/v1/GetMaster", {});
  ASSERT_TRUE(generic_master);
  EXPECT_EQ(generic_master->status, 200);
  EXPECT_EQ(json::parse(generic_master->body)["cluster_id"], json::parse(master->body)["cluster_id"]);
  auto generic_login = cluster.Http("POST", "/api/v1/Login", {}, R"({"username": "determined", "password": "x"})");
  ASSERT_TRUE(generic_login);
  EXPECT_EQ(generic_login->status, 401);
  // An RPC the service does not have is no oracle either.
  auto no_rpc = cluster.Http("POST", "/api/v1/NoSuchRpc", {});
  ASSERT_TRUE(no_rpc);
  EXPECT_EQ(no_rpc->status, 401);
  // The dashboard's page itself needs no token.
  auto page = cluster.Http("GET", "/", {});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
}

// Users: det-cli logs in as `determined` by itself; admins create users;
// wrong passwords, other users and revoked tokens are refused.
TEST(AuthTest, CliLoginAndUsers) {
  TempDir dir;
  AuthCluster cluster(dir);
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"user", "whoami"}, &out, &err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("'determined'"));
  EXPECT_THAT(ReadFile(dir / "det-auth.json"), HasSubstr("\"token\""));

  // determined is no admin.
  EXPECT_EQ(cluster.Cli({"user", "create", "alice", "--password-stdin"}, &out, &err, "s3cret\n"), 1) << out;
  EXPECT_THAT(err, HasSubstr("PERMISSION_DENIED"));

  ASSERT_EQ(cluster.Cli({"user", "login", "admin", "--password-stdin"}, &out, &err, "\n"), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("Logged in as user 'admin'"));
  ASSERT_EQ(cluster.Cli({"user", "create", "alice", "--password-stdin"}, &out, &err, "s3cret\n"), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("Created user 'alice'"));
  EXPECT_EQ(cluster.Cli({"user", "create", "alice"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("ALREADY_EXISTS"));

  EXPECT_EQ(cluster.Cli({"user", "login", "alice", "--password-stdin"}, &out, &err, "wrong\n"), 1);
  EXPECT_THAT(err, HasSubstr("UNAUTHENTICATED"));
  // It says where the first password is written (issue 45).
  EXPECT_THAT(err, HasSubstr("det-cluster/master/initial-admin-password (deploy/cluster.sh)")) << err;
  EXPECT_THAT(err, HasSubstr("/etc/det/initial-admin-password (deploy/install.sh)")) << err;
  ASSERT_EQ(cluster.Cli({"user", "login", "alice", "--password-stdin"}, &out, &err, "s3cret\n"), 0) << err;
  ASSERT_EQ(cluster.Cli({"user", "whoami"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("'alice'"));
  // Changing one's own password needs the current one (first stdin line).
  EXPECT_EQ(cluster.Cli({"user", "change-password", "--password-stdin"}, &out, &err, "wrong\nn3w\n"), 1);
  EXPECT_THAT(err, HasSubstr("old_password"));
  ASSERT_EQ(cluster.Cli({"user", "change-password", "--password-stdin"}, &out, &err, "s3cret\nn3w\n"), 0) << err;
  ASSERT_EQ(cluster.Cli({"user", "whoami"}, &out, &err), 0) << err;  // this token survives
  EXPECT_EQ(RestLogin(cluster.http_port(), "alice", "s3cret"), "");
  EXPECT_NE(RestLogin(cluster.http_port(), "alice", "n3w"), "");

  // A revoked token is refused; det-cli then falls back to `determined`.
  std::string token = json::parse(ReadFile(dir / "det-auth.json"))["masters"].begin().value()["token"];
  ASSERT_EQ(cluster.Cli({"user", "logout"}, &out, &err), 0) << err;
  EXPECT_EQ(cluster.GetJson("/api/v1/me", token)["code"], 16) << "token still valid after logout";
  ASSERT_EQ(cluster.Cli({"user", "whoami"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("'determined'"));
  // $DET_USER_TOKEN wins over the stored token.
  setenv("DET_USER_TOKEN", "garbage", 1);
  EXPECT_EQ(cluster.Cli({"experiment", "list"}, &out, &err), 1);
  unsetenv("DET_USER_TOKEN");
  EXPECT_THAT(err, HasSubstr("UNAUTHENTICATED"));
}

// An agent with the wrong cluster secret is refused and exits.
TEST(AuthTest, AgentNeedsTheClusterSecret) {
  TempDir dir;
  AuthCluster cluster(dir);
  WriteFile(dir / "wrong", "not-the-secret\n");
  Subprocess& bad = cluster.StartAgent("bad", 1, dir / "wrong");
  EXPECT_EQ(bad.Wait(std::chrono::seconds(60)), 1);
  EXPECT_THAT(bad.Stderr() + bad.Stdout(), HasSubstr("cluster secret"));
  cluster.StartAgent("good", 1, dir / "secret");
  const std::string token = RestLogin(cluster.http_port());
  ASSERT_TRUE(PollUntil(
      [&] {
        json agents = cluster.GetJson("/api/v1/agents", token);
        return agents.contains("agents") && agents["agents"].size() == 1 &&
               agents["agents"][0].value("connected", false);
      },
      std::chrono::seconds(30)));
}

// TLS: det-master --tls-cert/--tls-key; det-cli and det-agent --tls-ca (the
// agent hands the CA to det-trial); a short experiment completes over TLS and
// a plaintext client cannot talk to the master.
TEST(AuthTest, TlsEndToEnd) {
  if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/openssl to make a certificate";
  TempDir dir;
  IsolateCliAuth(dir.path());
  std::string out, err;
  ASSERT_EQ(WriteSelfSignedCert(dir.path()), "");
  TestCluster cluster(
      dir, TestClusterOptions().add_master_flags({"--tls-cert", dir / "cert.pem", "--tls-key", dir / "key.pem"}));
  ASSERT_FALSE(HasFatalFailure());
  const std::string grpc = cluster.grpc_address();
  Subprocess& agent = cluster.StartAgent("tls", AgentOptions().add_flags({"--tls-ca", dir / "cert.pem"}));
  auto cli = [&](std::vector<std::string> args, bool tls) {
    std::vector<std::string> argv = {kBin + "/det-cli", "-m", grpc};
    if (tls) argv.insert(argv.end(), {"--tls-ca", dir / "cert.pem"});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, &out, &err, std::chrono::minutes(3));
  };
  EXPECT_EQ(cli({"user", "whoami"}, /*tls=*/false), 1);
  ASSERT_EQ(cli({"user", "whoami"}, /*tls=*/true), 0) << err;
  ASSERT_TRUE(PollUntil([&] { return cli({"agent", "list", "--json"}, true) == 0 && out.find("true") != std::string::npos; },
                        std::chrono::seconds(30)))
      << out << err << agent.Stderr();
  WriteFile(dir / "one.yaml", absl::StrCat(R"(name: tls
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
    batches: 20
min_validation_period:
  batches: 10
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
)"));
  EXPECT_EQ(cli({"experiment", "create", dir / "one.yaml", kSynthetic, "--follow"}, true), 0)
      << out << err << agent.Stderr();
  EXPECT_THAT(out, HasSubstr("COMPLETED"));
}

}  // namespace
}  // namespace det::testing
