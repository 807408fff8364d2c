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
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/message.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/proto_json.h"
#include "det/api/v1/api.grpc.pb.h"
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
    "DeleteCheckpoints", "EnableAgent", "DisableAgent", "EnableSlot", "DisableSlot", "UpdateJob", "PostUser",
    "PatchUser"};
bool IsReadOrOwnSession(const std::string& rpc) {
  for (const char* prefix : {"Get", "Preview", "Stream", "Download", "TrialLogs"}) {
    if (rpc.rfind(prefix, 0) == 0) return true;
  }
  // Creating is open to every user (they own what they create).
  return rpc == "Login" || rpc == "Logout" || rpc == "CreateExperiment" || rpc == "UploadArtifact";
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
                               {"checkpoint_uuids", {uuid}},  {"job_id", absl::StrCat("exp-", exp)},
                               {"user_id", determined_id},    {"agent_id", "a1"},
                               {"slot_id", "0"},              {"name", "pwned"},
                               {"password", "pwned-pw-1"},    {"admin", true},
                               {"user", {{"username", "mallory2"}, {"admin", true}}},
                               {"priority", 1}};

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
             {"{user_id}", std::to_string(determined_id)}, {"{agent_id}", "a1"}, {"{slot_id}", "0"}}) {
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

// (section 2 tests)

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

  auto start = std::chrono::steady_clock::now();
  ExpectCliInvalid(cluster, {"preview-search", path}, limit);
  ExpectCreateInvalid(cluster, bomb, "bomb-create", limit);
  // REST too (the generic route and the experiments route answer 400).
  int status = 0;
  nlohmann::json preview = cluster.Send("POST", "/api/v1/PreviewSearch",
                                        nlohmann::json{{"config_yaml", bomb}}.dump(), &status);
  EXPECT_EQ(status, 400) << preview.dump();
  EXPECT_NE(preview.dump().find("100000 nodes"), std::string::npos) << preview.dump();
  nlohmann::json created = cluster.Send("POST", "/api/v1/experiments",
                                        nlohmann::json{{"config_yaml", bomb}, {"trial_so", "f0VMRg=="}}.dump(),
                                        &status);
  EXPECT_EQ(status, 400) << created.dump();
  // Generous: before the limits one bomb kept a core busy for over 60 s.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);

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
                      "deep", "YAML nests more than 64 levels deep (aliases included); the limit is 64");
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

// ---------------------------------------------------------------------------
// 7. Tokens
// ---------------------------------------------------------------------------

// (section 7 tests)

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
    GTEST_SKIP() << fuzzer << " was not built (the fuzzers need clang++ with libFuzzer; see README 'Fuzzing')";
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

TEST(SecurityTest, MasterStartsHealthy) {
  TempDir dir;
  TestCluster cluster(dir);
  ExpectMasterHealthy(cluster);
}

}  // namespace
}  // namespace det::testing
