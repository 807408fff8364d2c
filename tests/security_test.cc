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
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "det/trial/v1/trial.grpc.pb.h"
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

// (section 1 tests)

// ---------------------------------------------------------------------------
// 2. Secure defaults
// ---------------------------------------------------------------------------

// (section 2 tests)

// ---------------------------------------------------------------------------
// 3. Paths
// ---------------------------------------------------------------------------

// (section 3 tests)

namespace trialv1 = ::det::trial::v1;

// Helpers of sections 3 and 6: untrusted trial code with real credentials.

// A stand-in for det-trial (the agent's --det-trial): it saves its
// environment, which holds its allocation id and token, to
// DIR/trial-env/<allocation id>, prints a flood when the config sets
// FAKE_TRIAL_FLOOD, then sleeps. The test then calls det.trial.v1 as the
// trial's code could.
std::string FakeDetTrial(const TempDir& dir) {
  const std::string envs = dir / "trial-env";
  std::filesystem::create_directories(envs);
  const std::string script = dir / "fake-det-trial.sh";
  WriteFile(script, absl::StrCat(R"(#!/bin/sh
env > ")", envs, R"(/.$DET_ALLOCATION_ID" && mv ")", envs, R"(/.$DET_ALLOCATION_ID" ")", envs, R"(/$DET_ALLOCATION_ID"
if [ -n "$FAKE_TRIAL_FLOOD" ]; then
  awk 'BEGIN { s = "x"; for (i = 0; i < 19; i++) s = s s; print s;
               for (i = 0; i < 60000; i++) printf "agent flood line %d yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n", i }'
fi
exec sleep 300
)"));
  chmod(script.c_str(), 0755);
  return script;
}

// A fake trial's credentials, as its environment holds them.
struct FakeTrial {
  std::string allocation_id;
  std::string token;
  int64_t trial_id = 0;
};

// The first `n` fake trials that started (fewer after 60 s).
std::vector<FakeTrial> FakeTrials(const TempDir& dir, size_t n) {
  std::vector<FakeTrial> out;
  PollUntil(
      [&] {
        out.clear();
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir / "trial-env", ec)) {
          if (e.path().filename().string().rfind(".", 0) == 0) continue;
          FakeTrial t;
          std::istringstream in(ReadFile(e.path().string()));
          std::string line;
          while (std::getline(in, line)) {
            if (line.rfind("DET_ALLOCATION_ID=", 0) == 0) t.allocation_id = line.substr(18);
            if (line.rfind("DET_ALLOCATION_TOKEN=", 0) == 0) t.token = line.substr(21);
            if (line.rfind("DET_TRIAL_ID=", 0) == 0) t.trial_id = std::stoll(line.substr(13));
          }
          if (!t.token.empty()) out.push_back(t);
        }
        return out.size() >= n;
      },
      60s);
  return out;
}

// A cluster whose agent (`slots` slots) runs FakeDetTrial for every trial.
class FakeTrialCluster : public TestCluster {
 public:
  FakeTrialCluster(const TempDir& dir, int slots, TestClusterOptions options = {})
      : TestCluster(dir, std::move(options)),
        channel_(grpc::CreateChannel(grpc_address(), grpc::InsecureChannelCredentials())),
        stub_(trialv1::TrialService::NewStub(channel_)) {
    WriteFile(dir / "fake.so", FakeTrialSo());
    StartAgent("a", AgentOptions().set_slots(slots).add_flags({"--det-trial", FakeDetTrial(dir)}));
  }
  // Creates a one-trial experiment of `extra` appended to a config whose
  // checkpoints go to `checkpoint_dir` (its checkpoint_storage last).
  int CreateFake(const std::string& name, const std::string& checkpoint_dir, const std::string& extra = "") {
    return CreateExperiment(SingleTrialConfig(name, checkpoint_dir) + extra, name, dir() / "fake.so");
  }
  // Calls det.trial.v1 `method` as trial `t`.
  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (trialv1::TrialService::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                    const FakeTrial& t, Req req, Resp* resp = nullptr) {
    Resp ignored;
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-allocation-token", t.token);
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    req.set_allocation_id(t.allocation_id);
    return (stub_.get()->*method)(&ctx, req, resp ? resp : &ignored);
  }
  grpc::Status ReportCheckpoint(const FakeTrial& t, const std::string& uuid, int64_t batches) {
    trialv1::ReportCheckpointRequest req;
    req.set_uuid(uuid);
    req.set_total_batches(batches);
    return Call(&trialv1::TrialService::Stub::ReportCheckpoint, t, req);
  }
  trialv1::TrialService::Stub* stub() { return stub_.get(); }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<trialv1::TrialService::Stub> stub_;
};

// The checkpoint's state as REST reports it ("" when unknown).
std::string CheckpointState(TestCluster& cluster, const std::string& uuid) {
  return cluster.Get("/api/v1/checkpoints/" + uuid)["checkpoint"].value("state", "");
}

// Attack: a config whose checkpoint_storage.host_path points outside the
// allowed roots (plainly, by "..", or through a symlink into the master's
// data dir), so that checkpoint GC would later delete there. Refused with
// INVALID_ARGUMENT naming the field and the roots; a master whose root would
// contain its own data refuses to start.
TEST(SecurityTest, CheckpointStorageOutsideTheAllowedRootsIsRefused) {
  TempDir dir;
  TestCluster cluster(dir);
  const std::string root = dir / "checkpoints";
  std::filesystem::create_directories(root);
  std::filesystem::create_directory_symlink(dir / "master", root + "/to-master");
  for (const std::string& host_path :
       {std::string("/tmp"), dir / "master", root + "/../master", root + "/to-master", root + "/to-master/sub",
        std::string("relative/path")}) {
    nlohmann::json body = {{"config_yaml", SingleTrialConfig("outside", host_path)},
                           {"trial_so", absl::Base64Escape(FakeTrialSo())},
                           {"activate", true}};
    int status = 0;
    nlohmann::json resp = cluster.Send("POST", "/api/v1/experiments", body.dump(), &status);
    EXPECT_EQ(status, 400) << host_path << ": " << resp.dump();
    EXPECT_THAT(resp.dump(), ::testing::HasSubstr("checkpoint_storage.host_path")) << host_path;
    EXPECT_THAT(resp.dump(), ::testing::HasSubstr(root)) << "names the allowed roots";
  }
  EXPECT_EQ(cluster.Get("/api/v1/experiments")["experiments"].size(), 0u);
  // Under the root it is fine.
  nlohmann::json ok = {{"config_yaml", SingleTrialConfig("inside", root + "/exp")},
                       {"trial_so", absl::Base64Escape(FakeTrialSo())}};
  int status = 0;
  cluster.Send("POST", "/api/v1/experiments", ok.dump(), &status);
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(std::filesystem::exists(cluster.db_path()));
  ExpectMasterHealthy(cluster);

  // A root that holds the master's own data: the master does not start.
  TempDir other;
  std::string out, err;
  int code = RunProcess({std::string(kTestBinDir) + "/det-master", "--data-dir", other / "master", "--grpc-port", "0",
                         "--http-port", "0", "--checkpoint-storage-root", other.path()},
                        &out, &err, 30s);
  EXPECT_EQ(code, 1) << out << err;
  EXPECT_THAT(err, ::testing::HasSubstr("contains the master's own"));
}

// Attack: trial code reports checkpoints named "../../master/det.db",
// "det.db", or a UUID that is a symlink it made to the master's data dir,
// so that GC would delete the master's database. Each is INVALID_ARGUMENT
// naming `uuid`; nothing is recorded and det.db is intact.
TEST(SecurityTest, TrialCannotNameACheckpointOutsideItsDirectory) {
  TempDir dir;
  FakeTrialCluster cluster(dir, 1);
  const std::string ckdir = dir / "checkpoints/exp";
  ASSERT_GT(cluster.CreateFake("names", ckdir), 0);
  auto trials = FakeTrials(dir, 1);
  ASSERT_EQ(trials.size(), 1u) << cluster.AgentLogs();
  const FakeTrial& t = trials[0];
  std::filesystem::create_directories(ckdir);
  const std::string link_uuid = "0f3c9a1e-5b2d-4c6e-8f10-112233445566";
  std::filesystem::create_directory_symlink(dir / "master", ckdir + "/" + link_uuid);
  for (const std::string& uuid : {std::string("../../master/det.db"), std::string("det.db"), std::string(".."),
                                  std::string("0F3C9A1E-5B2D-4C6E-8F10-112233445566"), link_uuid}) {
    grpc::Status st = cluster.ReportCheckpoint(t, uuid, 10);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << uuid << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), ::testing::HasSubstr("uuid")) << uuid;
  }
  EXPECT_EQ(cluster.Get(absl::StrCat("/api/v1/trials/", t.trial_id, "/checkpoints"))["checkpoints"].size(), 0u);
  // A real one is accepted (so the refusals above were the names').
  const std::string good = "1a2b3c4d-0000-4000-8000-00000000abcd";
  std::filesystem::create_directories(ckdir + "/" + good);
  EXPECT_TRUE(cluster.ReportCheckpoint(t, good, 10).ok());
  EXPECT_TRUE(std::filesystem::exists(cluster.db_path()));
  EXPECT_TRUE(std::filesystem::exists(dir / "master/artifacts"));
  ExpectMasterHealthy(cluster);
}

// Attack: after reporting real checkpoints, trial code swaps a checkpoint's
// directory, or the storage directory above it, for a symlink to data it
// wants destroyed; then its trial ends and GC deletes the checkpoints. GC
// never follows either link: the targets are untouched, while a checkpoint
// left alone is deleted.
TEST(SecurityTest, CheckpointGcNeverFollowsASymlink) {
  TempDir dir;
  FakeTrialCluster cluster(dir, 2);
  const std::string gc = "  save_experiment_best: 0\n  save_trial_best: 0\n  save_trial_latest: 0\n";
  const std::string ck1 = dir / "checkpoints/one", ck2 = dir / "checkpoints/two";
  int e1 = cluster.CreateFake("one", ck1, gc);
  int e2 = cluster.CreateFake("two", ck2, gc);
  ASSERT_GT(e1, 0);
  ASSERT_GT(e2, 0);
  auto trials = FakeTrials(dir, 2);
  ASSERT_EQ(trials.size(), 2u) << cluster.AgentLogs();
  const int64_t trial1 = cluster.Trials(e1)[0].value("id", int64_t{0});
  const FakeTrial& t1 = trials[0].trial_id == trial1 ? trials[0] : trials[1];
  const FakeTrial& t2 = trials[0].trial_id == trial1 ? trials[1] : trials[0];
  const std::string swapped = "aaaaaaaa-0000-4000-8000-000000000001", plain = "aaaaaaaa-0000-4000-8000-000000000002",
                    under_link = "aaaaaaaa-0000-4000-8000-000000000003";
  for (const auto& [d, u] : {std::pair{ck1, swapped}, std::pair{ck1, plain}, std::pair{ck2, under_link}}) {
    std::filesystem::create_directories(d + "/" + u);
    WriteFile(d + "/" + u + "/model.pt", "weights");
  }
  ASSERT_TRUE(cluster.ReportCheckpoint(t1, swapped, 10).ok());
  ASSERT_TRUE(cluster.ReportCheckpoint(t1, plain, 20).ok());
  ASSERT_TRUE(cluster.ReportCheckpoint(t2, under_link, 10).ok());
  // What the trial wants destroyed: the master's data and a directory that
  // holds a same-named checkpoint.
  const std::string precious = dir / "precious";
  std::filesystem::create_directories(precious + "/" + under_link);
  WriteFile(precious + "/" + under_link + "/keep", "keep");
  std::filesystem::remove_all(ck1 + "/" + swapped);
  std::filesystem::create_directory_symlink(dir / "master", ck1 + "/" + swapped);
  std::filesystem::rename(ck2, ck2 + "-moved");
  std::filesystem::create_directory_symlink(precious, ck2);

  for (int e : {e1, e2}) {
    int status = 0;
    cluster.Send("POST", absl::StrCat("/api/v1/experiments/", e, "/kill"), "{}", &status);
    EXPECT_EQ(status, 200);
  }
  // GC ran: the plain checkpoint's directory is gone.
  EXPECT_TRUE(PollUntil([&] { return !std::filesystem::exists(ck1 + "/" + plain); }, 60s)) << cluster.MasterLog();
  for (const std::string& u : {swapped, plain, under_link}) {
    EXPECT_TRUE(PollUntil([&] { return CheckpointState(cluster, u) == "CHECKPOINT_STATE_DELETED"; }, 60s))
        << u << ": " << CheckpointState(cluster, u);
  }
  EXPECT_TRUE(std::filesystem::exists(cluster.db_path()));
  EXPECT_TRUE(std::filesystem::exists(dir / "master/artifacts"));
  EXPECT_TRUE(std::filesystem::is_symlink(ck1 + "/" + swapped));
  EXPECT_EQ(ReadFile(precious + "/" + under_link + "/keep"), "keep");
  EXPECT_TRUE(std::filesystem::exists(ck2 + "-moved/" + under_link + "/model.pt"));
  EXPECT_THAT(cluster.MasterLog(), ::testing::HasSubstr("not deleting"));
  ExpectMasterHealthy(cluster);
}

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

// Logs and long-polls

// Every line of trial `trial_id` through the paged REST read (GET
// .../logs?after_id=N, at most 1000 lines a page, `more` and next_after_id
// saying where to go on); *pages counts the pages.
std::vector<nlohmann::json> AllLogLines(TestCluster& cluster, int64_t trial_id, int* pages = nullptr) {
  std::vector<nlohmann::json> lines;
  int64_t after = 0;
  for (int page = 0; page < 1000; ++page) {
    nlohmann::json r = cluster.Get(absl::StrCat("/api/v1/trials/", trial_id, "/logs?after_id=", after));
    const nlohmann::json logs = r.value("logs", nlohmann::json::array());
    EXPECT_LE(logs.size(), 1000u);
    for (const auto& l : logs) lines.push_back(l);
    if (pages != nullptr) *pages = page + 1;
    if (!r.value("more", false)) break;
    EXPECT_EQ(r.value("next_after_id", int64_t{0}), logs.back().value("id", int64_t{-1}));
    after = r.value("next_after_id", int64_t{0});
  }
  return lines;
}

int64_t LogBytes(const std::vector<nlohmann::json>& lines) {
  int64_t n = 0;
  for (const auto& l : lines) n += static_cast<int64_t>(l.value("message", "").size());
  return n;
}

// Checks what a 1 MiB-per-trial master stored: within the volume (each line
// counted as its bytes + 64), one marker line, the oldest, and ids in order.
void ExpectBoundedLog(const std::vector<nlohmann::json>& lines) {
  EXPECT_LE(LogBytes(lines) + 64 * static_cast<int64_t>(lines.size()), 1 << 20);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines[0].value("message", ""), ::testing::HasSubstr("earlier lines dropped (log limit of 1048576 bytes"));
  int markers = 0;
  for (const auto& l : lines) {
    markers += l.value("message", "").find("earlier lines dropped") != std::string::npos;
    EXPECT_LE(l.value("message", "").size(), (64u << 10) + 64);
  }
  EXPECT_EQ(markers, 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_LT(lines[i - 1].value("id", int64_t{0}), lines[i].value("id", int64_t{0}));
  }
}

// Attack: a trial's output (through its agent: a 512 KiB line and 4 MB of
// lines), then its code (through ReportTrialLogs: a 1 MiB line, 20001 lines
// in one message, 4 MB more) flood a master that keeps 1 MiB per trial.
// Stored: lines cut to 64 KiB with a marker, the oldest lines dropped behind
// one marker line, the oversized message INVALID_ARGUMENT; the REST read is
// paged and det-cli still reads everything.
TEST(SecurityTest, TrialLogFloodIsStoredBoundedAndReadInPages) {
  TempDir dir;
  FakeTrialCluster cluster(dir, 1, TestClusterOptions().add_master_flags({"--max-trial-log-mib", "1"}));
  ASSERT_GT(cluster.CreateFake("flood", dir / "checkpoints",
                               "environment:\n  environment_variables:\n    - FAKE_TRIAL_FLOOD=1\n"),
            0);
  auto trials = FakeTrials(dir, 1);
  ASSERT_EQ(trials.size(), 1u) << cluster.AgentLogs();
  const FakeTrial& t = trials[0];
  // The agent's part: everything it forwards has arrived once its last line has.
  auto has_line = [&](const std::string& prefix) {
    for (const auto& l : AllLogLines(cluster, t.trial_id)) {
      if (l.value("message", "").rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  ASSERT_TRUE(PollUntil([&] { return has_line("agent flood line 59999 "); }, 120s)) << cluster.AgentLogs();
  ExpectBoundedLog(AllLogLines(cluster, t.trial_id));

  // The trial code's part.
  trialv1::ReportTrialLogsRequest big;
  big.add_logs()->set_message(std::string(1 << 20, 'b'));
  EXPECT_TRUE(cluster.Call(&trialv1::TrialService::Stub::ReportTrialLogs, t, big).ok());
  EXPECT_TRUE(has_line(std::string(64 << 10, 'b') + " ... [line truncated: 1048576 bytes]"));
  trialv1::ReportTrialLogsRequest many;
  for (int i = 0; i < 20001; ++i) many.add_logs()->set_message("x");
  grpc::Status st = cluster.Call(&trialv1::TrialService::Stub::ReportTrialLogs, t, many);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("logs"));
  for (int m = 0; m < 40; ++m) {
    trialv1::ReportTrialLogsRequest req;
    for (int i = 0; i < 1000; ++i) req.add_logs()->set_message(absl::StrCat("rpc flood ", m * 1000 + i, " ", std::string(80, 'r')));
    ASSERT_TRUE(cluster.Call(&trialv1::TrialService::Stub::ReportTrialLogs, t, req).ok());
  }
  int pages = 0;
  auto lines = AllLogLines(cluster, t.trial_id, &pages);
  EXPECT_GT(pages, 1);
  ExpectBoundedLog(lines);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().value("message", ""), "rpc flood 39999 " + std::string(80, 'r'));
  // A client limit above the page size is capped; a small one is honoured.
  nlohmann::json page = cluster.Get(absl::StrCat("/api/v1/trials/", t.trial_id, "/logs?limit=100000"));
  EXPECT_EQ(page["logs"].size(), 1000u);
  EXPECT_TRUE(page.value("more", false));
  page = cluster.Get(absl::StrCat("/api/v1/trials/", t.trial_id, "/logs?limit=5"));
  EXPECT_EQ(page["logs"].size(), 5u);
  // det-cli (a gRPC stream) still reads every line, past any page.
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"trial", "logs", std::to_string(t.trial_id)}, &out, &err), 0) << err;
  EXPECT_THAT(out, ::testing::HasSubstr("earlier lines dropped"));
  EXPECT_THAT(out, ::testing::HasSubstr("rpc flood 39999 "));
  ExpectMasterHealthy(cluster);
}

// Attack: one trial opens 600 ShouldPreempt long-polls of 60 s at once (more
// than the master's 512 long-poll threads). Only its ranks + 1 wait; the rest
// are answered at once, and another trial's ShouldPreempt is answered without
// delay.
TEST(SecurityTest, OneAllocationsLongPollsDoNotStarveAnother) {
  TempDir dir;
  FakeTrialCluster cluster(dir, 2);
  ASSERT_GT(cluster.CreateFake("attacker", dir / "checkpoints"), 0);
  ASSERT_GT(cluster.CreateFake("victim", dir / "checkpoints"), 0);
  auto trials = FakeTrials(dir, 2);
  ASSERT_EQ(trials.size(), 2u) << cluster.AgentLogs();
  const FakeTrial& attacker = trials[0];
  const FakeTrial& victim = trials[1];

  constexpr int kPolls = 600;
  struct Poll {
    grpc::ClientContext ctx;
    trialv1::ShouldPreemptRequest req;
    trialv1::ShouldPreemptResponse resp;
  };
  std::vector<std::unique_ptr<Poll>> polls;
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0, finished_ok = 0;
  for (int i = 0; i < kPolls; ++i) {
    auto p = std::make_unique<Poll>();
    p->ctx.AddMetadata("x-det-allocation-token", attacker.token);
    p->ctx.set_deadline(std::chrono::system_clock::now() + 90s);
    p->req.set_allocation_id(attacker.allocation_id);
    p->req.set_timeout_ms(60000);
    cluster.stub()->async()->ShouldPreempt(&p->ctx, &p->req, &p->resp, [&](grpc::Status s) {
      std::lock_guard<std::mutex> l(mu);
      ++finished;
      finished_ok += s.ok();
      cv.notify_all();
    });
    polls.push_back(std::move(p));
  }
  // All but ranks + 1 = 2 come back at once, with the current state.
  {
    std::unique_lock<std::mutex> l(mu);
    EXPECT_TRUE(cv.wait_for(l, 20s, [&] { return finished >= kPolls - 2; })) << finished << " of " << kPolls;
    EXPECT_EQ(finished_ok, finished);
  }
  const auto start = std::chrono::steady_clock::now();
  trialv1::ShouldPreemptRequest quick;
  quick.set_timeout_ms(0);
  trialv1::ShouldPreemptResponse resp;
  grpc::Status st = cluster.Call(&trialv1::TrialService::Stub::ShouldPreempt, victim, quick, &resp);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(resp.preempt());
  EXPECT_LT(took, 5s) << "the victim's ShouldPreempt waited behind the attacker's long-polls";
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_LE(kPolls - finished, 2) << "more than ranks + 1 long-polls of one allocation waited";
  }
  for (auto& p : polls) p->ctx.TryCancel();
  {
    std::unique_lock<std::mutex> l(mu);
    EXPECT_TRUE(cv.wait_for(l, 30s, [&] { return finished == kPolls; }));
  }
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

TEST(SecurityTest, MasterStartsHealthy) {
  TempDir dir;
  TestCluster cluster(dir);
  ExpectMasterHealthy(cluster);
}

}  // namespace
}  // namespace det::testing
