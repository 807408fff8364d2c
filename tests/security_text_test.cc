// Security, round three (issue 46). Findings 2 and 7 and the less-serious input items: invalid UTF-8, terminal escapes, environment_variables at create, error bodies.
// Part of the security_test executable (tests/CMakeLists.txt).
//
// Each test is the attack as another tenant would run it, end to end against
// a real master (and agent): refused or contained, nothing lost, the master
// alive.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "det/agent/v1/agent.grpc.pb.h"
#include "det/api/v1/api.grpc.pb.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "common/det_version.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
namespace agentv1 = ::det::agent::v1;
namespace trialv1 = ::det::trial::v1;

constexpr char kFffd[] = "\xEF\xBF\xBD";  // U+FFFD

// Occurrences of `needle` in `hay`.
int Count(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + needle.size())) ++n;
  return n;
}

void ExpectMasterAlive(TestCluster& cluster) {
  int status = 0;
  cluster.Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << "the master stopped answering";
}

// A stand-in for det-trial (the agent's --det-trial). It saves its
// allocation id, trial id and token (from DET_ALLOCATION_TOKEN_FD when the
// agent passes one, else the environment) to DIR/text-env/<allocation id>,
// waits (at most 60 s) until two trials started, then, by TEXT_MODE:
//   bad:  1000 lines, 25 every 50 ms, each with bytes that are not UTF-8
//         (\377\376, an overlong \300\200, a surrogate \355\240\200);
//   good: 40 lines "good line N", one every 50 ms;
// then "TEXT_MODE done", and sleeps.
std::string TextDetTrial(const TempDir& dir) {
  const std::string envs = dir / "text-env";
  std::filesystem::create_directories(envs);
  const std::string script = dir / "text-det-trial.sh";
  WriteFile(script, absl::StrCat("#!/bin/sh\nENVS='", envs, "'\n", R"SH(tok="$DET_ALLOCATION_TOKEN"
if [ -n "$DET_ALLOCATION_TOKEN_FD" ]; then tok=$(cat /proc/self/fd/$DET_ALLOCATION_TOKEN_FD); fi
{ echo "DET_ALLOCATION_ID=$DET_ALLOCATION_ID"; echo "DET_TRIAL_ID=$DET_TRIAL_ID"; echo "DET_ALLOCATION_TOKEN=$tok";
  echo "TEXT_MODE=$TEXT_MODE"; } > "$ENVS/.$DET_ALLOCATION_ID" && mv "$ENVS/.$DET_ALLOCATION_ID" "$ENVS/$DET_ALLOCATION_ID"
n=0
while [ "$(ls "$ENVS" | wc -l)" -lt 2 ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done
i=0
if [ "$TEXT_MODE" = bad ]; then
  while [ $i -lt 40 ]; do
    j=0
    while [ $j -lt 25 ]; do printf 'bad %d \377\376 \300\200 \355\240\200 end\n' $((i*25+j)); j=$((j+1)); done
    sleep 0.05; i=$((i+1))
  done
else
  while [ $i -lt 40 ]; do echo "good line $i"; sleep 0.05; i=$((i+1)); done
fi
echo "$TEXT_MODE done"
exec sleep 300
)SH"));
  chmod(script.c_str(), 0755);
  return script;
}

// A trial of TextDetTrial as its saved environment describes it.
struct TextTrial {
  std::string allocation_id, token, mode;
  int64_t trial_id = 0;
};

// The first `n` TextDetTrial trials that started (fewer after 60 s).
std::vector<TextTrial> TextTrials(const TempDir& dir, size_t n) {
  std::vector<TextTrial> out;
  PollUntil(
      [&] {
        out.clear();
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir / "text-env", ec)) {
          if (e.path().filename().string().rfind(".", 0) == 0) continue;
          TextTrial t;
          std::istringstream in(ReadFile(e.path().string()));
          std::string line;
          while (std::getline(in, line)) {
            if (line.rfind("DET_ALLOCATION_ID=", 0) == 0) t.allocation_id = line.substr(18);
            if (line.rfind("DET_ALLOCATION_TOKEN=", 0) == 0) t.token = line.substr(21);
            if (line.rfind("DET_TRIAL_ID=", 0) == 0) t.trial_id = std::stoll("0" + line.substr(13));
            if (line.rfind("TEXT_MODE=", 0) == 0) t.mode = line.substr(10);
          }
          if (!t.token.empty() && t.trial_id > 0) out.push_back(t);
        }
        return out.size() >= n;
      },
      60s);
  return out;
}

// Creates a one-trial experiment of the fake trial.so whose TEXT_MODE is
// `mode`, as the user of REST token `token`; its id (0 on failure).
int CreateTextExperiment(TestCluster& cluster, const std::string& token, const std::string& name,
                         const std::string& mode) {
  const std::string yaml = SingleTrialConfig(name, cluster.dir() / "checkpoints") +
                           "environment:\n  environment_variables:\n    - TEXT_MODE=" + mode + "\n";
  nlohmann::json body = {{"config_yaml", yaml}, {"trial_so", absl::Base64Escape(FakeTrialSo())}, {"activate", true}};
  auto res = cluster.Http("POST", "/api/v1/experiments", {{"Authorization", "Bearer " + token}}, body.dump());
  if (!res || res->status != 200) {
    ADD_FAILURE() << "create " << name << ": " << (res ? res->body : "no answer");
    return 0;
  }
  return nlohmann::json::parse(res->body, nullptr, false)["experiment"].value("id", 0);
}

// Starts agent "a" (2 slots, the text det-trial) and two experiments of
// good lines, `prefix`-one and `prefix`-two, as the admin; *trials: theirs.
void StartTwoGoodTextTrials(TestCluster& cluster, const TempDir& dir, const std::string& prefix,
                            std::vector<TextTrial>* trials) {
  cluster.StartAgent("a", AgentOptions().set_slots(2).add_flags({"--det-trial", TextDetTrial(dir)}));
  ASSERT_GT(CreateTextExperiment(cluster, cluster.Token(), prefix + "-one", "good"), 0);
  ASSERT_GT(CreateTextExperiment(cluster, cluster.Token(), prefix + "-two", "good"), 0);
  *trials = TextTrials(dir, 2);
  ASSERT_EQ(trials->size(), 2u) << cluster.AgentLogs();
}

// A second det user ("bob") and its REST token.
std::string CreateBob(TestCluster& cluster) {
  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  EXPECT_NE(admin, "");
  auto created = cluster.Http("POST", "/api/v1/users", {{"Authorization", "Bearer " + admin}},
                              R"({"user": {"username": "bob"}, "password": "bob-pw-12345"})");
  EXPECT_TRUE(created && created->status == 200) << (created ? created->body : "no answer");
  return RestLogin(cluster.http_port(), "bob", "bob-pw-12345");
}

// Attack (finding 2): alice's trial prints 1000 lines holding bytes that are
// not UTF-8 while bob's trial on the same agent prints 40 lines. Before the
// fix the master failed to parse each such batch and dropped the agent's
// stream, bob's lines with it (7-9 of 40 kept). Now: bob keeps 40 of 40,
// alice's lines arrive with U+FFFD, the agent's stream is never dropped.
TEST(SecurityTextTest, InvalidUtf8OnStdoutCostsNoOneTheirLogs) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a", AgentOptions().set_slots(2).add_flags({"--det-trial", TextDetTrial(dir)}));
  WriteFile(dir / "fake.so", FakeTrialSo());
  const std::string bob = CreateBob(cluster);
  ASSERT_NE(bob, "");
  ASSERT_GT(CreateTextExperiment(cluster, cluster.Token(), "alice-bad-bytes", "bad"), 0);
  ASSERT_GT(CreateTextExperiment(cluster, bob, "bob-good-lines", "good"), 0);
  auto trials = TextTrials(dir, 2);
  ASSERT_EQ(trials.size(), 2u) << cluster.AgentLogs();
  const TextTrial& bad = trials[0].mode == "bad" ? trials[0] : trials[1];
  const TextTrial& good = trials[0].mode == "bad" ? trials[1] : trials[0];
  ASSERT_EQ(bad.mode, "bad");
  ASSERT_EQ(good.mode, "good");

  std::string bad_logs, good_logs;
  ASSERT_TRUE(PollUntil(
      [&] {
        bad_logs = cluster.TrialLogs(bad.trial_id);
        good_logs = cluster.TrialLogs(good.trial_id);
        return absl::StrContains(bad_logs, "bad done") && absl::StrContains(good_logs, "good done");
      },
      90s))
      << "good: " << good_logs << "\nmaster:\n" << cluster.MasterLog();
  EXPECT_EQ(Count(good_logs, "good line "), 40) << good_logs;
  EXPECT_EQ(Count(bad_logs, "bad "), 1000 + 1);  // and "bad done"
  const std::string fffd = kFffd;
  EXPECT_THAT(bad_logs, ::testing::HasSubstr("bad 999 " + fffd + fffd + " " + fffd + fffd + " "));
  EXPECT_FALSE(absl::StrContains(bad_logs, "\xff")) << "a raw invalid byte reached the reader";
  // The agent registered once and its stream was never dropped.
  const std::string master_log = cluster.MasterLog();
  EXPECT_EQ(Count(master_log, "agent a registered"), 1) << master_log;
  EXPECT_FALSE(absl::StrContains(master_log, "agent a: connection closed")) << master_log;
  EXPECT_EQ(cluster.ConnectedAgents(), 1);
  ExpectMasterAlive(cluster);
}

// Attack (finding 2): trial code calls ReportTrialLogs itself with a line
// that is not UTF-8 (the field is bytes on the wire: the master replaces the
// bytes with U+FFFD), and with another string field (source) that is not
// UTF-8: that one call fails, alone, INVALID_ARGUMENT saying why (gRPC's own
// answer was UNIMPLEMENTED with no message); the next call works.
TEST(SecurityTextTest, ReportTrialLogsWithInvalidUtf8IsStoredWithReplacement) {
  TempDir dir;
  TestCluster cluster(dir);
  std::vector<TextTrial> trials;
  ASSERT_NO_FATAL_FAILURE(StartTwoGoodTextTrials(cluster, dir, "rpc", &trials));
  const TextTrial& t = trials[0];
  auto stub = trialv1::TrialService::NewStub(grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials()));
  auto report = [&](const std::string& message, const std::string& source) {
    trialv1::ReportTrialLogsRequest req;
    req.set_allocation_id(t.allocation_id);
    auto* log = req.add_logs();
    log->set_message(message);
    log->set_source(source);
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-allocation-token", t.token);
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    trialv1::ReportTrialLogsResponse resp;
    return stub->ReportTrialLogs(&ctx, req, &resp);
  };
  grpc::Status st = report("raw rpc \xff\xfe line", "runtime");
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  st = report("bad source", "\xff");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_code() << " '" << st.error_message() << "'";
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("ReportTrialLogs request could not be parsed"));
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("not UTF-8"));
  st = report("after the bad call", "runtime");
  EXPECT_TRUE(st.ok()) << st.error_message();
  std::string logs;
  EXPECT_TRUE(PollUntil(
      [&] {
        logs = cluster.TrialLogs(t.trial_id);
        return absl::StrContains(logs, "after the bad call");
      },
      30s))
      << logs;
  EXPECT_THAT(logs, ::testing::HasSubstr(absl::StrCat("raw rpc ", kFffd, kFffd, " line")));
  EXPECT_FALSE(absl::StrContains(logs, "bad source"));
  ExpectMasterAlive(cluster);
}

// Why LogBatch and ReportTrialLogsRequest carry TaskLogLine: the same bytes
// on the wire as TaskLog (old senders and readers still work), but a message
// that is not UTF-8 parses, where TaskLog's proto3 string fails the whole
// message (and with it the agent's stream: every tenant's lines in it).
TEST(SecurityTextTest, TaskLogLineIsTaskLogOnTheWireButTakesAnyBytes) {
  det::api::v1::TaskLogLine line;
  line.set_allocation_id("alloc-1");
  line.set_rank(0);
  line.set_source("runtime");
  line.set_message("bad \xff\xfe bytes");
  const std::string wire = line.SerializeAsString();
  det::api::v1::TaskLog as_string;
  EXPECT_FALSE(as_string.ParseFromString(wire)) << "proto3 string parses invalid UTF-8 now?";
  det::api::v1::TaskLogLine back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_EQ(back.message(), "bad \xff\xfe bytes");
  line.set_message("valid UTF-8 \xc3\xa9");
  ASSERT_TRUE(as_string.ParseFromString(line.SerializeAsString()));
  EXPECT_EQ(as_string.message(), "valid UTF-8 \xc3\xa9");
  EXPECT_EQ(as_string.allocation_id(), "alloc-1");
  EXPECT_EQ(as_string.SerializeAsString(), line.SerializeAsString());
}

constexpr char kAgentSecret[] = "text-agents-secret-71c2e9";

// Attack (finding 2): a hostile agent (it has the cluster secret) sends a
// LogBatch whose line is not UTF-8, then another. The master parses both (the
// line is bytes) instead of dropping the stream: it refuses each batch's
// lines for an allocation not placed on that agent, the second included.
TEST(SecurityTextTest, HostileAgentsInvalidUtf8DoesNotDropItsStream) {
  TempDir dir;
  WriteFile(dir / "secret", std::string(kAgentSecret) + "\n");
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--cluster-secret-file", dir / "secret"}));
  auto stub = agentv1::AgentService::NewStub(grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials()));
  agentv1::RegisterAgentRequest reg;
  reg.set_agent_id("evil");
  reg.set_hostname("evil-host");
  reg.add_addresses("127.0.0.1");
  reg.add_devices()->set_id(0);
  reg.set_version(det::kDetVersion);
  agentv1::RegisterAgentResponse reg_resp;
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-cluster-secret", kAgentSecret);
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::Status st = stub->RegisterAgent(&ctx, reg, &reg_resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-det-cluster-secret", kAgentSecret);
  ctx.AddMetadata("authorization", "Bearer " + reg_resp.session_token());
  auto stream = stub->Connect(&ctx);
  for (const std::string alloc : {"not-utf8-first", "then-this-one"}) {
    agentv1::AgentMessage m;
    auto* log = m.mutable_logs()->add_logs();
    log->set_allocation_id(alloc);
    log->set_message("hostile \xff\xfe\xc0\x80 line");
    ASSERT_TRUE(stream->Write(m));
  }
  EXPECT_TRUE(PollUntil(
      [&] { return absl::StrContains(cluster.MasterLog(), "agent evil: refused log lines of allocation 'then-this-one'"); },
      30s))
      << cluster.MasterLog();
  EXPECT_FALSE(absl::StrContains(cluster.MasterLog(), "agent evil: connection closed")) << cluster.MasterLog();
  stream->WritesDone();
  ctx.TryCancel();
  stream->Finish();
  ExpectMasterAlive(cluster);
}

// Attack (finding 7): another user names an experiment, describes and
// labels it with a screen clear (CSI 2J), an OSC window title and a fake
// table row; `experiment list` and `describe` print them as visible escapes:
// no ESC or BEL byte, no extra row. A log line with an ESC prints escaped,
// raw only with --raw.
TEST(SecurityTextTest, CliEscapesControlCharactersInServerText) {
  TempDir dir;
  TestCluster cluster(dir);
  const int exp = cluster.CreateExperiment(SingleTrialConfig("plain", dir / "checkpoints"), "plain");
  ASSERT_GT(exp, 0);
  const std::string id = std::to_string(exp);
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"experiment", "set", "name", id, "evil\x1b[2J\x1b]0;pwned\a\xc2\x9b" "31m"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"experiment", "set", "description", id, "d\x1b]0;pwned\a\r\n 99 | FAKE | ROW"}, &out, &err), 0)
      << err;
  ASSERT_EQ(cluster.Cli({"experiment", "set", "labels", id, "ok,x\n 98 | FAKE\x1b[2J"}, &out, &err), 0) << err;
  for (const std::vector<std::string>& cmd : {std::vector<std::string>{"experiment", "list"},
                                             std::vector<std::string>{"experiment", "describe", id}}) {
    out.clear();
    ASSERT_EQ(cluster.Cli(cmd, &out, &err), 0) << err;
    EXPECT_EQ(out.find('\x1b'), std::string::npos) << cmd[1] << ":\n" << out;
    EXPECT_EQ(out.find('\a'), std::string::npos) << cmd[1];
    EXPECT_EQ(out.find('\r'), std::string::npos) << cmd[1];
    EXPECT_EQ(out.find("\xc2\x9b"), std::string::npos) << cmd[1];
    EXPECT_THAT(out, ::testing::HasSubstr("evil\\x1b[2J\\x1b]0;pwned\\x07\\u009b31m")) << cmd[1];
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      EXPECT_FALSE(absl::StartsWith(line, " 99 |") || absl::StartsWith(line, " 98 |")) << "injected row: " << line;
    }
  }
  out.clear();
  ASSERT_EQ(cluster.Cli({"experiment", "list"}, &out, &err), 0);
  EXPECT_EQ(Count(out, "\n"), 3) << "header, separator, one row:\n" << out;
  out.clear();
  ASSERT_EQ(cluster.Cli({"experiment", "describe", id}, &out, &err), 0);
  EXPECT_THAT(out, ::testing::HasSubstr("d\\x1b]0;pwned\\x07\\r\\n 99 | FAKE | ROW"));
  EXPECT_THAT(out, ::testing::HasSubstr("x\\n 98 | FAKE\\x1b[2J"));
  // An argument that is not UTF-8 (a Latin-1 shell) is sent with U+FFFD, not
  // refused by the master as an unparsable request.
  ASSERT_EQ(cluster.Cli({"experiment", "set", "description", id, "caf\xe9"}, &out, &err), 0) << err;
  out.clear();
  ASSERT_EQ(cluster.Cli({"experiment", "describe", id}, &out, &err), 0);
  EXPECT_THAT(out, ::testing::HasSubstr(absl::StrCat("Description:       caf", kFffd, "\n")));
  ExpectMasterAlive(cluster);
}

// The same for log lines, which trial code writes: `trial logs` shows an ESC
// as \x1b; `trial logs --raw` prints it as stored.
TEST(SecurityTextTest, TrialLogsPrintEscapedUnlessRaw) {
  TempDir dir;
  TestCluster cluster(dir);
  std::vector<TextTrial> trials;
  ASSERT_NO_FATAL_FAILURE(StartTwoGoodTextTrials(cluster, dir, "esc", &trials));
  const TextTrial& t = trials[0];
  auto stub = trialv1::TrialService::NewStub(grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials()));
  trialv1::ReportTrialLogsRequest req;
  req.set_allocation_id(t.allocation_id);
  req.add_logs()->set_message("clear \x1b[2J title \x1b]0;pwned\a end");
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-det-allocation-token", t.token);
  trialv1::ReportTrialLogsResponse resp;
  grpc::Status st = stub->ReportTrialLogs(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::string out, err;
  ASSERT_TRUE(PollUntil(
      [&] {
        out.clear();
        return cluster.Cli({"trial", "logs", std::to_string(t.trial_id)}, &out, &err) == 0 &&
               absl::StrContains(out, "clear ");
      },
      30s))
      << out << err;
  EXPECT_THAT(out, ::testing::HasSubstr("clear \\x1b[2J title \\x1b]0;pwned\\x07 end"));
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(cluster.Cli({"trial", "logs", "--raw", std::to_string(t.trial_id)}, &out, &err), 0) << err;
  EXPECT_THAT(out, ::testing::HasSubstr("clear \x1b[2J title \x1b]0;pwned\a end"));
  ExpectMasterAlive(cluster);
}

// Less serious: environment_variables that the agent would refuse at launch
// (LD_*, DET_*, malformed names, over-limit values) are INVALID_ARGUMENT at
// create, naming the variable; nothing is stored. A good one is accepted.
TEST(SecurityTextTest, EnvironmentVariablesAreCheckedAtCreate) {
  TempDir dir;
  TestCluster cluster(dir);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"LD_PRELOAD=/tmp/evil.so", "LD_PRELOAD"},
      {"DET_ALLOCATION_TOKEN=forged", "DET_ALLOCATION_TOKEN"},
      {"1BAD=x", "1BAD"},
      {"A-B=x", "A-B"},
      {"BIG=" + std::string(70000, 'x'), "BIG"}};
  for (const auto& [var, name] : refused) {
    const std::string yaml = SingleTrialConfig("env", dir / "checkpoints") +
                             "environment:\n  environment_variables:\n    - \"" + var + "\"\n";
    nlohmann::json body = {{"config_yaml", yaml}, {"trial_so", absl::Base64Escape(FakeTrialSo())}};
    int status = 0;
    nlohmann::json resp = cluster.Send("POST", "/api/v1/experiments", body.dump(), &status);
    EXPECT_EQ(status, 400) << name << ": " << resp.dump().substr(0, 300);
    const std::string message = resp.value("message", "");
    EXPECT_THAT(message, ::testing::HasSubstr("environment.environment_variables")) << message.substr(0, 300);
    EXPECT_THAT(message, ::testing::HasSubstr(name)) << message.substr(0, 300);
  }
  EXPECT_EQ(cluster.Get("/api/v1/experiments")["experiments"].size(), 0u);
  // det-cli shows the same error and exits 1.
  WriteFile(dir / "ld.yaml", SingleTrialConfig("env", dir / "checkpoints") +
                                 "environment:\n  environment_variables:\n    - LD_PRELOAD=/tmp/evil.so\n");
  WriteFile(dir / "fake.so", FakeTrialSo());
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"experiment", "create", dir / "ld.yaml", dir / "fake.so", "--no-local-abi-check"}, &out, &err),
            1)
      << out << err;
  EXPECT_THAT(err, ::testing::HasSubstr("variable LD_PRELOAD is reserved"));
  const std::string ok = SingleTrialConfig("env-ok", dir / "checkpoints") +
                         "environment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n";
  nlohmann::json body = {{"config_yaml", ok}, {"trial_so", absl::Base64Escape(FakeTrialSo())}};
  int status = 0;
  cluster.Send("POST", "/api/v1/experiments", body.dump(), &status);
  EXPECT_EQ(status, 200);
  ExpectMasterAlive(cluster);
}

// The raw HTTP response (status line, headers, body) to `request`.
std::string RawHttp(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    shutdown(fd, SHUT_WR);  // no body follows
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0 && out.size() < (1 << 20);) out.append(buf, n);
  }
  close(fd);
  return out;
}

// Less serious: every REST error has a JSON body. A POST with no body (no
// Content-Length), one whose chunked body is broken, a request line that is
// not HTTP (httplib refused those two with an empty 400) and a JSON body
// holding bytes that are not UTF-8 each get a 4xx whose body is JSON with a
// message saying what to send.
TEST(SecurityTextTest, RestErrorsWithoutABodyOrUtf8HaveAJsonBody) {
  TempDir dir;
  TestCluster cluster(dir);
  const std::string auth = "Authorization: Bearer " + cluster.Token() + "\r\n";
  for (const std::string& request :
       {"POST /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "Connection: close\r\n\r\n",
        "POST /api/v1/users HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "Connection: close\r\n\r\n",
        "POST /api/v1/users HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n",
        std::string("GARBAGE\r\n\r\n"), std::string("GET /api/v1/master HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n")}) {
    const std::string reply = RawHttp(cluster.http_port(), request);
    const std::string path = request.substr(0, request.find('\r'));
    ASSERT_THAT(reply, ::testing::StartsWith("HTTP/1.1 4")) << path << ": " << reply;
    const size_t body_at = reply.find("\r\n\r\n");
    ASSERT_NE(body_at, std::string::npos) << reply;
    nlohmann::json body = nlohmann::json::parse(reply.substr(body_at + 4), nullptr, false);
    ASSERT_TRUE(body.is_object()) << path << ": not a JSON body:\n" << reply;
    EXPECT_FALSE(body.value("message", "").empty()) << reply;
  }
  const std::string not_utf8 = std::string(R"({"config_yaml": "name: caf)") + "\xe9" + R"(", "trial_so": ""})";
  int status = 0;
  nlohmann::json resp = cluster.Send("POST", "/api/v1/experiments", not_utf8, &status);
  EXPECT_EQ(status, 400) << resp.dump();
  EXPECT_FALSE(resp.value("message", "").empty()) << resp.dump();
  std::printf("REST body with invalid UTF-8: %d %s\n", status, resp.dump().c_str());
  ExpectMasterAlive(cluster);
}

// Less serious: a config that is not UTF-8 (a Latin-1 description) is
// refused by det-cli (exit 2) naming the file, line, column and byte and how
// to fix it, before the master is asked; a raw CreateExperiment with such a
// config_yaml is INVALID_ARGUMENT saying the request holds text that is not
// UTF-8 (it was "det-cli: error:  (UNIMPLEMENTED)"), and the master stays up.
TEST(SecurityTextTest, ConfigThatIsNotUtf8IsRefusedNamingFileAndLine) {
  TempDir dir;
  TestCluster cluster(dir);
  const std::string yaml = SingleTrialConfig("latin1", dir / "checkpoints") + "description: caf\xe9 au lait\n";
  WriteFile(dir / "latin1.yaml", yaml);
  WriteFile(dir / "fake.so", FakeTrialSo());
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"experiment", "create", dir / "latin1.yaml", dir / "fake.so", "--no-local-abi-check"}, &out,
                        &err),
            2)
      << out << err;
  EXPECT_THAT(err, ::testing::HasSubstr(dir / "latin1.yaml"));
  EXPECT_THAT(err, ::testing::HasSubstr(", column 17 (byte 0xe9) is not UTF-8; save the file as UTF-8"));
  EXPECT_THAT(err, ::testing::Not(::testing::HasSubstr("UNIMPLEMENTED")));
  EXPECT_EQ(cluster.Get("/api/v1/experiments")["experiments"].size(), 0u);

  auto stub = det::api::v1::Determined::NewStub(grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials()));
  det::api::v1::CreateExperimentRequest req;
  req.set_config_yaml(yaml);
  req.set_trial_so(FakeTrialSo());
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + cluster.Token());
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  det::api::v1::CreateExperimentResponse resp;
  grpc::Status st = stub->CreateExperiment(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_code() << " '" << st.error_message() << "'";
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("CreateExperiment request could not be parsed"));
  EXPECT_THAT(st.error_message(), ::testing::HasSubstr("not UTF-8"));
  EXPECT_EQ(cluster.Get("/api/v1/experiments")["experiments"].size(), 0u);
  ExpectMasterAlive(cluster);
}

}  // namespace
}  // namespace det::testing
