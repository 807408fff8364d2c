// A gtest fixture for MasterCore tests without processes: a MasterCore on a
// SQLite file in a temp dir of its own, no background thread (a test runs
// RunBackgroundPass when it says so), and a FakeClock unless a test sets
// clock_ to null (then the system clock). Restart() is a master restart on
// the same store. Tests call the core's entry points directly; Exited, Trial
// and TrialLogs are the agent report and the reads most tests share;
// AttachOneSlotAgent, CreateActiveExperiment, Starts and Train the usual way
// to a running trial.
#ifndef DET_MASTER_CORE_CORE_TEST_FIXTURE_H_
#define DET_MASTER_CORE_CORE_TEST_FIXTURE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/det_version.h"
#include "master/core/clock.h"
#include "master/core/master_core.h"
#include "tests/test_util.h"

namespace det::master {

class MasterCoreFixture : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  // Opens a MasterCore on dir_ with the options above and Customize's.
  void Open() {
    MasterOptions options;
    options.data_dir = dir_.path();
    options.clock = clock_;
    options.background_thread = false;
    Customize(&options);
    auto core = MasterCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
    Opened();
  }
  void Restart() {
    core_.reset();
    Open();
  }
  // More options for every Open (timeouts, pools, ...).
  virtual void Customize(MasterOptions* /*options*/) {}
  // Runs after every Open, with core_ set.
  virtual void Opened() {}

  // Registers agent `agent_id` of this release on host localhost with one
  // slot (device 0) and attaches it: its session in *session.
  void AttachOneSlotAgent(std::shared_ptr<AgentSession>* session, const std::string& agent_id = "a") {
    agentv1::RegisterAgentRequest reg;
    reg.set_agent_id(agent_id);
    reg.set_version(det::kDetVersion);
    reg.set_hostname("localhost");
    reg.add_devices()->set_id(0);
    auto registered = core_->RegisterAgent(reg);
    ASSERT_TRUE(registered.ok()) << registered.status();
    auto attached = core_->AttachAgent(registered->session_token());
    ASSERT_TRUE(attached.ok()) << attached.status();
    *session = *std::move(attached);
  }

  // An experiment of `yaml` with the fake trial.so, activated: its id, or 0
  // (a failure) when refused.
  int64_t CreateActiveExperiment(const std::string& yaml) {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(yaml);
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(true);
    auto resp = core_->CreateExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->experiment().id() : 0;
  }

  // The StartAllocations queued for `session` so far.
  static std::vector<agentv1::StartAllocation> Starts(AgentSession& session) {
    std::vector<agentv1::StartAllocation> out;
    agentv1::MasterMessage msg;
    while (session.Pop(&msg, std::chrono::milliseconds(0))) {
      if (msg.has_start_allocation()) out.push_back(msg.start_allocation());
    }
    return out;
  }

  // The runtime of `start` reports a training row at `batches` (loss 1.0).
  void Train(const agentv1::StartAllocation& start, int64_t batches) {
    trialv1::ReportTrainingMetricsRequest req;
    req.set_allocation_id(start.allocation_id());
    auto* row = req.add_rows();
    row->set_total_batches(batches);
    (*row->mutable_metrics())["loss"] = 1.0;
    auto resp = core_->ReportTrainingMetrics(req, start.allocation_token());
    ASSERT_TRUE(resp.ok()) << resp.status();
  }

  // Agent `agent_id` reports that rank `rank` of `allocation_id` exited with
  // `exit_code`.
  void Exited(const std::string& agent_id, const std::string& allocation_id, int rank = 0, int exit_code = 0) {
    agentv1::AgentMessage msg;
    auto* ps = msg.mutable_process_state();
    ps->set_allocation_id(allocation_id);
    ps->set_rank(rank);
    ps->set_state(agentv1::PROCESS_STATE_TERMINATED);
    ps->set_exit_code(exit_code);
    core_->HandleAgentMessage(agent_id, msg);
  }

  // GetTrial's trial (trial 1 is the first experiment's first trial).
  apiv1::Trial Trial(int64_t id = 1) {
    apiv1::GetTrialRequest req;
    req.set_trial_id(id);
    auto resp = core_->GetTrial(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->trial() : apiv1::Trial();
  }

  // The trial's first 1000 log lines, one message a line.
  std::string TrialLogs(int64_t trial_id = 1) {
    apiv1::TrialLogsRequest req;
    req.set_trial_id(trial_id);
    auto batch = core_->ReadTrialLogs(req, 0, 1000);
    EXPECT_TRUE(batch.ok()) << batch.status();
    std::string out;
    if (batch.ok()) {
      for (const auto& l : batch->logs.logs()) absl::StrAppend(&out, l.message(), "\n");
    }
    return out;
  }

  det::testing::TempDir dir_;
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::unique_ptr<MasterCore> core_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_CORE_TEST_FIXTURE_H_
