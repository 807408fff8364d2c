// End to end: every method of every gRPC service det-master declares is
// real. Each method of det.api.v1.Determined, det.agent.v1.AgentService and
// det.trial.v1.TrialService is called on a real master (with an admin token
// and requests naming a real experiment, trial and checkpoint), and none may
// answer UNIMPLEMENTED; every unary method of det.api.v1.Determined also
// answers at the generic REST route POST /api/v1/<Rpc>.
//
// The methods are walked from the descriptors, so a method added to a proto
// without a handler fails this test.
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/proto_json.h"
#include "det/agent/v1/agent.grpc.pb.h"
#include "det/api/v1/api.grpc.pb.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det {
namespace testing {
namespace {

using namespace std::chrono_literals;
namespace pb = google::protobuf;

// Methods that end what later calls need: called last, in this order.
const std::vector<std::string> kLast = {"DeleteCheckpoints", "DeleteExperiment", "Logout"};

std::string CompletedTrialConfig(const std::string& checkpoint_dir) {
  return absl::StrCat(R"(name: coverage
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
    batches: 4
min_checkpoint_period:
  batches: 2
scheduling_unit: 2
checkpoint_storage:
  type: shared_fs
  host_path: )",
                      checkpoint_dir, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 128
  val_size: 32
)");
}

// One call of `method` of `service` with one request message (any kind of
// method: unary and streaming calls look alike on the wire), reading every
// response until the server ends the call; returns its status.
grpc::Status CallAnyMethod(const std::shared_ptr<grpc::Channel>& channel, const pb::MethodDescriptor& method,
                           const pb::Message& request, const std::string& token) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::CompletionQueue cq;
  auto wait = [&cq] {
    void* tag = nullptr;
    bool ok = false;
    return cq.Next(&tag, &ok) && ok;
  };
  const std::string path = absl::StrCat("/", method.service()->full_name(), "/", method.name());
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(&ctx, path, &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  if (wait()) {
    std::string bytes = request.SerializeAsString();
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, reinterpret_cast<void*>(2));
    if (wait()) {
      call->WritesDone(reinterpret_cast<void*>(3));
      wait();
    }
    for (int i = 0; i < 100000; ++i) {
      grpc::ByteBuffer response;
      call->Read(&response, reinterpret_cast<void*>(4));
      if (!wait()) break;
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  wait();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// `method`'s request type with every field that `body` names filled.
std::unique_ptr<pb::Message> RequestFor(const pb::MethodDescriptor& method, const nlohmann::json& body) {
  std::unique_ptr<pb::Message> req(
      pb::MessageFactory::generated_factory()->GetPrototype(method.input_type())->New());
  nlohmann::json own = nlohmann::json::object();
  for (int i = 0; i < method.input_type()->field_count(); ++i) {
    const std::string& name = method.input_type()->field(i)->name();
    if (body.contains(name)) own[name] = body[name];
  }
  absl::Status parsed = JsonToMessage(own.dump(), req.get());
  EXPECT_TRUE(parsed.ok()) << method.name() << ": " << parsed;
  return req;
}

std::vector<const pb::MethodDescriptor*> MethodsInCallOrder() {
  std::vector<const pb::MethodDescriptor*> methods, last(kLast.size(), nullptr);
  // The services of the three files det-master serves.
  for (const pb::internal::DescriptorTable* table :
       {&descriptor_table_det_2ftrial_2fv1_2ftrial_2eproto, &descriptor_table_det_2fagent_2fv1_2fagent_2eproto,
        &descriptor_table_det_2fapi_2fv1_2fapi_2eproto}) {
    pb::internal::AssignDescriptors(table);
  }
  std::vector<const pb::ServiceDescriptor*> services;
  for (const char* name : {"det.trial.v1.TrialService", "det.agent.v1.AgentService", "det.api.v1.Determined"}) {
    const pb::ServiceDescriptor* found = pb::DescriptorPool::generated_pool()->FindServiceByName(name);
    EXPECT_NE(found, nullptr) << name;
    if (found != nullptr) services.push_back(found);
  }
  EXPECT_EQ(services.size(), 3u);
  for (const pb::ServiceDescriptor* service : services) {
    for (int i = 0; i < service->method_count(); ++i) {
      const pb::MethodDescriptor* m = service->method(i);
      auto at = std::find(kLast.begin(), kLast.end(), m->name());
      if (service->full_name() == "det.api.v1.Determined" && at != kLast.end()) {
        last[at - kLast.begin()] = m;
      } else {
        methods.push_back(m);
      }
    }
  }
  for (const pb::MethodDescriptor* m : last) {
    if (m != nullptr) methods.push_back(m);
  }
  return methods;
}

TEST(ApiCoverageTest, NoMethodOfAnyServiceAnswersUnimplementedAndEveryUnaryRpcHasItsRestRoute) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a1");
  const int exp = cluster.CreateExperiment(CompletedTrialConfig(dir / "checkpoints"), "coverage");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 180s)) << cluster.MasterLog() << cluster.AgentLogs();
  nlohmann::json cps = cluster.Get(absl::StrCat("/api/v1/experiments/", exp, "/checkpoints"));
  ASSERT_FALSE(cps["checkpoints"].empty()) << cps.dump();
  const std::string uuid = cps["checkpoints"][0]["uuid"];
  const int64_t trial = cluster.Trials(exp)[0]["id"];
  const int64_t determined_id = cluster.Get("/api/v1/me")["user"]["id"];
  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  ASSERT_FALSE(admin.empty());

  // What a request may name: the completed experiment, its trial and
  // checkpoint, the agent, a user.
  const nlohmann::json body = {{"experiment_id", exp},       {"trial_id", trial},
                               {"trial_ids", {trial}},       {"checkpoint_uuid", uuid},
                               {"checkpoint_uuids", {uuid}}, {"job_id", absl::StrCat("exp-", exp)},
                               {"user_id", determined_id},   {"agent_id", "a1"},
                               {"slot_id", "0"},             {"allocation_id", "no-such-allocation"}};

  auto channel = grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials());
  nlohmann::json routes = cluster.Get("/api/v1/routes");
  std::set<std::string> generic_routes;
  for (const auto& route : routes["routes"]) {
    if (route.value("method", "") == "POST") generic_routes.insert(route.value("pattern", ""));
  }

  int checked = 0, rest_checked = 0;
  std::vector<std::string> unimplemented;
  for (const pb::MethodDescriptor* m : MethodsInCallOrder()) {
    SCOPED_TRACE(m->full_name());
    std::unique_ptr<pb::Message> req = RequestFor(*m, body);
    grpc::Status st = CallAnyMethod(channel, *m, *req, admin);
    ++checked;
    if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) unimplemented.push_back(m->full_name());
    EXPECT_NE(st.error_code(), grpc::StatusCode::UNIMPLEMENTED) << m->full_name() << ": " << st.error_message();
    const bool unary = !m->client_streaming() && !m->server_streaming();
    if (m->service()->full_name() != "det.api.v1.Determined" || !unary) continue;

    // The generic REST form of the same call.
    const std::string path = "/api/v1/" + m->name();
    EXPECT_TRUE(generic_routes.count(path)) << "no generic route " << path << " in /api/v1/routes";
    const std::string json = MessageToJson(*req);
    auto res = cluster.Http("POST", path, {{"Authorization", "Bearer " + admin}}, json);
    ASSERT_TRUE(res) << path;
    ++rest_checked;
    EXPECT_NE(res->status, 501) << res->body;
    EXPECT_NE(res->status, 405) << res->body;
    // A 404 is the RPC's own NOT_FOUND (say, the experiment a previous call
    // deleted), never a missing route.
    if (res->status == 404) {
      EXPECT_TRUE(absl::StrContains(res->body, "NOT_FOUND")) << res->body;
    }
  }
  std::printf("[ walked   ] %d methods over gRPC, %d unary RPCs over REST; UNIMPLEMENTED: %zu\n", checked,
              rest_checked, unimplemented.size());
  for (const std::string& name : unimplemented) std::printf("[ pending  ] %s\n", name.c_str());
  EXPECT_GE(checked, 59);  // the three services had 59 methods when this test was written
}

}  // namespace
}  // namespace testing
}  // namespace det
