// What GetExperiment shows of a config (every reader: REST, det-cli
// describe, the dashboard) has its secret-looking values redacted; what the
// experiment's own trials get (GetTrialContext) is the config as written.
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/proto_json.h"
#include "master/core/core_test_fixture.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kNeedle[] = "hunter2-redaction-NEEDLE";

class ConfigRedactCoreTest : public MasterCoreFixture {};

TEST_F(ConfigRedactCoreTest, ReadersSeeRedactedValuesTrialsSeeTheConfig) {
  std::shared_ptr<AgentSession> agent;
  AttachOneSlotAgent(&agent);
  const std::string yaml = det::testing::SingleTrialConfig("redact", dir_ / "checkpoints") +
                           "data:\n  url: http://db.example\n  db_password: " + kNeedle + "\n  nested:\n    - token: " +
                           kNeedle + "\n";
  const int64_t id = CreateActiveExperiment(yaml);
  ASSERT_GT(id, 0);

  apiv1::GetExperimentRequest get;
  get.set_experiment_id(id);
  auto shown = core_->GetExperiment(get);
  ASSERT_TRUE(shown.ok()) << shown.status();
  const std::string everything = shown->DebugString() + MessageToJson(*shown);
  EXPECT_THAT(everything, Not(HasSubstr(kNeedle)));
  EXPECT_THAT(shown->experiment().config_yaml(), HasSubstr("  db_password: \"<redacted>\"\n"));
  EXPECT_THAT(shown->experiment().config_yaml(), HasSubstr("url: http://db.example"));
  const nlohmann::json config = StructToJson(shown->experiment().config());
  EXPECT_EQ(config["data"]["db_password"], "<redacted>");
  EXPECT_EQ(config["data"]["nested"][0]["token"], "<redacted>");
  EXPECT_EQ(config["data"]["url"], "http://db.example");
  apiv1::GetExperimentsRequest list;
  auto listed = core_->GetExperiments(list);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(listed->DebugString(), Not(HasSubstr(kNeedle)));

  // The trial runs the config as written.
  std::vector<agentv1::StartAllocation> starts = Starts(*agent);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_THAT(starts[0].config_yaml(), HasSubstr(kNeedle));
  trialv1::GetTrialContextRequest ctx;
  ctx.set_allocation_id(starts[0].allocation_id());
  auto context = core_->GetTrialContext(ctx, starts[0].allocation_token());
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ(context->config_yaml(), yaml);
}

}  // namespace
}  // namespace det::master
