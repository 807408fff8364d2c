// Agent against an in-process fake master (AgentService on 127.0.0.1:0).
#include "agent/agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "agent/artifact_cache.h"
#include "agent/trial_env.h"
#include "common/det_version.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

namespace fs = std::filesystem;
namespace av1 = det::agent::v1;

class FakeMaster final : public av1::AgentService::Service {
 public:
  grpc::Status RegisterAgent(grpc::ServerContext*, const av1::RegisterAgentRequest* req,
                             av1::RegisterAgentResponse* resp) override {
    absl::MutexLock lock(&mu_);
    registrations_.push_back(*req);
    if (req->agent_id() == reject_id_) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          "agent " + req->agent_id() + " is already connected");
    }
    if (req->agent_id() == "other-release") {  // a master of another release (master/core/agent_version.h)
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "agent 'other-release' runs det-cpp " + req->version() + " but this master runs det-cpp 9.9.0");
    }
    if (!issue_credential_.empty()) {
      // A real master: issued once, required from then on.
      if (credential_issued_ && req->agent_credential() != issue_credential_) {
        return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "wrong per-agent credential");
      }
      if (!credential_issued_) resp->set_agent_credential(issue_credential_);
      credential_issued_ = true;
    }
    token_ = "tok-" + std::to_string(registrations_.size());
    resp->set_session_token(token_);
    resp->set_heartbeat_interval_ms(100);
    resp->set_heartbeat_timeout_ms(1000);
    resp->set_master_id("fake");
    resp->set_enabled(true);
    return grpc::Status::OK;
  }

  grpc::Status Connect(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<av1::MasterMessage, av1::AgentMessage>* stream)
      override {
    {
      absl::MutexLock lock(&mu_);
      ++connects_;
      if (!Authorized(ctx)) {
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad session token");
      }
      ++stream_generation_;
    }
    int generation;
    {
      absl::MutexLock lock(&mu_);
      generation = stream_generation_;
    }
    bool reader_done = false;
    std::thread reader([&] {
      av1::AgentMessage m;
      while (stream->Read(&m)) {
        absl::MutexLock lock(&mu_);
        received_.push_back(m);
      }
      absl::MutexLock lock(&mu_);
      reader_done = true;
    });
    grpc::Status result = grpc::Status::OK;
    while (true) {
      av1::MasterMessage out;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return reader_done || !outbox_.empty() || break_stream_ || generation != stream_generation_;
        };
        mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(100));
        if (break_stream_) {
          break_stream_ = false;
          result = break_status_;
          break;
        }
        if (reader_done || ctx->IsCancelled()) break;
        if (outbox_.empty()) continue;
        out = outbox_.front();
        outbox_.pop_front();
      }
      stream->Write(out);
    }
    ctx->TryCancel();
    reader.join();
    return result;
  }

  grpc::Status FetchArtifact(grpc::ServerContext* ctx, const av1::FetchArtifactRequest* req,
                             grpc::ServerWriter<av1::FetchArtifactResponse>* writer) override {
    std::string data;
    {
      absl::MutexLock lock(&mu_);
      if (!Authorized(ctx)) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
      ++fetches_;
      auto it = artifacts_.find(req->sha256());
      if (it == artifacts_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no artifact");
      data = it->second;
    }
    for (size_t off = 0; off < data.size(); off += 5) {
      av1::FetchArtifactResponse r;
      r.set_offset(static_cast<int64_t>(off));
      r.set_total_size(static_cast<int64_t>(data.size()));
      r.set_data(data.substr(off, 5));
      writer->Write(r);
    }
    return grpc::Status::OK;
  }

  bool Authorized(grpc::ServerContext* ctx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto md = ctx->client_metadata();
    auto it = md.find("authorization");
    return it != md.end() && !token_.empty() &&
           std::string(it->second.data(), it->second.size()) == "Bearer " + token_;
  }

  void Send(av1::MasterMessage m) {
    absl::MutexLock lock(&mu_);
    outbox_.push_back(std::move(m));
  }

  // Waits (up to 20 s) until pred() holds under the lock.
  template <typename Pred>
  bool WaitUntil(Pred pred) {
    absl::MutexLock lock(&mu_);
    auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pred(); };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), absl::Seconds(20));
  }

  // All process state changes of `alloc` received so far.
  std::vector<av1::ProcessStateChange> States(const std::string& alloc)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<av1::ProcessStateChange> out;
    for (const auto& m : received_) {
      if (m.has_process_state() && m.process_state().allocation_id() == alloc) {
        out.push_back(m.process_state());
      }
    }
    return out;
  }
  bool HasState(const std::string& alloc, av1::ProcessState s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& c : States(alloc)) {
      if (c.state() == s) return true;
    }
    return false;
  }
  std::vector<det::api::v1::TaskLogLine> Logs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<det::api::v1::TaskLogLine> out;
    for (const auto& m : received_) {
      if (m.has_logs()) out.insert(out.end(), m.logs().logs().begin(), m.logs().logs().end());
    }
    return out;
  }
  const av1::CommandResult* Result(int64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& m : received_) {
      if (m.has_command_result() && m.command_result().seq() == seq) return &m.command_result();
    }
    return nullptr;
  }
  int Heartbeats() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int n = 0;
    for (const auto& m : received_) n += m.has_heartbeat() ? 1 : 0;
    return n;
  }

  absl::Mutex mu_;
  std::string reject_id_ ABSL_GUARDED_BY(mu_);
  std::string issue_credential_ ABSL_GUARDED_BY(mu_);  // "": issue none
  bool credential_issued_ ABSL_GUARDED_BY(mu_) = false;
  std::string token_ ABSL_GUARDED_BY(mu_);
  std::vector<av1::RegisterAgentRequest> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<av1::AgentMessage> received_ ABSL_GUARDED_BY(mu_);
  std::deque<av1::MasterMessage> outbox_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> artifacts_ ABSL_GUARDED_BY(mu_);
  int connects_ ABSL_GUARDED_BY(mu_) = 0;
  int fetches_ ABSL_GUARDED_BY(mu_) = 0;
  int stream_generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool break_stream_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status break_status_ ABSL_GUARDED_BY(mu_);
};

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "det-agent-test-XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&master_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    StopAgent();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    fs::remove_all(dir_);
  }

  AgentOptions Options(const std::string& id) {
    AgentOptions o;
    o.master_address = "127.0.0.1:" + std::to_string(port_);
    o.agent_id = id;
    o.hostname = "testhost";
    o.work_dir = dir_ + "/work";
    o.det_trial_path = dir_ + "/det-trial.sh";
    for (int i = 0; i < 2; ++i) {
      det::api::v1::Device d;
      d.set_id(i);
      d.set_type(det::api::v1::DEVICE_TYPE_CPU);
      o.devices.push_back(d);
    }
    o.backoff_initial = absl::Milliseconds(20);
    o.backoff_max = absl::Milliseconds(200);
    return o;
  }

  void WriteScript(const std::string& body) {
    const std::string path = dir_ + "/det-trial.sh";
    std::ofstream(path) << "#!/bin/sh\n" << body;
    chmod(path.c_str(), 0755);
  }

  void StartAgent(AgentOptions o) {
    agent_ = std::make_unique<Agent>(std::move(o));
    runner_ = std::thread([this] { run_status_ = agent_->Run(); });
  }
  void StopAgent() {
    if (agent_ == nullptr) return;
    agent_->Shutdown();
    runner_.join();
    agent_.reset();
  }

  av1::MasterMessage StartMessage(int64_t seq, const std::string& alloc, const std::string& so) {
    av1::MasterMessage m;
    m.set_seq(seq);
    auto* s = m.mutable_start_allocation();
    s->set_allocation_id(alloc);
    s->set_task_id("task-" + alloc);
    s->set_trial_id(7);
    s->set_experiment_id(3);
    s->set_allocation_token("secret-token");
    s->mutable_trial_so()->set_sha256(Sha256Hex(so));
    s->mutable_trial_so()->set_size_bytes(static_cast<int64_t>(so.size()));
    s->set_config_yaml("name: test\n");
    (*s->mutable_env())["COMMON"] = "common";
    s->set_master_address("trial-master:1234");
    auto* p = s->add_processes();
    p->set_rank(0);
    p->set_local_rank(0);
    p->add_device_ids(1);
    (*p->mutable_env())["PER_RANK"] = "r0";
    {
      absl::MutexLock lock(&master_.mu_);
      master_.artifacts_[Sha256Hex(so)] = so;
    }
    return m;
  }

  std::string dir_;
  int port_ = 0;
  FakeMaster master_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Agent> agent_;
  std::thread runner_;
  absl::Status run_status_;
};

TEST_F(AgentTest, RegistersAndHeartbeats) {
  StartAgent(Options("agent-1"));
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Heartbeats() >= 2; }));
  absl::MutexLock lock(&master_.mu_);
  ASSERT_GE(master_.registrations_.size(), 1u);
  const auto& reg = master_.registrations_[0];
  EXPECT_EQ(reg.agent_id(), "agent-1");
  EXPECT_EQ(reg.hostname(), "testhost");
  ASSERT_EQ(reg.addresses_size(), 1);
  EXPECT_EQ(reg.resource_pool(), "default");
  ASSERT_EQ(reg.devices_size(), 2);
  EXPECT_EQ(reg.devices(1).id(), 1);
  EXPECT_EQ(reg.devices(1).type(), det::api::v1::DEVICE_TYPE_CPU);
  EXPECT_TRUE(reg.previous_session_token().empty());
}

TEST_F(AgentTest, RunsAllocationAndReportsExitAndLogs) {
  WriteScript(
      "echo \"argv $1 $(basename $2)\"\n"
      "echo \"rank=$DET_RANK local=$DET_LOCAL_RANK alloc=$DET_ALLOCATION_ID "
      "token=$(cat <&$DET_ALLOCATION_TOKEN_FD) env_token=[$DET_ALLOCATION_TOKEN] trial=$DET_TRIAL_ID "
      "exp=$DET_EXPERIMENT_ID\"\n"
      "echo \"master=$DET_MASTER agent=$DET_AGENT_ID common=$COMMON per=$PER_RANK "
      "cuda=[$CUDA_VISIBLE_DEVICES]\"\n"
      "echo \"config=$(cat $DET_CONFIG) cwd=$(basename $(pwd)) so=$(cat $DET_TRIAL_SO)\"\n"
      "echo oops >&2\n"
      "exit 3\n");
  StartAgent(Options("agent-1"));
  const std::string so = "fake trial.so bytes, served in 5-byte chunks";
  master_.Send(StartMessage(1, "alloc-1", so));
  ASSERT_TRUE(master_.WaitUntil(
      [&] { return master_.HasState("alloc-1", av1::PROCESS_STATE_TERMINATED); }));
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Result(1) != nullptr; }));

  absl::MutexLock lock(&master_.mu_);
  EXPECT_EQ(master_.Result(1)->code(), 0) << master_.Result(1)->message();
  auto states = master_.States("alloc-1");
  std::vector<av1::ProcessState> seq;
  for (const auto& s : states) seq.push_back(s.state());
  EXPECT_EQ(seq, (std::vector<av1::ProcessState>{
                     av1::PROCESS_STATE_PULLING, av1::PROCESS_STATE_STARTING,
                     av1::PROCESS_STATE_RUNNING, av1::PROCESS_STATE_TERMINATED}));
  EXPECT_GT(states[2].pid(), 0);
  ASSERT_TRUE(states[3].has_exit_code());
  EXPECT_EQ(states[3].exit_code(), 3);
  EXPECT_FALSE(states[3].has_signal_number());

  std::vector<std::string> out;
  std::vector<std::string> err;
  for (const auto& l : master_.Logs()) {
    EXPECT_EQ(l.allocation_id(), "alloc-1");
    EXPECT_EQ(l.trial_id(), 7);
    EXPECT_EQ(l.rank(), 0);
    EXPECT_EQ(l.source(), "runtime");
    EXPECT_GT(l.timestamp().seconds(), 0);
    (l.stdtype() == det::api::v1::STD_TYPE_STDERR ? err : out).push_back(l.message());
  }
  EXPECT_EQ(out, (std::vector<std::string>{
                     "argv --managed " + Sha256Hex(so) + ".so",
                     "rank=0 local=0 alloc=alloc-1 token=secret-token env_token=[] trial=7 exp=3",
                     "master=trial-master:1234 agent=agent-1 common=common per=r0 cuda=[]",
                     "config=name: test cwd=alloc-1 so=" + so}));
  EXPECT_EQ(err, std::vector<std::string>{"oops"});
  EXPECT_EQ(master_.fetches_, 1);
  EXPECT_TRUE(fs::exists(dir_ + "/work/cache/" + Sha256Hex(so) + ".so"));
}

// StartAllocation.run_as_uid/gid (issue 46): as root the agent runs the rank
// as that uid and gid with no supplementary groups, in a directory of its
// own (0700); uid 0 is refused.
TEST_F(AgentTest, RunsTheRankAsTheOwnersUid) {
  ASSERT_EQ(geteuid(), 0u) << "running ranks as another uid needs root; CI runs agent_test as root";
  ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);  // the uid reaches the script and its directory
  WriteScript("echo \"uid=$(id -u) gid=$(id -g) groups=$(id -G) umask=$(umask)\"\n");
  StartAgent(Options("agent-1"));
  av1::MasterMessage start = StartMessage(1, "alloc-u", "trial of a tenant");
  start.mutable_start_allocation()->set_run_as_uid(200777);
  start.mutable_start_allocation()->set_run_as_gid(200777);
  master_.Send(start);
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.HasState("alloc-u", av1::PROCESS_STATE_TERMINATED); }));
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/work/allocations/alloc-u").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 200777u);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  av1::MasterMessage root = StartMessage(2, "alloc-root", "trial of a tenant");
  root.mutable_start_allocation()->set_run_as_uid(0);
  root.mutable_start_allocation()->set_run_as_gid(0);
  master_.Send(root);
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Result(2) != nullptr; }));
  absl::MutexLock lock(&master_.mu_);
  std::vector<std::string> out;
  for (const auto& l : master_.Logs()) {
    if (l.allocation_id() == "alloc-u") out.push_back(l.message());
  }
  EXPECT_EQ(out, std::vector<std::string>{"uid=200777 gid=200777 groups=200777 umask=0007"});
  EXPECT_EQ(master_.Result(2)->code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(master_.Result(2)->message().find("never run as root"), std::string::npos) << master_.Result(2)->message();
}

// Issue 49: a warm start from another user's checkpoint in S3 is not staged
// by the agent (det-trial downloads it with the master's credentials); the
// allocation starts without DET_WARM_START_DIR. The agent used to refuse it
// (StageCheckpoint of "s3://..." is not an absolute path).
TEST_F(AgentTest, AnS3WarmStartSourceIsLeftToTheTrial) {
  ASSERT_EQ(geteuid(), 0u) << "running ranks as another uid needs root; CI runs agent_test as root";
  ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
  WriteScript("echo \"warm=${DET_WARM_START_DIR-unset} storage=$DET_CHECKPOINT_STORAGE_PATH\"\n");
  StartAgent(Options("agent-1"));
  av1::MasterMessage start = StartMessage(1, "alloc-s3", "trial of a tenant");
  start.mutable_start_allocation()->set_run_as_uid(200777);
  start.mutable_start_allocation()->set_run_as_gid(200777);
  start.mutable_start_allocation()->set_checkpoint_storage_path("s3://det-test/team-a");
  start.mutable_start_allocation()->set_warm_start_source_path(
      "s3://det-test/team-b/0b7c4a2e-5d1f-4c3a-9e8b-2f6d1a0c9e77");
  master_.Send(start);
  auto output = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(master_.mu_) {
    std::vector<std::string> out;
    for (const auto& l : master_.Logs()) {
      if (l.allocation_id() == "alloc-s3") out.push_back(l.message());
    }
    return out;
  };
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Result(1) != nullptr; }));
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Result(1)->code() != 0 || !output().empty(); }));
  absl::MutexLock lock(&master_.mu_);
  EXPECT_EQ(master_.Result(1)->code(), 0) << master_.Result(1)->message();
  EXPECT_EQ(output(), std::vector<std::string>{"warm=unset storage=s3://det-test/team-a"});
}

TEST_F(AgentTest, KillAllocationEscalatesAndResentStartIsOk) {
  WriteScript("trap 'echo got-term' TERM\necho ready\nwhile :; do sleep 0.05; done\n");
  StartAgent(Options("agent-1"));
  const std::string so = "another fake trial";
  master_.Send(StartMessage(1, "alloc-k", so));
  ASSERT_TRUE(master_.WaitUntil([&] {
    for (const auto& l : master_.Logs()) {
      if (l.message() == "ready") return true;
    }
    return false;
  }));
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Result(1) != nullptr; }));
  master_.Send(StartMessage(2, "alloc-k", so));  // resent command: already running
  ASSERT_TRUE(master_.WaitUntil([&] {
    for (const auto& m : master_.received_) {
      if (m.has_heartbeat() && m.heartbeat().running_allocation_ids_size() == 1) return true;
    }
    return false;
  }));
  av1::MasterMessage kill;
  kill.set_seq(3);
  kill.mutable_kill_allocation()->set_allocation_id("alloc-k");
  kill.mutable_kill_allocation()->set_grace_period_seconds(1);
  master_.Send(kill);
  av1::MasterMessage unknown;
  unknown.set_seq(4);
  unknown.mutable_signal_allocation()->set_allocation_id("nope");
  unknown.mutable_signal_allocation()->set_signal_number(SIGTERM);
  master_.Send(unknown);
  ASSERT_TRUE(master_.WaitUntil(
      [&] { return master_.HasState("alloc-k", av1::PROCESS_STATE_TERMINATED); }));
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Result(4) != nullptr; }));
  absl::MutexLock lock(&master_.mu_);
  EXPECT_EQ(master_.Result(2)->code(), 0);
  EXPECT_EQ(master_.Result(3)->code(), 0);
  EXPECT_EQ(master_.Result(4)->code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  auto states = master_.States("alloc-k");
  EXPECT_EQ(states.back().signal_number(), SIGKILL);
  bool got_term = false;
  for (const auto& l : master_.Logs()) got_term = got_term || l.message() == "got-term";
  EXPECT_TRUE(got_term);
}

TEST_F(AgentTest, ReconnectsAndReRegistersKeepingProcesses) {
  WriteScript("echo ready\nwhile :; do sleep 0.05; done\n");
  StartAgent(Options("agent-1"));
  master_.Send(StartMessage(1, "alloc-r", "so bytes"));
  ASSERT_TRUE(master_.WaitUntil(
      [&] { return master_.HasState("alloc-r", av1::PROCESS_STATE_RUNNING); }));
  // A broken stream: the agent reconnects with the same token.
  {
    absl::MutexLock lock(&master_.mu_);
    master_.break_stream_ = true;
    master_.break_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "blip");
  }
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.stream_generation_ >= 2; }));
  // The session dies (master restart): UNAUTHENTICATED -> re-register.
  {
    absl::MutexLock lock(&master_.mu_);
    master_.token_ = "forgotten";
    master_.break_stream_ = true;
    master_.break_status_ = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "session dead");
  }
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.registrations_.size() >= 2; }));
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.stream_generation_ >= 3; }));
  absl::MutexLock lock(&master_.mu_);
  const auto& re = master_.registrations_[1];
  EXPECT_EQ(re.previous_session_token(), "tok-1");
  ASSERT_EQ(re.running_allocation_ids_size(), 1);
  EXPECT_EQ(re.running_allocation_ids(0), "alloc-r");
  EXPECT_FALSE(master_.HasState("alloc-r", av1::PROCESS_STATE_TERMINATED));
}

TEST_F(AgentTest, DuplicateIdIsRejected) {
  {
    absl::MutexLock lock(&master_.mu_);
    master_.reject_id_ = "dup";
  }
  Agent agent(Options("dup"));
  absl::Status st = agent.Run();
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "already connected")) << st;
}

// Issue 47: the agent reports its release, and a master of another release
// refusing it ends Run() at once (det-agent logs it and exits 1) instead of
// retrying forever.
TEST_F(AgentTest, AVersionRefusalEndsTheAgentWithoutRetrying) {
  Agent agent(Options("other-release"));
  absl::Status st = agent.Run();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), std::string("runs det-cpp ") + kDetVersion)) << st;
  absl::MutexLock lock(&master_.mu_);
  ASSERT_EQ(master_.registrations_.size(), 1u);
  EXPECT_EQ(master_.registrations_[0].version(), kDetVersion);
}

TEST_F(AgentTest, ArtifactFetchFailureFailsTheStart) {
  WriteScript("exit 0\n");
  StartAgent(Options("agent-1"));
  auto m = StartMessage(1, "alloc-f", "bytes");
  m.mutable_start_allocation()->set_trial_so_name("my_trial.so");
  {
    absl::MutexLock lock(&master_.mu_);
    master_.artifacts_.clear();
  }
  master_.Send(m);
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Result(1) != nullptr; }));
  absl::MutexLock lock(&master_.mu_);
  EXPECT_EQ(master_.Result(1)->code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  // The user's file, not the cache's hash (issue 45).
  EXPECT_THAT(master_.Result(1)->message(), ::testing::HasSubstr("artifact fetch failed for my_trial.so: "));
  EXPECT_TRUE(master_.HasState("alloc-f", av1::PROCESS_STATE_TERMINATED));
}

// Allocation ids and artifact hashes come from the master and name files on
// this node: one that would lead outside the agent's work dir (a traversal,
// or a symlink planted in allocations/) is refused before anything is
// fetched, written or run, and every rank of it ends.
TEST_F(AgentTest, RefusesIdsAndHashesThatLeadOutsideTheWorkDir) {
  WriteScript("echo ran\nexit 0\n");
  fs::create_directories(dir_ + "/outside");
  fs::create_directories(dir_ + "/work/allocations");
  fs::create_directory_symlink(dir_ + "/outside", dir_ + "/work/allocations/alloc-link");
  StartAgent(Options("agent-1"));
  master_.Send(StartMessage(1, "../escaped", "so bytes"));
  master_.Send(StartMessage(2, "..", "so bytes"));
  av1::MasterMessage bad_hash = StartMessage(3, "alloc-h", "so bytes");
  bad_hash.mutable_start_allocation()->mutable_trial_so()->set_sha256("../../outside/x");
  master_.Send(bad_hash);
  master_.Send(StartMessage(4, "alloc-link", "so bytes"));
  ASSERT_TRUE(master_.WaitUntil([&] {
    for (int64_t seq = 1; seq <= 4; ++seq) {
      if (master_.Result(seq) == nullptr) return false;
    }
    return true;
  }));
  absl::MutexLock lock(&master_.mu_);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"../escaped", "allocation_id"}, {"..", "allocation_id"}, {"alloc-h", "trial_so.sha256"},
      {"alloc-link", "allocation_id"}};
  for (size_t i = 0; i < refused.size(); ++i) {
    const auto& [id, field] = refused[i];
    const av1::CommandResult* result = master_.Result(static_cast<int64_t>(i + 1));
    EXPECT_EQ(result->code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << id;
    EXPECT_TRUE(absl::StrContains(result->message(), field)) << id << ": " << result->message();
    auto states = master_.States(id);
    ASSERT_EQ(states.size(), 1u) << id;
    EXPECT_EQ(states[0].state(), av1::PROCESS_STATE_TERMINATED) << id;
    EXPECT_EQ(states[0].message(), result->message()) << id;
  }
  EXPECT_EQ(master_.fetches_, 0);
  EXPECT_FALSE(fs::exists(dir_ + "/work/escaped"));
  EXPECT_FALSE(fs::exists(dir_ + "/outside/config.yaml"));
  for (const auto& l : master_.Logs()) EXPECT_NE(l.message(), "ran");
}

// The per-agent credential the master issues at the first registration is
// kept in a 0600 file and presented by every later registration, also by a
// restarted agent.
TEST_F(AgentTest, KeepsAndPresentsItsCredential) {
  {
    absl::MutexLock lock(&master_.mu_);
    master_.issue_credential_ = "cred-0123456789";
  }
  StartAgent(Options("agent-1"));
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Heartbeats() >= 1; }));
  StopAgent();
  const std::string file = dir_ + "/work/agent-credential";
  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(file);
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "cred-0123456789");

  StartAgent(Options("agent-1"));
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.registrations_.size() >= 2 && master_.Heartbeats() >= 2; }));
  absl::MutexLock lock(&master_.mu_);
  EXPECT_TRUE(master_.registrations_[0].agent_credential().empty());
  EXPECT_EQ(master_.registrations_[1].agent_credential(), "cred-0123456789");
}

// Environment variables from the master (a user's config) that would steer
// the dynamic loader or override the agent's own are refused before any
// process starts.
TEST_F(AgentTest, RefusesReservedAndMalformedEnvironmentVariables) {
  WriteScript("echo started\n");
  StartAgent(Options("agent-1"));
  ASSERT_TRUE(master_.WaitUntil([&] { return master_.Heartbeats() >= 1; }));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"LD_PRELOAD", "reserved"}, {"DET_ALLOCATION_TOKEN", "reserved"}, {"A=B", "is not"}, {"1X", "is not"}};
  int64_t seq = 1;
  for (const auto& [name, want] : bad) {
    SCOPED_TRACE(name);
    const std::string alloc = "env-" + std::to_string(seq);
    av1::MasterMessage m = StartMessage(seq, alloc, "so");
    (*m.mutable_start_allocation()->mutable_env())[name] = "x";
    master_.Send(m);
    ASSERT_TRUE(master_.WaitUntil([&] { return master_.Result(seq) != nullptr; }));
    absl::MutexLock lock(&master_.mu_);
    EXPECT_EQ(master_.Result(seq)->code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_TRUE(absl::StrContains(master_.Result(seq)->message(), want)) << master_.Result(seq)->message();
    EXPECT_TRUE(master_.HasState(alloc, av1::PROCESS_STATE_TERMINATED));
    EXPECT_FALSE(master_.HasState(alloc, av1::PROCESS_STATE_RUNNING));
    ++seq;
  }
}

// An operator's DET_CLUSTER_SECRET (which the agent ignores) never reaches
// a trial's environment.
TEST(TrialEnvTest, TheClusterSecretIsNotPassedOn) {
  setenv("DET_CLUSTER_SECRET", "operator-set-it", 1);
  setenv("DET_TEST_KEEP", "kept", 1);
  auto env = AgentEnvironmentForTrials();
  unsetenv("DET_CLUSTER_SECRET");
  unsetenv("DET_TEST_KEEP");
  EXPECT_EQ(env.count("DET_CLUSTER_SECRET"), 0u);
  EXPECT_EQ(env["DET_TEST_KEEP"], "kept");
}

TEST(TrialEnvTest, BoundsCountAndSize) {
  google::protobuf::Map<std::string, std::string> env;
  for (size_t i = 0; i <= kMaxTrialEnvVars; ++i) env["V" + std::to_string(i)] = "x";
  EXPECT_EQ(ValidateTrialEnv(env, "env").code(), absl::StatusCode::kInvalidArgument);
  env.clear();
  env["BIG"] = std::string(kMaxTrialEnvValueBytes + 1, 'x');
  absl::Status st = ValidateTrialEnv(env, "processes[0].env");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "processes[0].env")) << st;
  env.clear();
  env["OMP_NUM_THREADS"] = "1";
  env["_x9"] = "";
  EXPECT_TRUE(ValidateTrialEnv(env, "env").ok());
}

}  // namespace
}  // namespace det::agent
