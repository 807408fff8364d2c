// The REST server's dashboard routes, driven in-process through
// RestServer::ServeRawForTesting (same parser and routes as a socket).
#include "master/http/rest_server.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "master/core/auth.h"
#include "master/core/master_core.h"
#include "master/http/dashboard_assets.h"
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
  if (first.size() >= 2) EXPECT_TRUE(absl::SimpleAtoi(first[1], &r.status)) << lines[0];
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
  for (const char* target : {"/api/v1/experiments/%ff", "/api/v1/trials/%c3%28/metrics", "/api/v1/checkpoints/%ed%a0%80"}) {
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

}  // namespace
}  // namespace det::master
