// GetCheckpointStorageCredentials in process: a trial gets the credentials
// of its own experiment's S3 storage and of a checkpoint it starts from,
// and nothing else (the attack: trial A's token asking for experiment B's
// storage in another workspace). CreateExperiment refuses a profile the
// experiment's workspace may not use and a warm start from such storage.
// No processes, no S3 I/O (the call does none).
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "master/core/core_test_fixture.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

constexpr char kSecretA[] = "secret-of-team-a-0123456789abcdefghijklmn";
constexpr char kSecretB[] = "secret-of-team-b-0123456789abcdefghijklmn";
constexpr char kUuid[] = "0a1b2c3d-0000-4000-8000-000000000001";

class StorageCredentialsTest : public MasterCoreFixture {
 protected:
  void SetUp() override {
    const std::string path = dir_ / "s3-credentials";
    {
      std::ofstream out(path);
      out << "[team-a]\naws_access_key_id = AKIA-A\naws_secret_access_key = " << kSecretA
          << "\nendpoint_url = http://127.0.0.1:9\nregion = eu-west-3\ndet_workspaces = team-a\n\n"
          << "[team-b]\naws_access_key_id = AKIA-B\naws_secret_access_key = " << kSecretB
          << "\nendpoint_url = http://127.0.0.1:9\ndet_workspaces = team-b\n\n"
          << "[shared]\naws_access_key_id = AKIA-S\naws_secret_access_key = " << kSecretB
          << "\nendpoint_url = http://127.0.0.1:9\ndet_workspaces = *\n";
    }
    ASSERT_EQ(chmod(path.c_str(), 0600), 0);
    credentials_ = path;
    alice_.set_id(7);
    alice_.set_username("alice");
    Open();
    for (const char* ws : {"team-a", "team-b"}) {
      apiv1::PostWorkspaceRequest w;
      w.set_name(ws);
      auto created = core_->PostWorkspace(w, alice_);
      ASSERT_TRUE(created.ok()) << created.status();
      apiv1::PostProjectRequest p;
      p.set_workspace_id(created->workspace().id());
      p.set_name("p");
      ASSERT_TRUE(core_->PostProject(p, alice_).ok());
    }
  }
  void Customize(MasterOptions* options) override { options->s3_credentials_file = credentials_; }

  static std::string Config(const std::string& workspace, const std::string& profile, const std::string& bucket,
                            const std::string& extra = "") {
    return "name: s3\nhyperparameters:\n  global_batch_size: 16\nsearcher:\n  name: single\n  metric: loss\n"
           "  max_length: {batches: 100}\n" + extra + "checkpoint_storage:\n  type: s3\n  bucket: " + bucket +
           "\n  prefix: exp\n  profile: " + profile + "\nworkspace: " + workspace + "\nproject: p\n";
  }
  absl::StatusOr<apiv1::CreateExperimentResponse> Create(const std::string& yaml) {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(yaml);
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(true);
    return core_->CreateExperiment(req, alice_);
  }
  // The allocation started for the experiment just created, on agent "a"
  // or "b" (which one: *agent).
  agentv1::StartAllocation Started(AgentSession& a, AgentSession& b, std::string* agent = nullptr) {
    std::vector<agentv1::StartAllocation> starts = Starts(a);
    const size_t on_a = starts.size();
    for (const auto& s : Starts(b)) starts.push_back(s);
    EXPECT_EQ(starts.size(), 1u);
    if (agent != nullptr) *agent = on_a == 1 ? "a" : "b";
    return starts.empty() ? agentv1::StartAllocation() : starts[0];
  }
  absl::StatusOr<trialv1::GetCheckpointStorageCredentialsResponse> Ask(const agentv1::StartAllocation& start,
                                                                        const std::string& path,
                                                                        int64_t trial_id = 0) {
    trialv1::GetCheckpointStorageCredentialsRequest req;
    req.set_trial_id(trial_id != 0 ? trial_id : start.trial_id());
    req.set_storage_path(path);
    return core_->GetCheckpointStorageCredentials(req, start.allocation_token());
  }

  std::string credentials_;
  apiv1::User alice_;
};

TEST_F(StorageCredentialsTest, ATrialGetsItsOwnStorageOnly) {
  std::shared_ptr<AgentSession> a, b;
  AttachOneSlotAgent(&a, "a");
  AttachOneSlotAgent(&b, "b");
  ASSERT_TRUE(Create(Config("team-a", "team-a", "bucket-a")).ok());
  std::string agent_a;
  const agentv1::StartAllocation trial_a = Started(*a, *b, &agent_a);
  ASSERT_TRUE(Create(Config("team-b", "team-b", "bucket-b")).ok());
  const agentv1::StartAllocation trial_b = Started(*a, *b);

  for (const std::string& path : std::vector<std::string>{"s3://bucket-a/exp", std::string("s3://bucket-a/exp/") + kUuid}) {
    auto own = Ask(trial_a, path);
    ASSERT_TRUE(own.ok()) << own.status();
    EXPECT_EQ(own->access_key_id(), "AKIA-A");
    EXPECT_EQ(own->secret_access_key(), kSecretA);
    EXPECT_EQ(own->endpoint_url(), "http://127.0.0.1:9");
    EXPECT_EQ(own->region(), "eu-west-3");
    EXPECT_EQ(own->addressing(), "path");
  }
  // The attack: A's token for B's storage, or for B's trial.
  for (const std::string& path : std::vector<std::string>{"s3://bucket-b/exp", std::string("s3://bucket-b/exp/") + kUuid, "s3://bucket-a/ex",
                                 "s3://bucket-a/exp2", "s3://bucket-a"}) {
    auto other = Ask(trial_a, path);
    EXPECT_EQ(other.status().code(), absl::StatusCode::kPermissionDenied) << path << " " << other.status();
  }
  EXPECT_EQ(Ask(trial_a, "s3://bucket-b/exp", trial_b.trial_id()).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(core_->GetCheckpointStorageCredentials({}, "").status().code(), absl::StatusCode::kNotFound);
  // Not an s3 URL, or one libcurl would normalize out of the prefix.
  for (const std::string& path : std::vector<std::string>{"/tmp/x", "s3://bucket-a/exp/../../bucket-b", "s3://bucket-a/exp//x",
                                 "s3://bucket-a/exp/./x", "s3://Bad_Bucket/exp", std::string(3000, 's')}) {
    EXPECT_EQ(Ask(trial_a, path).status().code(), absl::StatusCode::kInvalidArgument) << path.substr(0, 40);
  }
  // Once its run ended, the run's token is worth nothing.
  Exited(agent_a, trial_a.allocation_id(), 0, 1);
  const absl::StatusCode ended = Ask(trial_a, "s3://bucket-a/exp").status().code();
  EXPECT_TRUE(ended == absl::StatusCode::kPermissionDenied || ended == absl::StatusCode::kFailedPrecondition)
      << ended;
}

TEST_F(StorageCredentialsTest, CreateRefusesAProfileTheWorkspaceMayNotUse) {
  auto refused = Create(Config("team-a", "team-b", "bucket-b"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("profile 'team-b'"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("workspace 'team-a'"));
  auto unknown = Create(Config("team-a", "nope", "bucket-b"));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("checkpoint_storage.profile: no profile 'nope'"));
  for (const auto& st : {refused.status(), unknown.status()}) {
    EXPECT_THAT(std::string(st.message()), ::testing::Not(HasSubstr(kSecretB)));
  }
}

// A warm start from another workspace's checkpoint: allowed when the
// source's profile allows the new experiment's workspace, and then the
// trial may read that checkpoint (and only it) of the source's storage.
TEST_F(StorageCredentialsTest, AWarmStartSourceIsReadableWhenItsProfileAllowsTheWorkspace) {
  std::shared_ptr<AgentSession> a, b;
  AttachOneSlotAgent(&a, "a");
  AttachOneSlotAgent(&b, "b");
  auto source = Create(Config("team-b", "team-b", "bucket-b"));
  ASSERT_TRUE(source.ok()) << source.status();
  const agentv1::StartAllocation trial_b = Started(*a, *b);
  auto shared = Create(Config("team-b", "shared", "bucket-s"));
  ASSERT_TRUE(shared.ok()) << shared.status();
  const agentv1::StartAllocation trial_s = Started(*a, *b);
  for (const auto& [start, bucket, uuid] :
       {std::tuple{trial_b, "bucket-b", kUuid}, std::tuple{trial_s, "bucket-s", "0a1b2c3d-0000-4000-8000-000000000002"}}) {
    CheckpointRow row;
    row.uuid = uuid;
    row.trial_id = start.trial_id();
    row.experiment_id = start.experiment_id();
    row.trial_run_id = 1;
    row.state = "COMPLETED";
    row.resources = {{"model.pt", 1}};
    row.storage_path = std::string("s3://") + bucket + "/exp/" + uuid;
    ASSERT_TRUE(core_->store()->InsertCheckpoint(row).ok());
  }
  std::shared_ptr<AgentSession> c;  // the child's slot (the sources keep running)
  AttachOneSlotAgent(&c, "c");

  // team-b's profile does not allow team-a: no warm start from it.
  auto refused = Create(Config("team-a", "team-a", "bucket-a", std::string("  source_checkpoint_uuid: ") + kUuid + "\n"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("searcher.source_checkpoint_uuid: checkpoint"));

  // The shared profile does.
  auto child = Create(Config("team-a", "team-a", "bucket-a",
                             "  source_checkpoint_uuid: 0a1b2c3d-0000-4000-8000-000000000002\n"));
  ASSERT_TRUE(child.ok()) << child.status();
  std::vector<agentv1::StartAllocation> starts = Starts(*c);
  ASSERT_EQ(starts.size(), 1u);
  ASSERT_EQ(starts[0].experiment_id(), child->experiment().id());
  auto src = Ask(starts[0], "s3://bucket-s/exp/0a1b2c3d-0000-4000-8000-000000000002");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(src->access_key_id(), "AKIA-S");
  EXPECT_EQ(Ask(starts[0], "s3://bucket-s/exp").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Ask(starts[0], std::string("s3://bucket-b/exp/") + kUuid).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Ask(starts[0], "s3://bucket-a/exp").ok());
}

}  // namespace
}  // namespace det::master
