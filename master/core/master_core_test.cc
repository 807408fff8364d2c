// MasterCore's time-based policies driven by a FakeClock: heartbeat loss,
// allocations an agent does not run, stop-timeout escalation, rendezvous
// timeouts and reattachment after a master restart. No processes, no
// sleeps: agents are played by calling the det.agent.v1 entry points and
// reading their AgentSession; the background pass runs when a test says so.
#include "master/core/master_core.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "common/det_version.h"
#include "common/exit_codes.h"
#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

constexpr int kHeartbeatTimeoutMs = 15000;
constexpr int64_t kStopTimeoutMs = 60000;
constexpr int64_t kRendezvousTimeoutMs = 600000;

std::string Config(const std::string& checkpoint_dir, int slots) {
  return det::testing::SingleTrialConfig("clock-test", checkpoint_dir, slots);
}

class MasterCoreTest : public MasterCoreFixture {
 protected:
  void Customize(MasterOptions* options) override {
    options->heartbeat_timeout_ms = kHeartbeatTimeoutMs;
    options->stop_timeout_ms = kStopTimeoutMs;
    options->rendezvous_timeout_ms = kRendezvousTimeoutMs;
  }

  // Registers agent `id` with `slots` CPU slots and attaches its stream.
  std::shared_ptr<AgentSession> Agent(const std::string& id, int slots,
                                      const std::vector<std::string>& running = {}) {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_version(det::kDetVersion);
    req.set_hostname("localhost");
    for (int i = 0; i < slots; ++i) req.add_devices()->set_id(i);
    for (const auto& r : running) req.add_running_allocation_ids(r);
    // Like a real agent: the credential issued at the first registration.
    req.set_agent_credential(credentials_[id]);
    auto resp = core_->RegisterAgent(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return nullptr;
    registered_[id] = *resp;
    if (!resp->agent_credential().empty()) credentials_[id] = resp->agent_credential();
    auto session = core_->AttachAgent(resp->session_token());
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *session : nullptr;
  }

  int64_t CreateExperiment(int slots = 1) { return CreateActiveExperiment(Config(dir_ / "checkpoints", slots)); }

  // Every message queued for `session` so far.
  static std::vector<agentv1::MasterMessage> Drain(AgentSession& session) {
    std::vector<agentv1::MasterMessage> out;
    agentv1::MasterMessage msg;
    while (session.Pop(&msg, std::chrono::milliseconds(0))) out.push_back(msg);
    return out;
  }
  static std::vector<agentv1::StartAllocation> Starts(const std::vector<agentv1::MasterMessage>& messages) {
    std::vector<agentv1::StartAllocation> out;
    for (const auto& m : messages) {
      if (m.has_start_allocation()) out.push_back(m.start_allocation());
    }
    return out;
  }
  static std::vector<agentv1::KillAllocation> Kills(const std::vector<agentv1::MasterMessage>& messages) {
    std::vector<agentv1::KillAllocation> out;
    for (const auto& m : messages) {
      if (m.has_kill_allocation()) out.push_back(m.kill_allocation());
    }
    return out;
  }

  // Runs the background pass and expects exactly one StartAllocation for
  // `session`'s agent.
  agentv1::StartAllocation ExpectStart(AgentSession& session) {
    core_->RunBackgroundPass();
    auto starts = Starts(Drain(session));
    EXPECT_EQ(starts.size(), 1u);
    return starts.empty() ? agentv1::StartAllocation() : starts[0];
  }

  void Heartbeat(const std::string& agent_id, const std::vector<std::string>& running) {
    agentv1::AgentMessage msg;
    for (const auto& r : running) msg.mutable_heartbeat()->add_running_allocation_ids(r);
    msg.mutable_heartbeat();
    core_->HandleAgentMessage(agent_id, msg);
  }
  // `ms` pass; agent `agent_id` sends a heartbeat listing `running`; the
  // background pass runs.
  void Tick(int64_t ms, const std::string& agent_id, const std::vector<std::string>& running) {
    clock_->AdvanceMs(ms);
    Heartbeat(agent_id, running);
    core_->RunBackgroundPass();
  }
  void Pause(int64_t experiment_id) {
    apiv1::PauseExperimentRequest pause;
    pause.set_experiment_id(experiment_id);
    ASSERT_TRUE(core_->PauseExperiment(pause).ok());
  }
  apiv1::Agent AgentInfo(const std::string& id) {
    auto resp = core_->GetAgents(apiv1::GetAgentsRequest());
    EXPECT_TRUE(resp.ok());
    for (const auto& a : resp->agents()) {
      if (a.id() == id) return a;
    }
    ADD_FAILURE() << "no agent " << id;
    return apiv1::Agent();
  }
  absl::StatusOr<trialv1::AllocationRendezvousResponse> Rendezvous(const agentv1::StartAllocation& start, int rank) {
    trialv1::AllocationRendezvousRequest req;
    req.set_allocation_id(start.allocation_id());
    req.set_rank(rank);
    req.set_port(30000 + rank);
    return core_->AllocationRendezvous(req, start.allocation_token(), std::chrono::milliseconds(0));
  }

  std::map<std::string, agentv1::RegisterAgentResponse> registered_;
  std::map<std::string, std::string> credentials_;  // per agent id
};

TEST_F(MasterCoreTest, AgentSilentPastHeartbeatTimeoutIsLostAndItsTrialMoves) {
  auto a = Agent("a", 1);
  CreateExperiment();
  agentv1::StartAllocation first = ExpectStart(*a);
  ASSERT_EQ(Trial().allocation_id(), first.allocation_id());

  clock_->AdvanceMs(kHeartbeatTimeoutMs + 1);
  core_->RunBackgroundPass();
  EXPECT_TRUE(a->closed());
  EXPECT_FALSE(AgentInfo("a").connected());
  EXPECT_EQ(Trial().allocation_id(), "");
  EXPECT_EQ(Trial().restarts(), 0) << "losing an agent is no restart";

  auto b = Agent("b", 1);
  agentv1::StartAllocation second = ExpectStart(*b);
  EXPECT_NE(second.allocation_id(), first.allocation_id());
  EXPECT_THAT(second.allocation_id(), ::testing::StartsWith("trial-1.2."));
}

// Review item 6: det-trial's unfinished saves (.tmp-t<ID>-*) are removed by
// the master, the owner of the storage root: when the trial's run ends, and
// at start for trials no allocation runs. A running trial's saves, other
// trials' and finished checkpoints are left alone.
TEST_F(MasterCoreTest, StaleCheckpointTempsAreRemovedWhenARunEndsAndAtStart) {
  namespace fs = std::filesystem;
  auto a = Agent("a", 1);
  CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  const fs::path storage = dir_ / "checkpoints";
  const fs::path mine = storage / ".tmp-t1-0f0e0d0c-dead", other = storage / ".tmp-t77-0f0e0d0c-live",
                 done = storage / "0f0e0d0c-0000-4000-8000-000000000001";
  for (const fs::path& d : {mine, other, done}) {
    fs::create_directories(d / "sub");
    std::ofstream(d / "sub" / "model.pt") << "partial";
  }
  Restart();  // trial 1's allocation is still running (an agent may have it): kept
  EXPECT_TRUE(fs::exists(mine));
  a = Agent("a", 1, {start.allocation_id()});
  apiv1::PauseExperimentRequest pause;
  pause.set_experiment_id(1);
  ASSERT_TRUE(core_->PauseExperiment(pause).ok());
  Exited("a", start.allocation_id());  // the run ends (paused)
  EXPECT_FALSE(fs::exists(mine)) << "removed when the run ended";
  EXPECT_TRUE(fs::exists(other / "sub" / "model.pt")) << "trial 77 is unknown";
  EXPECT_TRUE(fs::exists(done / "sub" / "model.pt"));
  fs::create_directories(mine / "sub");  // left by a run that died with the master down
  std::ofstream(mine / "sub" / "model.pt") << "partial";
  Restart();
  EXPECT_EQ(Trial().allocation_id(), "") << "paused: not running";
  EXPECT_FALSE(fs::exists(mine)) << "removed at start";
  EXPECT_TRUE(fs::exists(other / "sub" / "model.pt"));
  EXPECT_TRUE(fs::exists(done / "sub" / "model.pt"));
}

TEST_F(MasterCoreTest, HeartbeatsKeepAnAgentAndItsAllocation) {
  auto a = Agent("a", 1);
  CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  for (int i = 0; i < 5; ++i) {
    Tick(kHeartbeatTimeoutMs - 1000, "a", {start.allocation_id()});
  }
  EXPECT_FALSE(a->closed());
  EXPECT_TRUE(AgentInfo("a").connected());
  EXPECT_EQ(Trial().allocation_id(), start.allocation_id());
  EXPECT_TRUE(Kills(Drain(*a)).empty());
}

TEST_F(MasterCoreTest, AllocationAnAgentStopsListingIsGivenUpAfterGrace) {
  auto a = Agent("a", 1);
  CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  // Within the grace after its start, not being listed is normal.
  clock_->AdvanceMs(4000);
  Heartbeat("a", {});
  EXPECT_EQ(Trial().allocation_id(), start.allocation_id());
  // First unlisted heartbeat after the grace starts the count; the next one
  // past the grace gives it up, and the trial is placed again.
  clock_->AdvanceMs(2000);
  Heartbeat("a", {});
  EXPECT_EQ(Trial().allocation_id(), start.allocation_id());
  clock_->AdvanceMs(5001);
  Heartbeat("a", {});
  // Given up and placed again at once (its slot is free).
  auto starts = Starts(Drain(*a));
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_THAT(starts[0].allocation_id(), ::testing::StartsWith("trial-1.2."));
  EXPECT_EQ(Trial().allocation_id(), starts[0].allocation_id());
  EXPECT_EQ(Trial().restarts(), 0);
}

TEST_F(MasterCoreTest, PauseThatDoesNotStopInTimeEscalatesToSigkill) {
  auto a = Agent("a", 1);
  int64_t exp = CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  Pause(exp);

  Tick(kStopTimeoutMs, "a", {start.allocation_id()});
  EXPECT_TRUE(Kills(Drain(*a)).empty()) << "not yet past the stop timeout";

  Tick(1, "a", {start.allocation_id()});
  auto kills = Kills(Drain(*a));
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].allocation_id(), start.allocation_id());
  EXPECT_EQ(kills[0].grace_period_seconds(), 0);
  EXPECT_EQ(kills[0].reason(), "stop timeout");
  EXPECT_THAT(TrialLogs(), HasSubstr("did not stop within 60 s; killing it"));

  // Killed on the master's request: the trial is PAUSED, not failed.
  Exited("a", start.allocation_id(), 0, 137);
  EXPECT_EQ(Trial().state(), apiv1::STATE_PAUSED);
  EXPECT_EQ(Trial().restarts(), 0);
}

TEST_F(MasterCoreTest, StopWithinTheTimeoutIsNotEscalated) {
  auto a = Agent("a", 1);
  int64_t exp = CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  Pause(exp);
  Tick(kStopTimeoutMs - 1000, "a", {start.allocation_id()});
  Exited("a", start.allocation_id(), 0, 0);
  Tick(kStopTimeoutMs, "a", {});
  EXPECT_TRUE(Kills(Drain(*a)).empty());
  EXPECT_EQ(Trial().state(), apiv1::STATE_PAUSED);
}

// A kill SIGKILLs at once (no grace period): a SIGTERMed det-trial would
// take it for a preemption and checkpoint, and a kill takes no checkpoint.
TEST_F(MasterCoreTest, KillSigkillsAtOnce) {
  auto a = Agent("a", 1);
  int64_t exp = CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  apiv1::KillExperimentRequest kill;
  kill.set_experiment_id(exp);
  ASSERT_TRUE(core_->KillExperiment(kill).ok());
  auto first = Kills(Drain(*a));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].grace_period_seconds(), 0);
  Exited("a", start.allocation_id(), 0, 137);
  EXPECT_EQ(Trial().state(), apiv1::STATE_CANCELED);
}

// Trial code names its checkpoints: only UUIDs are recorded; GC deletes the
// recorded directories, but one swapped for a symlink (here to the master's
// data dir) is left, never followed.
TEST_F(MasterCoreTest, CheckpointIdsAreUuidsAndGcNeverFollowsASymlink) {
  auto a = Agent("a", 1);
  int64_t exp = CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  auto report = [&](const std::string& uuid, int64_t batches) {
    trialv1::ReportCheckpointRequest req;
    req.set_allocation_id(start.allocation_id());
    req.set_uuid(uuid);
    req.set_total_batches(batches);
    return core_->ReportCheckpoint(req, start.allocation_token()).status();
  };
  for (const char* bad : {"../det.db", "det.db", "checkpoint-1", "0F3C9A1E-5B2D-4C6E-8F10-112233445566"}) {
    absl::Status st = report(bad, 10);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), HasSubstr("uuid"));
  }
  const std::string ck = dir_ / "checkpoints";
  const std::string swapped = "0f3c9a1e-5b2d-4c6e-8f10-000000000001", plain = "0f3c9a1e-5b2d-4c6e-8f10-000000000002";
  for (const std::string& u : {swapped, plain}) {
    std::filesystem::create_directories(ck + "/" + u);
    det::testing::WriteFile(ck + "/" + u + "/w", "w");
  }
  ASSERT_TRUE(report(swapped, 10).ok());
  ASSERT_TRUE(report(plain, 20).ok());
  std::filesystem::remove_all(ck + "/" + swapped);
  std::filesystem::create_directory_symlink(dir_.path(), ck + "/" + swapped);

  apiv1::KillExperimentRequest kill;
  kill.set_experiment_id(exp);
  ASSERT_TRUE(core_->KillExperiment(kill).ok());
  Exited("a", start.allocation_id(), 0, 137);
  apiv1::PatchExperimentRequest patch;
  patch.set_experiment_id(exp);
  patch.mutable_checkpoint_gc_policy()->set_save_trial_latest(0);
  ASSERT_TRUE(core_->PatchExperiment(patch).ok());
  core_->RunBackgroundPass();
  EXPECT_FALSE(std::filesystem::exists(ck + "/" + plain));
  EXPECT_TRUE(std::filesystem::is_symlink(ck + "/" + swapped));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "det.db"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "checkpoints"));
  for (const std::string& u : {swapped, plain}) EXPECT_EQ(core_->store()->GetCheckpoint(u)->state, "DELETED");
}

TEST_F(MasterCoreTest, RendezvousThatNeverCompletesFailsTheAllocation) {
  auto a = Agent("a", 2);
  CreateExperiment(/*slots=*/2);
  agentv1::StartAllocation start = ExpectStart(*a);
  ASSERT_EQ(start.processes_size(), 2);
  EXPECT_EQ(Rendezvous(start, 0).status().code(), absl::StatusCode::kDeadlineExceeded);

  Tick(kRendezvousTimeoutMs, "a", {start.allocation_id()});
  EXPECT_TRUE(Kills(Drain(*a)).empty()) << "not yet past the rendezvous timeout";

  Tick(1, "a", {start.allocation_id()});
  auto kills = Kills(Drain(*a));
  ASSERT_EQ(kills.size(), 1u);
  EXPECT_EQ(kills[0].reason(), "rendezvous timeout");
  EXPECT_EQ(kills[0].grace_period_seconds(), 0);
  auto late = Rendezvous(start, 0);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("1 of 2 ranks reached the rendezvous"));

  // It counts as a failure: restarted from its checkpoint, once.
  Exited("a", start.allocation_id(), 0, 137);
  Exited("a", start.allocation_id(), 1, 137);
  EXPECT_EQ(Trial().restarts(), 1);
  agentv1::StartAllocation again = ExpectStart(*a);
  EXPECT_THAT(again.allocation_id(), ::testing::StartsWith("trial-1.2."));
}

// A trial that fails before its first checkpoint starts over: the log must
// not promise "its latest checkpoint" (issue 45).
TEST_F(MasterCoreTest, RestartWithoutACheckpointSaysItStartsFromTheBeginning) {
  auto a = Agent("a", 1);
  CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  ASSERT_TRUE(Trial().latest_checkpoint_uuid().empty());
  Exited("a", start.allocation_id(), 0, det::kExitTrialError);
  EXPECT_EQ(Trial().restarts(), 1);
  const std::string logs = TrialLogs();
  EXPECT_THAT(logs, HasSubstr("restart 1 of ")) << logs;
  EXPECT_THAT(logs, HasSubstr(" from the beginning (no checkpoint yet)")) << logs;
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("latest checkpoint"))) << logs;
}

// What det-trial reports before it exits: ReportEarlyExit (ERRORED) of
// `start`'s allocation with `message`.
void ReportError(MasterCore& core, const agentv1::StartAllocation& start, const std::string& message) {
  trialv1::ReportEarlyExitRequest req;
  req.set_allocation_id(start.allocation_id());
  req.set_reason(trialv1::EARLY_EXIT_REASON_ERRORED);
  req.set_message(message);
  ASSERT_TRUE(core.ReportEarlyExit(req, start.allocation_token()).ok());
}

// An exception from the trial's constructor or a data loader builder
// (det-trial's exit code 5) is retried once, then the trial is ERROR with the
// exception's text, although max_restarts (3) would allow more (issue 45).
TEST_F(MasterCoreTest, SetupErrorIsRetriedOnceThenTheTrialIsError) {
  auto a = Agent("a", 1);
  CreateExperiment();
  const std::string why = "trial T failed in its constructor: cannot open data file 'train.bin'";
  agentv1::StartAllocation first = ExpectStart(*a);
  ReportError(*core_, first, why);
  Exited("a", first.allocation_id(), 0, det::kExitTrialSetupError);
  EXPECT_EQ(Trial().restarts(), 1);
  EXPECT_THAT(TrialLogs(), HasSubstr("in its constructor or a data loader builder; retried once, as a file system "
                                     "may have been briefly at fault: restart 1 of 3 from the beginning"));
  agentv1::StartAllocation second = ExpectStart(*a);
  ReportError(*core_, second, why);
  Exited("a", second.allocation_id(), 0, det::kExitTrialSetupError);
  EXPECT_EQ(Trial().state(), apiv1::STATE_ERROR);
  EXPECT_EQ(Trial().restarts(), 1);
  EXPECT_EQ(Trial().error_message(), why);
  EXPECT_THAT(TrialLogs(), HasSubstr("in its constructor or a data loader builder again; not retried (1 restart(s) "
                                     "used of max_restarts 3): ERROR"));
  core_->RunBackgroundPass();
  EXPECT_TRUE(Starts(Drain(*a)).empty()) << "exactly 2 attempts";
}

// Only setup errors in a row are final: a run that got past its constructor
// and failed otherwise (exit code 1) gives the next setup error its retry.
TEST_F(MasterCoreTest, OnlyASecondSetupErrorInARowIsFinal) {
  auto a = Agent("a", 1);
  CreateExperiment();
  for (int code : {det::kExitTrialSetupError, det::kExitTrialError, det::kExitTrialSetupError}) {
    agentv1::StartAllocation start = ExpectStart(*a);
    Exited("a", start.allocation_id(), 0, code);
  }
  EXPECT_EQ(Trial().restarts(), 3);
  EXPECT_NE(Trial().state(), apiv1::STATE_ERROR);
  agentv1::StartAllocation fourth = ExpectStart(*a);
  Exited("a", fourth.allocation_id(), 0, det::kExitTrialSetupError);
  EXPECT_EQ(Trial().state(), apiv1::STATE_ERROR);
  EXPECT_EQ(Trial().restarts(), 3);
}

// A distributed trial: rank 1's constructor throws; rank 0 fails after it
// (its broadcast lost the peer) and reports too. The first report is the
// trial's error; the allocation counts as a setup error whichever rank's exit
// arrives first.
TEST_F(MasterCoreTest, DistributedSetupErrorKeepsTheFailedRanksMessage) {
  auto a = Agent("a", 2);
  CreateExperiment(/*slots=*/2);
  const std::string why = "rank 1: trial T failed in its constructor: cannot open data file 'train.bin'";
  for (int attempt = 0; attempt < 2; ++attempt) {
    agentv1::StartAllocation start = ExpectStart(*a);
    ASSERT_EQ(start.processes_size(), 2);
    ReportError(*core_, start, why);
    ReportError(*core_, start, "rank 0: trial T failed in its constructor: Connection closed by peer");
    Exited("a", start.allocation_id(), 0, det::kExitTrialError);
    Exited("a", start.allocation_id(), 1, det::kExitTrialSetupError);
  }
  EXPECT_EQ(Trial().state(), apiv1::STATE_ERROR);
  EXPECT_EQ(Trial().restarts(), 1);
  EXPECT_EQ(Trial().error_message(), why);
}

// max_restarts 0: no retry at all, not even for a setup error.
TEST_F(MasterCoreTest, SetupErrorWithMaxRestartsZeroIsFinal) {
  auto a = Agent("a", 1);
  apiv1::CreateExperimentRequest req;
  std::string config = Config(dir_ / "checkpoints", 1);
  config.replace(config.find("max_restarts: 3"), 15, "max_restarts: 0");
  req.set_config_yaml(config);
  req.set_trial_so(det::testing::FakeTrialSo());
  req.set_activate(true);
  ASSERT_TRUE(core_->CreateExperiment(req).ok());
  agentv1::StartAllocation start = ExpectStart(*a);
  Exited("a", start.allocation_id(), 0, det::kExitTrialSetupError);
  EXPECT_EQ(Trial().state(), apiv1::STATE_ERROR);
  EXPECT_EQ(Trial().restarts(), 0);
  EXPECT_THAT(TrialLogs(), HasSubstr("not retried (0 restart(s) used of max_restarts 0): ERROR"));
}

// Issue 45, must-show 4, at the master's create (det-cli's local mode has its
// own test): type: int bounds that are not integers and type: log bounds
// written as values are refused, naming the field and what it would sample.
TEST_F(MasterCoreTest, CreateRefusesIntAndLogBoundsNamingTheField) {
  const std::string base = Config(dir_ / "checkpoints", 1);
  const std::string at = "  global_batch_size: 16\n";
  ASSERT_NE(base.find(at), std::string::npos);
  const std::pair<std::string, std::string> cases[] = {
      {"  units: {type: int, minval: 8, maxval: 64.5}\n",
       "field 'hyperparameters.units.maxval' must be an integer, got '64.5': type: int draws integers"},
      {"  lr: {type: log, minval: 0.0001, maxval: 0.1}\n",
       "field 'hyperparameters.lr.minval': type: log bounds are exponents of base 10, and minval: 0.0001, "
       "maxval: 0.1 would sample 10^0.0001..10^0.1 = 1.0002..1.2589"}};
  for (const auto& [hparam, error] : cases) {
    std::string config = base;
    config.insert(config.find(at) + at.size(), hparam);
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(config);
    req.set_trial_so(det::testing::FakeTrialSo());
    auto resp = core_->CreateExperiment(req);
    ASSERT_FALSE(resp.ok()) << hparam;
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument) << resp.status();
    EXPECT_THAT(resp.status().message(), HasSubstr(error)) << resp.status();
  }
  EXPECT_EQ(core_->GetExperiments(apiv1::GetExperimentsRequest())->experiments_size(), 0);
}

TEST_F(MasterCoreTest, CompletedRendezvousIsNotTimedOut) {
  auto a = Agent("a", 2);
  CreateExperiment(/*slots=*/2);
  agentv1::StartAllocation start = ExpectStart(*a);
  EXPECT_EQ(Rendezvous(start, 0).status().code(), absl::StatusCode::kDeadlineExceeded);
  clock_->AdvanceMs(kRendezvousTimeoutMs - 1);
  auto both = Rendezvous(start, 1);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->rendezvous().ranks(1).port(), 30001);
  Tick(kRendezvousTimeoutMs, "a", {start.allocation_id()});
  EXPECT_TRUE(Kills(Drain(*a)).empty());
  EXPECT_EQ(Trial().allocation_id(), start.allocation_id());
}

TEST_F(MasterCoreTest, AgentReattachesItsAllocationAfterAMasterRestart) {
  auto a = Agent("a", 1);
  CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  Restart();
  // The restarted master waits for the agent, which still runs it.
  clock_->AdvanceMs(kHeartbeatTimeoutMs - 1000);
  core_->RunBackgroundPass();
  EXPECT_EQ(Trial().allocation_id(), start.allocation_id());
  auto again = Agent("a", 1, {start.allocation_id()});
  EXPECT_EQ(registered_["a"].kill_allocation_ids_size(), 0);
  Tick(kHeartbeatTimeoutMs - 1000, "a", {start.allocation_id()});
  EXPECT_TRUE(Starts(Drain(*again)).empty());
  EXPECT_EQ(Trial().allocation_id(), start.allocation_id());
  EXPECT_EQ(Trial().restarts(), 0);
  // Its token still works for the reattached processes.
  trialv1::GetNextOperationRequest next;
  next.set_allocation_id(start.allocation_id());
  EXPECT_TRUE(core_->GetNextOperation(next, start.allocation_token()).ok());
}

TEST_F(MasterCoreTest, AllocationIsGivenUpWhenItsAgentDoesNotReturnAfterARestart) {
  auto a = Agent("a", 1);
  CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  Restart();
  clock_->AdvanceMs(kHeartbeatTimeoutMs + 1);
  core_->RunBackgroundPass();
  EXPECT_EQ(Trial().allocation_id(), "");
  EXPECT_EQ(Trial().restarts(), 0);
  // When the agent comes back running it, the stale allocation is killed
  // and the trial starts again.
  auto back = Agent("a", 1, {start.allocation_id()});
  ASSERT_EQ(registered_["a"].kill_allocation_ids_size(), 1);
  EXPECT_EQ(registered_["a"].kill_allocation_ids(0), start.allocation_id());
  core_->RunBackgroundPass();
  EXPECT_TRUE(Starts(Drain(*back)).empty()) << "its slot is taken until the zombie is gone";
  Heartbeat("a", {});
  agentv1::StartAllocation again = ExpectStart(*back);
  EXPECT_THAT(again.allocation_id(), ::testing::StartsWith("trial-1.2."));
}

TEST_F(MasterCoreTest, DisconnectedAgentHasTheHeartbeatTimeoutToComeBack) {
  auto a = Agent("a", 1);
  CreateExperiment();
  agentv1::StartAllocation start = ExpectStart(*a);
  core_->DetachAgent(a);
  clock_->AdvanceMs(kHeartbeatTimeoutMs - 1);
  core_->RunBackgroundPass();
  EXPECT_EQ(Trial().allocation_id(), start.allocation_id());
  // It re-registers with its previous session and what it runs: reattached.
  agentv1::RegisterAgentRequest req;
  req.set_agent_id("a");
  req.set_version(det::kDetVersion);
  req.add_devices()->set_id(0);
  req.add_running_allocation_ids(start.allocation_id());
  req.set_previous_session_token(registered_["a"].session_token());
  req.set_agent_credential(credentials_["a"]);
  auto resp = core_->RegisterAgent(req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->kill_allocation_ids_size(), 0);
  clock_->AdvanceMs(kHeartbeatTimeoutMs - 1);
  core_->RunBackgroundPass();
  EXPECT_EQ(Trial().allocation_id(), start.allocation_id());
}

// A client's trial_so_sha256 names a file in the artifact store: it must
// not name one anywhere else.
TEST_F(MasterCoreTest, TrialSoHashThatIsNoSha256IsRefused) {
  det::testing::WriteFile(dir_ / "probe.so", det::testing::FakeTrialSo());
  apiv1::CreateExperimentRequest req;
  req.set_config_yaml(Config(dir_ / "checkpoints", 1));
  for (const std::string& bad : {std::string("../probe"), std::string("/etc/passwd"), std::string(64, 'A')}) {
    req.set_trial_so_sha256(bad);
    auto resp = core_->CreateExperiment(req);
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(resp.status().message(), HasSubstr("trial_so_sha256")) << bad;
  }
  req.set_trial_so_sha256(std::string(64, 'a'));
  EXPECT_THAT(core_->CreateExperiment(req).status().message(), HasSubstr("was never uploaded"));
  EXPECT_EQ(core_->GetExperiments(apiv1::GetExperimentsRequest())->experiments_size(), 0);
}

// A write that fails inside a core call rolls the whole call back: the
// caller gets the error, the agent messages it queued are never sent (no
// agent runs what the database does not know), and the master's state is
// reloaded so that it agrees with the database again.
TEST_F(MasterCoreTest, FailedCommitSendsNothingToAgentsAndLeavesNoTrace) {
  auto a = Agent("a", 1);
  // Every allocation row the master writes from now on fails (a trigger on
  // the real database file, through a second connection).
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "det.db").c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TRIGGER fail_allocations BEFORE INSERT ON allocations "
                         "BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
                         nullptr, nullptr, &error),
            SQLITE_OK)
      << (error ? error : "");
  // Creating the experiment schedules its trial at once, in the same call.
  apiv1::CreateExperimentRequest create;
  create.set_config_yaml(Config(dir_ / "checkpoints", 1));
  create.set_trial_so(det::testing::FakeTrialSo());
  create.set_activate(true);
  auto created = core_->CreateExperiment(create);
  EXPECT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), HasSubstr("injected failure"));
  core_->RunBackgroundPass();
  EXPECT_TRUE(Starts(Drain(*a)).empty()) << "a StartAllocation whose allocation was never stored was sent";
  EXPECT_TRUE(core_->store()->ListAllocations()->empty());
  EXPECT_TRUE(core_->store()->ListExperiments(ExperimentFilter())->empty());
  EXPECT_EQ(core_->GetExperiments(apiv1::GetExperimentsRequest())->experiments_size(), 0);

  // Once the database takes writes again, so does the master.
  ASSERT_EQ(sqlite3_exec(db, "DROP TRIGGER fail_allocations;", nullptr, nullptr, &error), SQLITE_OK);
  sqlite3_close(db);
  CreateExperiment();
  auto starts = Starts(Drain(*a));
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(core_->store()->ListAllocations()->size(), 1u);
  EXPECT_EQ(Trial().allocation_id(), starts[0].allocation_id());
}

// An agent id's first registration issues a credential (stored hashed);
// later registrations need it, also after a master restart; an operator's
// reset lets the next registration get a new one.
TEST_F(MasterCoreTest, KnownAgentIdNeedsItsCredential) {
  auto a = Agent("a", 1);
  const std::string credential = credentials_["a"];
  ASSERT_EQ(credential.size(), 64u);
  core_->DetachAgent(a);
  agentv1::RegisterAgentRequest req;
  req.set_agent_id("a");
  req.set_version(det::kDetVersion);
  req.add_devices()->set_id(0);
  auto none = core_->RegisterAgent(req);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kPermissionDenied) << none.status();
  req.set_agent_credential(std::string(64, '0'));
  EXPECT_EQ(core_->RegisterAgent(req).status().code(), absl::StatusCode::kPermissionDenied);
  req.set_agent_credential(credential);
  auto good = core_->RegisterAgent(req);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->agent_credential().empty()) << "issued only once";

  Restart();
  req.clear_agent_credential();
  EXPECT_EQ(core_->RegisterAgent(req).status().code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(core_->ResetAgentCredential("a").ok());
  auto fresh = core_->RegisterAgent(req);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->agent_credential().size(), 64u);
  EXPECT_NE(fresh->agent_credential(), credential);
  EXPECT_EQ(core_->ResetAgentCredential("nobody").code(), absl::StatusCode::kNotFound);
}

// A process state change of an allocation placed on another agent (or of a
// rank it does not run) is ignored; a repeated TERMINATED counts once.
TEST_F(MasterCoreTest, AgentMessagesCountOnlyForItsOwnAllocations) {
  auto a = Agent("a", 1);
  auto b = Agent("b", 1);
  CreateExperiment();
  core_->RunBackgroundPass();
  std::string alloc = Trial().allocation_id();
  ASSERT_FALSE(alloc.empty());
  std::string runner;
  auto agents = core_->GetAgents(apiv1::GetAgentsRequest());
  ASSERT_TRUE(agents.ok());
  for (const auto& ag : agents->agents()) {
    for (const auto& id : ag.allocation_ids()) {
      if (id == alloc) runner = ag.id();
    }
  }
  ASSERT_FALSE(runner.empty());
  const std::string other = runner == "a" ? "b" : "a";
  Exited(other, alloc, 0, 1);
  Exited(runner, alloc, 5, 1);
  EXPECT_EQ(Trial().allocation_id(), alloc);
  EXPECT_EQ(Trial().restarts(), 0);
}

}  // namespace
}  // namespace det::master
