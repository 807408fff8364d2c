// The trial.so ABI checked at create (issue 45): a trial built with
// -D_GLIBCXX_USE_CXX11_ABI=0 and one linked against libdet_sdk.so.9 are
// refused by det-cli before the upload and, with --no-local-abi-check, by the
// master against the manifest its agent reported; each error names the
// user's file, the first unresolved symbol demangled and the cause. A good
// trial passes both. A trial the master could not check (no agent yet) fails
// on the agent with an error naming the uploaded file, not the cache path.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kOldAbi = std::string(DET_TRIALS_DIR) + "/synthetic_trial_old_abi.so";
const std::string kSdk9 = std::string(DET_TRIALS_DIR) + "/sdk9_trial.so";
const std::string kConfig = std::string(DET_SOURCE_DIR) + "/examples/synthetic/const.yaml";

// What every refusal of the old-ABI trial says: the file, a demangled SDK or
// LibTorch symbol taking the old std::string, its mangled name, the cause.
void ExpectOldAbiRefusal(const std::string& err, const std::string& file) {
  EXPECT_THAT(err, HasSubstr("det-cli: error: " + file + ": undefined symbol ")) << err;
  EXPECT_THAT(err, ContainsRegex("undefined symbol (det|c10|at|torch)::[^ ]*\\(.*std::(string|basic_string)"))
      << err;
  EXPECT_THAT(err, ContainsRegex(" \\(_Z[A-Za-z0-9_]+\\) is not exported by ")) << err;
  EXPECT_THAT(err, HasSubstr("likely built with -D_GLIBCXX_USE_CXX11_ABI=0 (the cluster's LibTorch uses the new ABI"))
      << err;
}

void ExpectSdk9Refusal(const std::string& err, const std::string& file) {
  EXPECT_THAT(err, HasSubstr("det-cli: error: " + file + ": linked against libdet_sdk.so.9, the cluster has "
                             "libdet_sdk.so.0 (SDK version "))
      << err;
}

class TrialAbiTest : public ::testing::Test {
 protected:
  void StartAgent() {
    cluster_.StartAgent("a1");
    ASSERT_TRUE(PollUntil([&] { return cluster_.ConnectedAgents() == 1; }, std::chrono::seconds(30)))
        << cluster_.AgentLogs();
  }
  int Create(const std::string& trial, std::vector<std::string> flags, std::string* out, std::string* err) {
    std::vector<std::string> args = {"experiment", "create", kConfig, trial, "--paused"};
    args.insert(args.end(), flags.begin(), flags.end());
    return cluster_.Cli(args, out, err);
  }
  TempDir dir_;
  TestCluster cluster_{dir_};
};

TEST_F(TrialAbiTest, DetCliRefusesBeforeTheUpload) {
  StartAgent();
  std::string out, err;
  EXPECT_EQ(Create(kOldAbi, {}, &out, &err), 1);
  ExpectOldAbiRefusal(err, kOldAbi);
  EXPECT_THAT(err, HasSubstr("is not exported by the libraries of ")) << err;
  EXPECT_THAT(err, HasSubstr("(checked before the upload; --no-local-abi-check leaves the check to the master)"));
  EXPECT_EQ(Create(kSdk9, {}, &out, &err), 1);
  ExpectSdk9Refusal(err, kSdk9);
  EXPECT_THAT(cluster_.MasterLog(), Not(HasSubstr("created experiment"))) << "nothing reached the master";
}

TEST_F(TrialAbiTest, MasterRefusesAgainstItsAgentsManifest) {
  StartAgent();
  std::string out, err;
  EXPECT_EQ(Create(kOldAbi, {"--no-local-abi-check"}, &out, &err), 1);
  // The master names the file as det-cli sent it (its last path component).
  ExpectOldAbiRefusal(err, "synthetic_trial_old_abi.so");
  EXPECT_THAT(err, HasSubstr("is not exported by agent 'a1' (libdet_sdk.so.0, ")) << err;
  EXPECT_THAT(err, Not(HasSubstr("checked before the upload"))) << err;
  EXPECT_EQ(Create(kSdk9, {"--no-local-abi-check"}, &out, &err), 1);
  ExpectSdk9Refusal(err, "sdk9_trial.so");
  EXPECT_THAT(err, HasSubstr("(agent 'a1' (libdet_sdk.so.0, ")) << err;
  EXPECT_THAT(cluster_.MasterLog(), Not(HasSubstr("created experiment")));
}

TEST_F(TrialAbiTest, AGoodTrialPassesBothChecks) {
  StartAgent();
  for (const std::vector<std::string>& flags : {std::vector<std::string>{}, {"--no-local-abi-check"}}) {
    std::string out, err;
    EXPECT_EQ(Create(kTestSyntheticTrial, flags, &out, &err), 0) << err;
    EXPECT_THAT(out, HasSubstr("Created experiment")) << err;
    EXPECT_THAT(err, Not(HasSubstr("warning"))) << err;
  }
}

// Before any agent registered the master cannot check: it says so, and the
// trial then fails on the agent with an error naming the uploaded file.
TEST_F(TrialAbiTest, UncheckedTrialFailsOnTheAgentNamingTheUploadedFile) {
  std::string out, err;
  ASSERT_EQ(Create(kOldAbi, {"--no-local-abi-check"}, &out, &err), 0) << err;
  EXPECT_THAT(err, HasSubstr("det-cli: warning: no agent of resource pool 'default' has reported its libraries "
                             "yet, so the master did not check synthetic_trial_old_abi.so"))
      << err;
  ASSERT_EQ(cluster_.Cli({"experiment", "activate", "1"}, &out, &err), 0) << err;
  StartAgent();
  ASSERT_TRUE(cluster_.WaitForState(1, "STATE_ERROR", std::chrono::seconds(120))) << cluster_.ExperimentState(1);
  const nlohmann::json trials = cluster_.Trials(1);
  ASSERT_EQ(trials.size(), 1u) << trials.dump();
  const nlohmann::json& id = trials[0]["id"];  // an int64: a string in proto JSON
  ASSERT_EQ(cluster_.Cli({"trial", "logs", id.is_string() ? id.get<std::string>() : std::to_string(id.get<int64_t>())},
                         &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("cannot load trial library 'synthetic_trial_old_abi.so' as a shared library: "
                             "synthetic_trial_old_abi.so: undefined symbol: _Z"))
      << out;
  EXPECT_THAT(out, HasSubstr("likely built with -D_GLIBCXX_USE_CXX11_ABI=0")) << out;
  EXPECT_THAT(out, Not(HasSubstr("cache/"))) << out;
}

}  // namespace
}  // namespace det::testing
