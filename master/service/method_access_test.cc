// Who may call what (method_access.h), enforced through ApiHandlers for both
// transports: every method has a rule, and a second non-admin user cannot
// change the first user's experiment through any owned or admin RPC.
#include "master/service/method_access.h"

#include <memory>

#include <google/protobuf/message.h>
#include <gtest/gtest.h>

#include "master/core/auth.h"
#include "master/core/master_core.h"
#include "master/service/api_handlers.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

namespace pb = google::protobuf;

TEST(MethodAccessTest, EveryMethodOfTheServiceHasARule) {
  const pb::ServiceDescriptor* service = ApiHandlers::Service();
  ASSERT_NE(service, nullptr);
  for (int i = 0; i < service->method_count(); ++i) {
    const pb::MethodDescriptor* m = service->method(i);
    MethodAccess a = AccessOf(m->name());
    EXPECT_NE(a.access, Access::kUnlisted) << m->name() << " has no access rule in method_access.cc";
    if (a.access == Access::kExperimentOwner) {
      EXPECT_NE(m->input_type()->FindFieldByName(a.field), nullptr) << m->name() << ": no field " << a.field;
    }
  }
  EXPECT_EQ(AccessOf("NoSuchMethod").access, Access::kUnlisted);
}

class OwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterOptions options;
    options.data_dir = dir_.path();
    options.background_thread = false;
    auto core = MasterCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    auto auth = AuthCore::Create(core_->store(), AuthOptions());
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = std::move(*auth);
    handlers_ = std::make_unique<ApiHandlers>(core_.get(), auth_.get());
    alice_ = Caller(10, "alice", false);
    bob_ = Caller(11, "bob", false);
    admin_ = Caller(1, "admin", true);
  }

  static ApiCaller Caller(int64_t id, const std::string& name, bool admin) {
    ApiCaller c;
    c.user.set_id(id);
    c.user.set_username(name);
    c.user.set_admin(admin);
    c.user.set_active(true);
    return c;
  }

  int64_t CreateAs(const ApiCaller& caller) {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(testing::SingleTrialConfig("owned", dir_ / "checkpoints"));
    req.set_trial_so(testing::FakeTrialSo());
    req.set_activate(true);
    apiv1::CreateExperimentResponse resp;
    absl::Status st = handlers_->CallUnary("CreateExperiment", caller, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    return resp.experiment().id();
  }

  // A request of `method` naming experiment `exp` (and its trial `trial`).
  static std::unique_ptr<pb::Message> RequestFor(const pb::MethodDescriptor* m, int64_t exp, int64_t trial) {
    std::unique_ptr<pb::Message> req(pb::MessageFactory::generated_factory()->GetPrototype(m->input_type())->New());
    const pb::Reflection* r = req->GetReflection();
    const MethodAccess a = AccessOf(m->name());
    const pb::FieldDescriptor* f = a.field ? m->input_type()->FindFieldByName(a.field) : nullptr;
    if (a.owned_by == OwnedBy::kExperimentId) r->SetInt64(req.get(), f, exp);
    if (a.owned_by == OwnedBy::kTrialId) r->SetInt64(req.get(), f, trial);
    if (a.owned_by == OwnedBy::kJobId) r->SetString(req.get(), f, "exp-" + std::to_string(exp));
    return req;
  }

  testing::TempDir dir_;
  std::unique_ptr<MasterCore> core_;
  std::unique_ptr<AuthCore> auth_;
  std::unique_ptr<ApiHandlers> handlers_;
  ApiCaller alice_, bob_, admin_;
};

TEST_F(OwnershipTest, ExperimentsRecordTheirCreator) {
  int64_t id = CreateAs(alice_);
  apiv1::GetExperimentRequest req;
  req.set_experiment_id(id);
  apiv1::GetExperimentResponse resp;
  ASSERT_TRUE(handlers_->CallUnary("GetExperiment", bob_, req, &resp).ok());  // reads are open
  EXPECT_EQ(resp.experiment().username(), "alice");
  EXPECT_EQ(resp.experiment().user_id(), 10);
}

// The authorization sweep, in process: every owned or admin method of the
// service called by bob on alice's experiment is PermissionDenied, and the
// experiment is unchanged; alice and an admin may.
TEST_F(OwnershipTest, AnotherUserCannotChangeAnExperimentThroughAnyMethod) {
  int64_t exp = CreateAs(alice_);
  apiv1::GetExperimentTrialsRequest treq;
  treq.set_experiment_id(exp);
  apiv1::GetExperimentTrialsResponse trials;
  ASSERT_TRUE(handlers_->CallUnary("GetExperimentTrials", alice_, treq, &trials).ok());
  ASSERT_EQ(trials.trials_size(), 1);
  const int64_t trial = trials.trials(0).id();

  const pb::ServiceDescriptor* service = ApiHandlers::Service();
  int checked = 0;
  for (int i = 0; i < service->method_count(); ++i) {
    const pb::MethodDescriptor* m = service->method(i);
    const MethodAccess a = AccessOf(m->name());
    if (a.access != Access::kExperimentOwner && a.access != Access::kAdmin) continue;
    if (a.owned_by == OwnedBy::kCheckpointUuids) continue;  // no checkpoint here; see security_test
    SCOPED_TRACE(m->name());
    std::unique_ptr<pb::Message> req = RequestFor(m, exp, trial);
    EXPECT_EQ(handlers_->Authorize(m->name(), bob_, *req).code(), absl::StatusCode::kPermissionDenied);
    EXPECT_TRUE(handlers_->Authorize(m->name(), admin_, *req).ok());
    if (a.access == Access::kExperimentOwner) {
      EXPECT_TRUE(handlers_->Authorize(m->name(), alice_, *req).ok());
    }
    if (!m->client_streaming() && !m->server_streaming()) {
      std::unique_ptr<pb::Message> resp(
          pb::MessageFactory::generated_factory()->GetPrototype(m->output_type())->New());
      EXPECT_EQ(handlers_->CallUnary(m->name(), bob_, *req, resp.get()).code(), absl::StatusCode::kPermissionDenied);
    }
    ++checked;
  }
  EXPECT_GE(checked, 15);
  apiv1::GetExperimentRequest get;
  get.set_experiment_id(exp);
  apiv1::GetExperimentResponse resp;
  ASSERT_TRUE(handlers_->CallUnary("GetExperiment", alice_, get, &resp).ok());
  EXPECT_EQ(resp.experiment().state(), apiv1::STATE_ACTIVE);
  EXPECT_EQ(resp.experiment().name(), "owned");

  apiv1::PauseExperimentRequest pause;
  pause.set_experiment_id(exp);
  apiv1::PauseExperimentResponse paused;
  EXPECT_TRUE(handlers_->CallUnary("PauseExperiment", alice_, pause, &paused).ok());
}

TEST_F(OwnershipTest, UnknownIdsAreNotFoundAndMalformedJobIdsInvalid) {
  apiv1::PauseExperimentRequest pause;
  pause.set_experiment_id(4294967297);
  EXPECT_EQ(handlers_->Authorize("PauseExperiment", bob_, pause).code(), absl::StatusCode::kNotFound);
  apiv1::UpdateJobRequest job;
  job.set_job_id("exp-../../1");
  EXPECT_EQ(handlers_->Authorize("UpdateJob", bob_, job).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace det::master
