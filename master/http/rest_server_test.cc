// The REST server, driven in-process through RestServer::ServeRawForTesting
// (same parser and routes as a socket) and once over a real socket: the
// dashboard's files, the declared route table, the generic
// POST /api/v1/<RpcName> routes (NDJSON for streaming RPCs), how path and
// query fill requests, GET /api/v1/routes and authentication.
#include "master/http/rest_server.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/proto_json.h"
#include "master/core/auth.h"
#include "master/core/master_core.h"
#include "master/http/dashboard_assets.h"
#include "master/http/rest_dispatch.h"
#include "master/http/rest_request.h"
#include "master/http/rest_routes.h"
#include "tests/test_util.h"
#include "master/service/api_handlers.h"
#include "nlohmann/json.hpp"

namespace det::master {
namespace {

namespace fs = std::filesystem;

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

Reply Parse(const std::string& raw) {
  Reply r;
  size_t end = raw.find("\r\n\r\n");
  EXPECT_NE(end, std::string::npos) << raw;
  if (end == std::string::npos) return r;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, end), "\r\n");
  std::vector<std::string> first = absl::StrSplit(lines[0], ' ');
  // A status line without a code fails here instead of leaving status 0.
  EXPECT_GE(first.size(), 2u) << lines[0];
  if (first.size() >= 2) {
    EXPECT_TRUE(absl::SimpleAtoi(first[1], &r.status)) << lines[0];
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    r.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  r.body = raw.substr(end + 4);
  return r;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class RestServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/det-rest-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    MasterOptions options;
    options.data_dir = (dir_ / "master").string();
    options.checkpoint_storage_roots = {(dir_ / "checkpoints").string()};
    options.background_thread = false;
    auto core = MasterCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    rest_ = std::make_unique<RestServer>(core_.get());
  }
  void TearDown() override {
    rest_.reset();
    core_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Reply Get(const std::string& target, const std::string& method = "GET") {
    return Parse(rest_->ServeRawForTesting(method + " " + target + " HTTP/1.1\r\nHost: x\r\n\r\n"));
  }

  fs::path dir_;
  std::unique_ptr<MasterCore> core_;
  std::unique_ptr<RestServer> rest_;
};

TEST_F(RestServerTest, RootAndDashboardServeIndexHtml) {
  const std::string index = ReadFile(fs::path(DET_DASHBOARD_DIR) / "index.html");
  for (const char* path : {"/", "/index.html", "/dashboard", "/dashboard/", "/dashboard/index.html"}) {
    Reply r = Get(path);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.headers["content-type"], "text/html; charset=utf-8") << path;
    EXPECT_EQ(r.body, index) << path;
    EXPECT_TRUE(absl::StrContains(r.headers["content-security-policy"], "default-src 'self'")) << path;
    EXPECT_EQ(r.headers["x-content-type-options"], "nosniff") << path;
  }
}

TEST_F(RestServerTest, EveryDashboardFileIsEmbeddedByteForByte) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(DET_DASHBOARD_DIR)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    Reply r = Get("/dashboard/" + name);
    EXPECT_EQ(r.status, 200) << name;
    EXPECT_EQ(r.body, ReadFile(entry.path())) << name;
    EXPECT_EQ(r.headers["content-type"], DashboardContentType(name)) << name;
    ++files;
  }
  EXPECT_EQ(static_cast<size_t>(files), kDashboardAssetCount);
  EXPECT_EQ(Get("/dashboard/app.js").headers["content-type"], "text/javascript; charset=utf-8");
  EXPECT_EQ(Get("/dashboard/style.css").headers["content-type"], "text/css; charset=utf-8");
}

TEST_F(RestServerTest, HeadHasNoBody) {
  Reply r = Get("/dashboard/app.js", "HEAD");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.body.empty());
}

TEST_F(RestServerTest, UnknownFilesAndTraversalAre404) {
  for (const char* path :
       {"/dashboard/nope.js", "/dashboard/.hidden", "/dashboard/..", "/dashboard/../CMakeLists.txt",
        "/dashboard/..%2fCMakeLists.txt", "/dashboard/%2e%2e%2f%2e%2e%2fCMakeLists.txt",
        "/dashboard/..%5c..%5cCMakeLists.txt", "/dashboard/app.js%00.png", "/dashboard//etc/passwd",
        "/dashboard/%2fetc%2fpasswd", "/etc/passwd", "/dashboard/sub/app.js", "/favicon.ico"}) {
    Reply r = Get(path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_FALSE(absl::StrContains(r.body, "cmake_minimum_required")) << path;
    EXPECT_FALSE(absl::StrContains(r.body, "root:")) << path;
  }
  EXPECT_TRUE(absl::StrContains(Get("/dashboard/nope.js").body, "NOT_FOUND"));
  EXPECT_EQ(Get("/", "POST").status, 404);
}

TEST_F(RestServerTest, DashboardDirServesFromDisk) {
  fs::path assets = dir_ / "assets";
  fs::create_directories(assets);
  std::ofstream(assets / "index.html") << "<p>dev</p>";
  std::ofstream(assets / "extra.js") << "export const x = 1;";
  std::ofstream(dir_ / "secret.txt") << "secret";
  rest_->set_dashboard_dir(assets.string());
  EXPECT_EQ(Get("/").body, "<p>dev</p>");
  Reply js = Get("/dashboard/extra.js");
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.body, "export const x = 1;");
  EXPECT_EQ(Get("/dashboard/app.js").status, 404);  // not in the directory
  EXPECT_EQ(Get("/dashboard/..%2fsecret.txt").status, 404);
  EXPECT_EQ(Get("/dashboard/%2e%2e%2fsecret.txt").status, 404);
}

// Found by fuzz/rest_server_fuzzer: an error message quoting a client's
// invalid UTF-8 (here a %ff id) made nlohmann::json::dump throw, so the
// answer was a 500 instead of the 400 naming the bad id.
TEST_F(RestServerTest, InvalidUtf8InAnErrorMessageIsA400) {
  AuthOptions options;
  options.pbkdf2_iterations = 1;
  auto auth = AuthCore::Create(core_->store(), options);
  ASSERT_TRUE(auth.ok()) << auth.status();
  auto login = (*auth)->Login("determined", "");
  ASSERT_TRUE(login.ok()) << login.status();
  RestServer rest(core_.get(), auth->get());
  for (const char* target :
       {"/api/v1/experiments/%ff", "/api/v1/trials/%c3%28/metrics", "/api/v1/checkpoints/%ed%a0%80"}) {
    Reply r = Parse(rest.ServeRawForTesting(std::string("GET ") + target + " HTTP/1.1\r\nHost: x\r\n" +
                                            "Authorization: Bearer " + login->token() + "\r\n\r\n"));
    EXPECT_GE(r.status, 400) << target;
    EXPECT_LT(r.status, 500) << target << " " << r.body;
    EXPECT_TRUE(nlohmann::json::accept(r.body)) << target << " " << r.body;
  }
}

TEST(DashboardAssetsTest, FileNames) {
  EXPECT_TRUE(IsValidDashboardFileName("app.js"));
  EXPECT_TRUE(IsValidDashboardFileName("a-b_c.min.js"));
  for (const char* bad : {"", ".", "..", ".env", "a/b", "../x", "a\\b", "a%2fb", "a b", "a\n"}) {
    EXPECT_FALSE(IsValidDashboardFileName(bad)) << bad;
  }
  EXPECT_FALSE(IsValidDashboardFileName(std::string("a\0b", 3)));
  EXPECT_FALSE(IsValidDashboardFileName(std::string(129, 'a')));
  EXPECT_EQ(DashboardContentType("x.HTML"), "text/html; charset=utf-8");
  EXPECT_EQ(DashboardContentType("x.svg"), "image/svg+xml");
  EXPECT_EQ(DashboardContentType("x.bin"), "application/octet-stream");
  EXPECT_EQ(LoadDashboardFile("..", "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadDashboardFile("missing.js", "").status().code(), absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------- the API

std::string ExperimentConfig(const fs::path& checkpoints, const std::string& name) {
  return det::testing::SingleTrialConfig(name, checkpoints.string());
}

// A master with users (determined, admin) and a REST server over both.
class RestApiTest : public RestServerTest {
 protected:
  void SetUp() override {
    RestServerTest::SetUp();
    AuthOptions options;
    options.pbkdf2_iterations = 1;
    auto auth = AuthCore::Create(core_->store(), options);
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = std::move(*auth);
    auto login = auth_->Login("determined", "");
    ASSERT_TRUE(login.ok()) << login.status();
    token_ = login->token();
    api_ = std::make_unique<RestServer>(core_.get(), auth_.get());
  }
  void TearDown() override {
    api_.reset();
    auth_.reset();
    RestServerTest::TearDown();
  }
  // One request with the token (unless `token` is false).
  Reply Call(const std::string& method, const std::string& target, const std::string& body = "",
             bool token = true, const std::string& extra_headers = "") {
    std::string req = absl::StrCat(method, " ", target, " HTTP/1.1\r\nHost: x\r\n", extra_headers);
    if (token) absl::StrAppend(&req, "Authorization: Bearer ", token_, "\r\n");
    if (!body.empty()) absl::StrAppend(&req, "Content-Type: application/json\r\n");
    absl::StrAppend(&req, "Content-Length: ", body.size(), "\r\n\r\n", body);
    return Parse(api_->ServeRawForTesting(req));
  }
  nlohmann::json CallJson(const std::string& method, const std::string& target, const std::string& body = "",
                          int want_status = 200) {
    Reply r = Call(method, target, body);
    EXPECT_EQ(r.status, want_status) << method << " " << target << ": " << r.body;
    return nlohmann::json::parse(r.body, nullptr, false);
  }
  // Creates an experiment through POST /api/v1/experiments; returns its id.
  int CreateExperiment(const std::string& name, bool activate = true) {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(ExperimentConfig(dir_ / "checkpoints", name));
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(activate);
    nlohmann::json e = CallJson("POST", "/api/v1/experiments", MessageToJson(req));
    return e.is_object() ? e["experiment"].value("id", 0) : 0;
  }
  // `n` log lines of trial `trial_id`: "line 1" ... "line n".
  void AddLogs(int64_t trial_id, int n) {
    std::vector<TaskLogRow> rows(n);
    for (int i = 0; i < n; ++i) {
      rows[i].trial_id = trial_id;
      rows[i].stream = "stdout";
      rows[i].message = absl::StrCat("line ", i + 1);
    }
    ASSERT_TRUE(core_->store()->InsertTaskLogs(rows).ok());
  }

  std::unique_ptr<AuthCore> auth_;
  std::string token_;
  std::unique_ptr<RestServer> api_;
};

// Must show: POST /api/v1/GetExperiments with {} and a token answers the same
// JSON as GET /api/v1/experiments.
TEST_F(RestApiTest, GenericGetExperimentsAnswersLikeTheRoute) {
  ASSERT_EQ(CreateExperiment("first"), 1);
  ASSERT_EQ(CreateExperiment("second", /*activate=*/false), 2);
  Reply route = Call("GET", "/api/v1/experiments");
  ASSERT_EQ(route.status, 200) << route.body;
  EXPECT_EQ(nlohmann::json::parse(route.body)["experiments"].size(), 2u) << route.body;
  for (const std::string& body : {std::string("{}"), std::string()}) {
    Reply generic = Call("POST", "/api/v1/GetExperiments", body);
    EXPECT_EQ(generic.status, 200) << generic.body;
    EXPECT_EQ(generic.headers["content-type"], "application/json");
    EXPECT_EQ(generic.body, route.body);
  }
  // The same for one experiment and its trials.
  EXPECT_EQ(Call("POST", "/api/v1/GetExperiment", R"({"experiment_id": 2})").body,
            Call("GET", "/api/v1/experiments/2").body);
  EXPECT_EQ(Call("POST", "/api/v1/GetExperimentTrials", R"({"experimentId": 1})").body,
            Call("GET", "/api/v1/experiments/1/trials").body);
}

TEST_F(RestApiTest, GenericStreamingRpcAnswersNdjson) {
  ASSERT_EQ(CreateExperiment("logs"), 1);
  AddLogs(1, 2500);  // three messages: TrialLogCursor sends 1000 lines at most
  Reply r = Call("POST", "/api/v1/TrialLogs", R"({"trial_id": 1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "application/x-ndjson");
  ASSERT_TRUE(absl::EndsWith(r.body, "\n"));
  std::vector<std::string> lines = absl::StrSplit(r.body, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << r.body.substr(0, 500);
  std::vector<std::string> messages;
  for (const std::string& line : lines) {
    nlohmann::json m = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(m.is_object() && m.contains("logs")) << line.substr(0, 200);
    for (const auto& l : m["logs"]) messages.push_back(l["message"]);
  }
  ASSERT_EQ(messages.size(), 2500u);
  EXPECT_EQ(messages.front(), "line 1");
  EXPECT_EQ(messages.back(), "line 2500");

  // The declared route answers the same lines merged into one message, a
  // page of at most 1000 at a time; next_after_id and `more` lead on.
  std::vector<std::string> paged;
  int64_t after = 0;
  for (int page = 0; page < 10; ++page) {
    nlohmann::json merged = CallJson("GET", absl::StrCat("/api/v1/trials/1/logs?after_id=", after, "&limit=5000"));
    ASSERT_LE(merged["logs"].size(), 1000u);
    for (const auto& l : merged["logs"]) paged.push_back(l["message"]);
    if (!merged.value("more", false)) break;
    after = merged["next_after_id"].get<int64_t>();
    EXPECT_EQ(after, merged["logs"].back()["id"].get<int64_t>());
  }
  EXPECT_EQ(paged, messages);
  nlohmann::json small = CallJson("GET", "/api/v1/trials/1/logs?limit=3");
  EXPECT_EQ(small["logs"].size(), 3u);
  EXPECT_TRUE(small.value("more", false));
  // ... from after_id on, never following (the trial is still active).
  nlohmann::json last = CallJson("GET", "/api/v1/trials/1/logs?after_id=2400&follow=true");
  EXPECT_EQ(last["logs"].size(), 100u);
  EXPECT_FALSE(last.value("more", false));
  EXPECT_EQ(last["next_after_id"].get<int64_t>(), 2500);

  // A call that fails before its first message answers the error JSON.
  Reply missing = Call("POST", "/api/v1/TrialLogs", R"({"trial_id": 99})");
  EXPECT_EQ(missing.status, 404) << missing.body;
  EXPECT_EQ(nlohmann::json::parse(missing.body)["error"], "NOT_FOUND");
  EXPECT_EQ(Call("POST", "/api/v1/TrialLogs", "{not json").status, 400);
}

// Over a real socket a stream is chunked; a following one sends lines as
// they come and ends when the client goes away (else Stop would wait forever
// for a trial that never ends).
TEST_F(RestApiTest, FollowingStreamEndsWhenTheClientLeaves) {
  ASSERT_EQ(CreateExperiment("follow"), 1);
  AddLogs(1, 3);
  auto port = api_->Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client client("127.0.0.1", *port);
  client.set_read_timeout(std::chrono::seconds(10));
  auto whole = client.Post("/api/v1/TrialLogs", {{"Authorization", "Bearer " + token_}}, R"({"trial_id": 1})",
                           "application/json");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 200) << whole->body;
  EXPECT_EQ(whole->get_header_value("Content-Type"), "application/x-ndjson");
  EXPECT_EQ(whole->get_header_value("Transfer-Encoding"), "chunked");
  EXPECT_EQ(nlohmann::json::parse(whole->body)["logs"].size(), 3u) << whole->body;
  auto missing = client.Post("/api/v1/TrialLogs", {{"Authorization", "Bearer " + token_}}, R"({"trial_id": 7})",
                             "application/json");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404) << missing->body;

  std::string received;
  httplib::Request req;
  req.method = "POST";
  req.path = "/api/v1/TrialLogs";
  req.headers = {{"Authorization", "Bearer " + token_}, {"Content-Type", "application/json"}};
  req.body = R"({"trial_id": 1, "follow": true})";
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    received.append(data, len);
    return received.find('\n') == std::string::npos;  // leave after the first line
  };
  // Labelled latency (tests/latency_tests.cmake): each bound is 5x or more
  // the median measured, printed below.
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  auto start = std::chrono::steady_clock::now();
  auto res = client.send(req);
  const double first_line = seconds_since(start);
  std::printf("[ latency  ] first line of a following stream in %.3f s (bound 5.0 s)\n", first_line);
  EXPECT_LT(first_line, 5.0);
  nlohmann::json first = nlohmann::json::parse(received.substr(0, received.find('\n')), nullptr, false);
  ASSERT_TRUE(first.is_object()) << received;
  EXPECT_EQ(first["logs"].size(), 3u) << received;
  client.stop();
  start = std::chrono::steady_clock::now();
  api_->Stop();
  const double stop = seconds_since(start);
  std::printf("[ latency  ] Stop after the client left in %.3f s (bound 5.0 s)\n", stop);
  EXPECT_LT(stop, 5.0);
}

TEST_F(RestApiTest, PathAndQueryFillTheRequest) {
  ASSERT_EQ(CreateExperiment("alpha"), 1);
  ASSERT_EQ(CreateExperiment("beta", /*activate=*/false), 2);
  ASSERT_EQ(CreateExperiment("alphabet"), 3);
  auto ids = [&](const std::string& query) {  // in the answer's order
    std::vector<int> out;
    nlohmann::json r = CallJson("GET", "/api/v1/experiments" + query);
    for (const auto& e : r["experiments"]) out.push_back(e["id"]);
    return out;
  };
  EXPECT_EQ(ids(""), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ids("?name=alpha"), (std::vector<int>{1, 3}));
  EXPECT_EQ(ids("?limit=1").size(), 1u);
  EXPECT_EQ(ids("?limit=1&offset=2").size(), 1u);
  EXPECT_EQ(ids("?states=STATE_PAUSED"), (std::vector<int>{2}));                   // enum by name
  EXPECT_EQ(ids("?states=STATE_PAUSED&states=STATE_ACTIVE"), (std::vector<int>{1, 2, 3}));  // repeated
  EXPECT_EQ(ids("?orderBy=ORDER_BY_DESC"), (std::vector<int>{3, 2, 1}));         // by JSON name
  EXPECT_EQ(ids("?order_by=2&limit=2"), (std::vector<int>{3, 2}));                // enum by number
  EXPECT_EQ(ids("?no_such_param=x&name=beta"), (std::vector<int>{2}));           // unknown: ignored
  // The path wins over the query.
  EXPECT_EQ(CallJson("GET", "/api/v1/experiments/2?experiment_id=1")["experiment"]["id"], 2);
  EXPECT_EQ(CallJson("GET", "/api/v1/experiments/3")["experiment"]["name"], "alphabet");
  // A JSON body route: the path fills the id.
  EXPECT_EQ(CallJson("PATCH", "/api/v1/experiments/1", R"({"name": "renamed", "experiment_id": 3})")["experiment"]
                    ["name"],
            "renamed");
  EXPECT_EQ(CallJson("GET", "/api/v1/experiments/1")["experiment"]["name"], "renamed");
  // Actions answer "{}".
  Reply paused = Call("POST", "/api/v1/experiments/1/pause");
  EXPECT_EQ(paused.status, 200) << paused.body;
  EXPECT_EQ(paused.body, "{}");
  EXPECT_EQ(CallJson("GET", "/api/v1/experiments/1")["experiment"]["state"], "STATE_PAUSED");
  nlohmann::json metrics = CallJson("GET", "/api/v1/trials/1/metrics?group=training&include_archived=true");
  EXPECT_TRUE(metrics.contains("metrics")) << metrics.dump();
}

TEST_F(RestApiTest, MalformedValuesAre400NamingTheField) {
  ASSERT_EQ(CreateExperiment("one"), 1);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/api/v1/experiments?limit=abc", "limit: not an integer: 'abc'"},
      {"/api/v1/experiments?offset=1.5", "offset: not an integer: '1.5'"},
      {"/api/v1/experiments?limit=99999999999", "limit: out of range: '99999999999'"},
      {"/api/v1/experiments?order_by=sideways",
       "order_by: not a value of det.api.v1.OrderBy: 'sideways'; allowed: asc, desc (or ORDER_BY_NAME, or the number)"},
      {"/api/v1/experiments?archived=maybe", "archived: not a bool (true or false): 'maybe'"},
      {"/api/v1/experiments/abc", "experiment_id: not an integer: 'abc'"},
      {"/api/v1/experiments/1/trials?limit=x", "limit: not an integer: 'x'"},
      {"/api/v1/trials/1/metrics?include_archived=yes", "include_archived: not a bool (true or false): 'yes'"},
      {"/api/v1/trials/1/logs?after_id=-x", "after_id: not an integer: '-x'"},
  };
  for (const auto& [target, message] : cases) {
    Reply r = Call("GET", target);
    EXPECT_EQ(r.status, 400) << target << ": " << r.body;
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    EXPECT_EQ(j.value("error", ""), "INVALID_ARGUMENT") << target;
    EXPECT_EQ(j.value("message", ""), message) << target;
    EXPECT_EQ(j.value("code", 0), 3) << target;
  }
  // A long value is quoted in part.
  Reply r = Call("GET", "/api/v1/experiments?limit=" + std::string(500, 'z'));
  EXPECT_EQ(r.status, 400);
  EXPECT_LT(r.body.size(), 200u) << r.body;
  // A malformed JSON body.
  EXPECT_EQ(Call("PATCH", "/api/v1/experiments/1", "{\"name\": 5").status, 400);
}

// The best model over REST (issue 45): sort_by by its short lower-case name
// (or its full name, any case, or number) lists the best first, honouring
// smaller_is_better; an unknown sort_by is a 400 listing the allowed names;
// a page holds at most 1000.
TEST_F(RestApiTest, ExperimentCheckpointsSortBySearcherMetricByShortName) {
  ASSERT_EQ(CreateExperiment("best"), 1);
  const int64_t trial = CallJson("GET", "/api/v1/experiments/1/trials")["trials"][0].value("id", 0);
  const std::vector<std::optional<double>> metrics = {0.5, std::nullopt, 0.2, 0.9};  // uuids ...a to ...d
  for (size_t i = 0; i < metrics.size(); ++i) {
    CheckpointRow row;
    row.uuid = absl::StrCat("00000000-0000-4000-8000-00000000000", std::string(1, static_cast<char>('a' + i)));
    row.trial_id = trial;
    row.experiment_id = 1;
    row.state = "COMPLETED";
    row.total_batches = row.time_ms = 10 * static_cast<int64_t>(i + 1);
    row.searcher_metric = metrics[i];
    ASSERT_TRUE(core_->store()->InsertCheckpoint(row).ok());
  }
  auto uuids = [&](const std::string& query) {  // last characters, in the answer's order
    std::string out;
    nlohmann::json r = CallJson("GET", "/api/v1/experiments/1/checkpoints" + query);
    for (const auto& c : r["checkpoints"]) out += c["uuid"].get<std::string>().back();
    return out;
  };
  // validation_loss, smaller is better (SingleTrialConfig).
  EXPECT_EQ(uuids("?sort_by=searcher_metric&limit=2"), "ca");
  EXPECT_EQ(uuids("?sort_by=searcher_metric"), "cadb");  // without a metric last
  EXPECT_EQ(uuids("?sort_by=SORT_BY_SEARCHER_METRIC&limit=2"), "ca");
  EXPECT_EQ(uuids("?sortBy=Searcher_Metric&order_by=desc&limit=1"), "d");
  EXPECT_EQ(uuids("?sort_by=6&limit=1"), "c");
  EXPECT_EQ(uuids("?sort_by=searcher_metric&states=completed&limit=1"), "c");
  for (const char* name : {"uuid", "trial_id", "total_batches", "end_time", "state", "searcher_metric"}) {
    EXPECT_EQ(uuids(absl::StrCat("?sort_by=", name)).size(), 4u) << name;
  }
  EXPECT_EQ(uuids("?sort_by=total_batches&order_by=desc"), "dcba");
  Reply bad = Call("GET", "/api/v1/experiments/1/checkpoints?sort_by=best");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(nlohmann::json::parse(bad.body, nullptr, false).value("message", ""),
            "sort_by: not a value of det.api.v1.GetExperimentCheckpointsRequest.SortBy: 'best'; allowed: uuid, "
            "trial_id, total_batches, end_time, state, searcher_metric (or SORT_BY_NAME, or the number)")
      << bad.body;
  for (const char* query : {"?limit=5000", ""}) {  // a page holds at most 1000
    nlohmann::json page = CallJson("GET", absl::StrCat("/api/v1/experiments/1/checkpoints", query))["pagination"];
    EXPECT_TRUE(page.value("limit", 0) == 1000 && page.value("total", 0) == 4) << query << page.dump();
  }
}

TEST_F(RestApiTest, UnknownRpcIs404AndClientStreamingIsGrpcOnly) {
  Reply unknown = Call("POST", "/api/v1/NoSuchRpc", "{}");
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_TRUE(absl::StrContains(unknown.body, "no RPC det.api.v1.Determined/NoSuchRpc")) << unknown.body;
  EXPECT_EQ(Call("POST", "/api/v1/NoSuchRpc", "{}", /*token=*/false).status, 401);
  EXPECT_EQ(Call("GET", "/api/v1/GetExperiments").status, 404);  // generic routes are POST
  EXPECT_EQ(Call("POST", "/api/v1/getExperiments", "{}").status, 404);
  EXPECT_EQ(Call("GET", "/api/v1/no-such-route").status, 404);
  Reply upload = Call("POST", "/api/v1/UploadArtifact", "{}");
  EXPECT_EQ(upload.status, 400) << upload.body;
  EXPECT_TRUE(absl::StrContains(upload.body, "gRPC only")) << upload.body;
}

TEST_F(RestApiTest, RoutesListsDeclaredAndGenericRoutes) {
  nlohmann::json routes = CallJson("GET", "/api/v1/routes")["routes"];
  ASSERT_EQ(routes.size(), api_->routes().size());
  const google::protobuf::ServiceDescriptor* service = ApiHandlers::Service();
  std::map<std::string, nlohmann::json> generic;
  int declared = 0;
  for (const auto& r : routes) {
    if (!r["generic"].get<bool>()) {
      ++declared;
      // Declared routes answer one message, except the NDJSON metric stream.
      EXPECT_EQ(r["streaming"].get<bool>(), r["pattern"] == "/api/v1/trials/{trial_id}/metrics/stream") << r.dump();
      continue;
    }
    EXPECT_EQ(r["method"], "POST");
    EXPECT_EQ(r["pattern"], "/api/v1/" + r["rpc"].get<std::string>());
    EXPECT_TRUE(generic.emplace(r["rpc"], r).second) << "twice: " << r.dump();
  }
  EXPECT_GE(declared, 28);
  int expected = 0;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* m = service->method(i);
    SCOPED_TRACE(m->name());
    if (m->client_streaming()) {
      EXPECT_EQ(generic.count(m->name()), 0u);
      continue;
    }
    ++expected;
    ASSERT_EQ(generic.count(m->name()), 1u);
    EXPECT_EQ(generic[m->name()]["streaming"].get<bool>(), m->server_streaming());
    EXPECT_EQ(generic[m->name()]["authenticated"].get<bool>(), m->name() != "GetMaster" && m->name() != "Login");
  }
  EXPECT_EQ(generic.size(), static_cast<size_t>(expected));
  EXPECT_EQ(generic.size(), static_cast<size_t>(service->method_count() - 1));  // all but UploadArtifact
  EXPECT_TRUE(generic["TrialLogs"]["streaming"].get<bool>());
}

// Every route the REST API served before the route table still is.
TEST_F(RestApiTest, EveryEarlierRouteIsDeclared) {
  std::set<std::pair<std::string, std::string>> served;
  for (const RestServer::Route& r : api_->routes()) {
    if (!r.generic) served.insert({r.method, r.pattern});
  }
  for (const std::pair<std::string, std::string>& want : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/api/v1/master"},
           {"POST", "/api/v1/auth/login"},
           {"POST", "/api/v1/auth/logout"},
           {"GET", "/api/v1/me"},
           {"GET", "/api/v1/users"},
           {"POST", "/api/v1/users"},
           {"PATCH", "/api/v1/users/{user_id}"},
           {"GET", "/api/v1/routes"},
           {"GET", "/api/v1/experiments"},
           {"POST", "/api/v1/experiments"},
           {"GET", "/api/v1/experiments/{experiment_id}"},
           {"PATCH", "/api/v1/experiments/{experiment_id}"},
           {"GET", "/api/v1/experiments/{experiment_id}/trials"},
           {"GET", "/api/v1/experiments/{experiment_id}/checkpoints"},
           {"POST", "/api/v1/experiments/{experiment_id}/activate"},
           {"POST", "/api/v1/experiments/{experiment_id}/pause"},
           {"POST", "/api/v1/experiments/{experiment_id}/cancel"},
           {"POST", "/api/v1/experiments/{experiment_id}/kill"},
           {"GET", "/api/v1/trials/{trial_id}"},
           {"POST", "/api/v1/trials/{trial_id}/kill"},
           {"GET", "/api/v1/trials/{trial_id}/metrics"},
           {"GET", "/api/v1/trials/{trial_id}/checkpoints"},
           {"GET", "/api/v1/trials/{trial_id}/logs"},
           {"GET", "/api/v1/checkpoints/{checkpoint_uuid}"},
           {"GET", "/api/v1/agents"},
           {"GET", "/api/v1/slots"},
       }) {
    EXPECT_EQ(served.count(want), 1u) << want.first << " " << want.second;
  }
  for (const RestRoute& route : AllRestRoutes()) {
    EXPECT_TRUE(CompileRestRoute(route).ok()) << route.method << " " << route.path;
  }
}

// In-process sweep: every authenticated route answers 401 without a token;
// the public ones are exactly GetMaster's, Login's and the health check's.
TEST_F(RestApiTest, EveryRouteButThePublicOnesNeedsAToken) {
  std::set<std::string> public_routes;
  for (const RestServer::Route& r : api_->routes()) {
    std::string path = std::regex_replace(r.pattern, std::regex(R"(\{[a-z_]+\})"), "1");
    SCOPED_TRACE(r.method + " " + path);
    if (!r.authenticated) {
      public_routes.insert(r.method + " " + r.pattern);
      continue;
    }
    for (const std::string& headers : {std::string(), std::string("Authorization: Bearer nope\r\n"),
                                       std::string("Cookie: det_token=nope\r\n")}) {
      Reply res = Call(r.method, path, r.method == "GET" ? "" : "{}", /*token=*/false, headers);
      EXPECT_EQ(res.status, 401) << res.body;
      EXPECT_TRUE(absl::StrContains(res.body, "UNAUTHENTICATED")) << res.body;
      EXPECT_EQ(res.headers["www-authenticate"], "Bearer");
    }
  }
  EXPECT_EQ(public_routes, (std::set<std::string>{"GET /api/v1/master", "POST /api/v1/auth/login", "GET /api/v1/health",
                                                  "POST /api/v1/GetMaster", "POST /api/v1/Login"}));
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/api/v1/master"}, {"POST", "/api/v1/GetMaster"}}) {
    Reply r = Call(method, path, method == "POST" ? "{}" : "", /*token=*/false);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    EXPECT_TRUE(nlohmann::json::parse(r.body)["auth_required"].get<bool>()) << path;
  }
  // Without an AuthCore nothing authenticated is served.
  EXPECT_EQ(Get("/api/v1/experiments").status, 401);
  EXPECT_EQ(Parse(rest_->ServeRawForTesting("POST /api/v1/GetExperiments HTTP/1.1\r\nHost: x\r\n"
                                            "Content-Length: 2\r\n\r\n{}"))
                .status,
            401);
}

TEST_F(RestApiTest, LoginSetsTheCookieAndLogoutClearsIt) {
  Reply login = Call("POST", "/api/v1/auth/login", R"({"username": "determined", "password": ""})", false);
  ASSERT_EQ(login.status, 200) << login.body;
  const std::string token = nlohmann::json::parse(login.body)["token"];
  EXPECT_EQ(login.headers["set-cookie"], "det_token=" + token + "; Path=/; HttpOnly; SameSite=Strict");
  Reply me = Call("GET", "/api/v1/me", "", false, "Cookie: theme=dark; det_token=" + token + "\r\n");
  EXPECT_EQ(me.status, 200) << me.body;
  EXPECT_EQ(nlohmann::json::parse(me.body)["user"]["username"], "determined");
  Reply wrong = Call("POST", "/api/v1/auth/login", R"({"username": "determined", "password": "x"})", false);
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.headers.count("set-cookie"), 0u);
  // The generic Login answers the same LoginResponse, without a cookie.
  Reply generic = Call("POST", "/api/v1/Login", R"({"username": "determined"})", false);
  EXPECT_EQ(generic.status, 200) << generic.body;
  EXPECT_EQ(generic.headers.count("set-cookie"), 0u);
  EXPECT_FALSE(nlohmann::json::parse(generic.body)["token"].get<std::string>().empty());

  // A cookie-only write must come from the master's own origin, as JSON (csrf.h).
  const std::string cookie = "Cookie: det_token=" + token + "\r\n";
  EXPECT_EQ(Call("POST", "/api/v1/auth/logout", "", false, cookie + "Origin: http://evil:1\r\n").status, 403);
  Reply logout = Call("POST", "/api/v1/auth/logout", "", false,
                      cookie + "Origin: http://x\r\nContent-Type: application/json\r\n");
  EXPECT_EQ(logout.status, 200) << logout.body;
  EXPECT_EQ(logout.body, "{}");
  EXPECT_EQ(logout.headers["set-cookie"], "det_token=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
  EXPECT_EQ(Call("GET", "/api/v1/me", "", false, "Cookie: det_token=" + token + "\r\n").status, 401);
  EXPECT_EQ(Call("GET", "/api/v1/me").status, 200);  // another token lives on
}

// Papercut: `curl -d` and urllib declare application/x-www-form-urlencoded
// for JSON bodies; a body over 8 KiB sent that way was an empty 413.
TEST_F(RestApiTest, JsonBodiesAreReadWhateverFormTypeIsDeclared) {
  ASSERT_EQ(CreateExperiment("form"), 1);
  const std::string description(12000, 'd');  // over httplib's 8 KiB form limit
  const std::string body = nlohmann::json{{"description", description}}.dump();
  for (const std::string type : {"application/x-www-form-urlencoded", "application/json", "text/plain"}) {
    SCOPED_TRACE(type);
    std::string req = absl::StrCat("PATCH /api/v1/experiments/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ",
                                   token_, "\r\nContent-Type: ", type, "\r\nContent-Length: ", body.size(),
                                   "\r\n\r\n", body);
    Reply r = Parse(api_->ServeRawForTesting(req));
    EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
  }
  EXPECT_EQ(CallJson("GET", "/api/v1/experiments/1")["experiment"].value("description", ""), description);
  // Over the limit: a 413 that says which limit.
  api_->set_max_request_bytes(10000);
  std::string req = absl::StrCat("PATCH /api/v1/experiments/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ", token_,
                                 "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ",
                                 body.size(), "\r\n\r\n", body);
  Reply r = Parse(api_->ServeRawForTesting(req));
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("--max-message-mib"), std::string::npos) << r.body;
  // Multipart is no JSON: 415 naming the type.
  req = absl::StrCat("POST /api/v1/GetExperiments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ", token_,
                     "\r\nContent-Type: multipart/form-data; boundary=x\r\nContent-Length: 2\r\n\r\n{}");
  r = Parse(api_->ServeRawForTesting(req));
  EXPECT_EQ(r.status, 415);
  EXPECT_NE(r.body.find("multipart/form-data"), std::string::npos) << r.body;
}

// An RPC without a handler answers 501 with the error JSON, after auth.
// Every unary RPC of det.api.v1.Determined has a handler bound (nothing
// answers UNIMPLEMENTED), and the generic route still asks for credentials
// before anything else.
TEST_F(RestApiTest, EveryUnaryRpcHasAHandlerBehindAuthentication) {
  ApiHandlers handlers(core_.get(), auth_.get());
  const google::protobuf::ServiceDescriptor* service = ApiHandlers::Service();
  std::vector<std::string> unbound;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* m = service->method(i);
    if (m->client_streaming() || m->server_streaming()) continue;
    auto* factory = google::protobuf::MessageFactory::generated_factory();
    std::unique_ptr<google::protobuf::Message> req(factory->GetPrototype(m->input_type())->New());
    std::unique_ptr<google::protobuf::Message> resp(factory->GetPrototype(m->output_type())->New());
    if (handlers.CallUnary(m->name(), ApiCaller(), *req, resp.get()).code() == absl::StatusCode::kUnimplemented) {
      unbound.push_back(m->name());
    }
    if (m->name() == "Login" || m->name() == "GetMaster") continue;
    SCOPED_TRACE(m->name());
    EXPECT_EQ(Call("POST", "/api/v1/" + m->name(), "{}", /*token=*/false).status, 401);
  }
  EXPECT_TRUE(unbound.empty()) << absl::StrJoin(unbound, ", ");
  // A method the service does not declare is a 404 naming it.
  Reply r = Call("POST", "/api/v1/NoSuchRpc", "{}");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, "NoSuchRpc")) << r.body;
}

TEST(RestRequestTest, PathTemplates) {
  auto t = CompilePathTemplate("/api/v1/agents/{agent_id}/slots/{slot_id}/enable");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->params, (std::vector<std::string>{"agent_id", "slot_id"}));
  std::vector<std::string> values;
  ASSERT_TRUE(MatchPathTemplate(*t, "/api/v1/agents/a.b/slots/a.b%2/enable", &values));
  EXPECT_EQ(values, (std::vector<std::string>{"a.b", "a.b%2"}));
  EXPECT_FALSE(MatchPathTemplate(*t, "/api/v1/agents/a/b/slots/1/enable", &values));
  EXPECT_FALSE(MatchPathTemplate(*t, "/api/v1/agents//slots/1/enable", &values));
  EXPECT_FALSE(MatchPathTemplate(*t, "/api/v1/agents/a/slots/1/enable/", &values));
  EXPECT_FALSE(MatchPathTemplate(*t, "api/v1/agents/a/slots/1/enable", &values));
  auto dotted = CompilePathTemplate("/api/v1/a.b/{x}");
  ASSERT_TRUE(dotted.ok());
  EXPECT_FALSE(MatchPathTemplate(*dotted, "/api/v1/aXb/1", &values));  // literal text
  EXPECT_TRUE(MatchPathTemplate(*dotted, "/api/v1/a.b/.*", &values));
  EXPECT_EQ(values, (std::vector<std::string>{".*"}));
  for (const char* bad : {"api/v1/x", "/api/v1/{", "/api/v1/{}", "/api/v1/{1x}", "/api/v1/x}", "/api/{a-b}",
                          "/api/v1/x{a}", "/api/v1/{a}.json", "/api/v1/{{a}}"}) {
    EXPECT_FALSE(CompilePathTemplate(bad).ok()) << bad;
  }
}

TEST(RestRequestTest, FieldsFromText) {
  apiv1::GetExperimentsRequest r;
  std::multimap<std::string, std::string> pairs = {
      {"limit", "7"}, {"name", "x y"}, {"sortBy", "SORT_BY_NAME"}, {"states", "STATE_ACTIVE"}, {"states", "2"},
      {"archived", "false"}, {"experiment_ids", "-3"}, {"unknown", "whatever"}};
  ASSERT_TRUE(SetFieldsFromPairs(pairs, &r).ok());
  EXPECT_EQ(r.limit(), 7);
  EXPECT_EQ(r.name(), "x y");
  EXPECT_EQ(r.sort_by(), apiv1::GetExperimentsRequest::SORT_BY_NAME);
  ASSERT_EQ(r.states_size(), 2);
  EXPECT_EQ(r.states(0), apiv1::STATE_ACTIVE);
  EXPECT_EQ(r.states(1), 2);
  EXPECT_TRUE(r.has_archived());
  EXPECT_FALSE(r.archived());
  EXPECT_EQ(r.experiment_ids(0), -3);
  apiv1::UpdateJobRequest job;
  EXPECT_TRUE(SetFieldsFromPairs({{"weight", "0.5"}}, &job).ok());
  EXPECT_DOUBLE_EQ(job.weight(), 0.5);
  EXPECT_EQ(SetFieldsFromPairs({{"weight", "heavy"}}, &job).message(), "weight: not a number: 'heavy'");
  apiv1::TrialLogsRequest logs;
  EXPECT_EQ(SetFieldsFromPairs({{"after_id", "9223372036854775808"}}, &logs).message(),
            "after_id: out of range: '9223372036854775808'");
  EXPECT_TRUE(SetFieldsFromPairs({{"after_id", "9223372036854775807"}}, &logs).ok());
  apiv1::PatchExperimentRequest patch;
  EXPECT_EQ(SetFieldsFromPairs({{"labels", "a"}}, &patch).message(), "labels: cannot be set from text");
}

TEST(RestRequestTest, BadRoutesAreRefused) {
  for (const RestRoute& bad : std::vector<RestRoute>{
           {"GET", "/api/v1/x", "NoSuchRpc"},
           {"TRACE", "/api/v1/x", "GetMe"},
           {"POST", "/api/v1/x", "UploadArtifact", RestBody::kJson},
           {"GET", "/api/v1/experiments/{id}", "GetExperiment"},                  // no field "id"
           {"PATCH", "/api/v1/experiments/{labels}", "PatchExperiment"},          // a message field
           {"GET", "/api/v1/experiments/{states}", "GetExperiments"},             // repeated
           {"GET", "/api/v1/trials/{trial_id}/logs", "TrialLogs"},                // follows
           {"GET", "/api/v1/trials/{trial_id}/logs", "TrialLogs", RestBody::kNone, "follow=nah"},
           {"GET", "/api/v1/x", "GetExperiments", RestBody::kNone, "nope=1"},
       }) {
    EXPECT_FALSE(CompileRestRoute(bad).ok()) << bad.method << " " << bad.path << " " << bad.rpc;
  }
}

}  // namespace
}  // namespace det::master
