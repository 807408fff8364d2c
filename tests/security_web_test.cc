// Security, round three (issue 46). Findings 3 and 5: CSRF through the dashboard cookie, the master's data at rest.
// Part of the security_test executable (tests/CMakeLists.txt).
//
// Finding 3: a page on another port of the master's host (same-site, so
// SameSite=Strict does not help) made the logged-in admin's browser POST a
// text/plain form whose body was valid JSON to POST /api/v1/users: the
// det_token cookie authenticated it and a new admin user was created. Now a
// write that only the cookie authenticates needs the master's own Origin and
// Content-Type: application/json (master/http/csrf.h). The browser version
// of this attack is tests/browser/csrf.test.mjs.
//
// Finding 5: the master created its data dir 0755 and det.db / det.db-wal
// 0644, so any local user (a trial on a single-node install) could copy the
// database. Now the dir is 0700, the database files 0600, and a data dir
// that group or others may access is refused (master/store/data_dir.h).
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr uid_t kNobody = 65534;

// The master still answers its public route.
void ExpectMasterAlive(TestCluster& cluster) {
  int status = 0;
  cluster.Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << "the master stopped answering\n" << cluster.MasterLog();
}

// The usernames the master lists (as determined).
std::vector<std::string> Usernames(TestCluster& cluster) {
  std::vector<std::string> names;
  for (const json& u : cluster.Get("/api/v1/users").value("users", json::array())) {
    names.push_back(u.value("username", ""));
  }
  return names;
}

bool HasUser(TestCluster& cluster, const std::string& name) {
  for (const std::string& n : Usernames(cluster)) {
    if (n == name) return true;
  }
  return false;
}

// POST /api/v1/users creating admin `username`, with `headers` and the body
// declared as `content_type`, as a browser would send it. Returns the reply
// (status -1 when none).
httplib::Response CreateUser(TestCluster& cluster, const std::string& username, const httplib::Headers& headers,
                             const std::string& content_type) {
  httplib::Client client("127.0.0.1", cluster.http_port());
  client.set_read_timeout(10s);
  const std::string body =
      absl::StrCat(R"({"user": {"username": ")", username, R"(", "admin": true}, "password": "pw-)", username, "\"}");
  auto res = client.Post("/api/v1/users", headers, body, content_type.c_str());
  if (!res) {
    httplib::Response none;
    none.status = -1;
    return none;
  }
  return *res;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return st.st_mode & 07777;
}

// Whether uid/gid kNobody can open `path` for reading (a forked child drops
// to that user, as a trial under another uid would run). Requires root.
bool NobodyCanRead(const std::string& path) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    _exit(fd >= 0 ? 0 : (errno == EACCES ? 1 : 2));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) <= 1) << "child status " << status << " for " << path;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// ---------------------------------------------------------------------------
// Finding 3: CSRF through the det_token cookie
// ---------------------------------------------------------------------------

// The attack as the red team ran it, over raw HTTP: the admin's cookie, a
// foreign Origin (another loopback port), a text/plain form body that is
// valid JSON. Refused with 403 and a JSON reason, and every variant of it;
// no user is created; the same-origin JSON write and Bearer writes work.
// One cookie-authenticated write that must be refused: its headers, its
// Content-Type and what the 403 body says.
struct CsrfAttempt {
  std::string name;
  httplib::Headers headers;
  std::string content_type;
  std::string reason;  // in the 403 body
};

// The cross-origin, origin-less, same-site and non-JSON variants of a
// cookie-authenticated POST /api/v1/users from `attacker` (the master is `self`).
std::vector<CsrfAttempt> CsrfAttempts(const std::string& cookie, const std::string& self,
                                      const std::string& attacker) {
  return {
      {"csrf-form", {{"Cookie", cookie}, {"Origin", attacker}, {"Sec-Fetch-Site", "same-site"}}, "text/plain",
       "cookie-authenticated POST from origin " + attacker + " refused: cross-origin"},
      {"csrf-json", {{"Cookie", cookie}, {"Origin", attacker}}, "application/json", "refused: cross-origin"},
      {"csrf-null-origin", {{"Cookie", cookie}, {"Origin", "null"}}, "application/json", "refused: cross-origin"},
      {"csrf-no-origin", {{"Cookie", cookie}}, "application/json", "nor Sec-Fetch-Site: same-origin"},
      {"csrf-same-site", {{"Cookie", cookie}, {"Sec-Fetch-Site", "same-site"}}, "application/json",
       "nor Sec-Fetch-Site: same-origin"},
      {"csrf-same-origin-form", {{"Cookie", cookie}, {"Origin", self}}, "text/plain", "is not application/json"},
      {"csrf-urlencoded", {{"Cookie", cookie}, {"Origin", self}}, "application/x-www-form-urlencoded",
       "is not application/json"},
  };
}

// Other writes and methods are refused the same way (delete), and a CORS
// preflight is never granted: the browser blocks cross-origin JSON.
void ExpectOtherCrossOriginWritesRefused(httplib::Client& client, const std::string& cookie,
                                         const std::string& attacker) {
  auto del = client.Delete("/api/v1/experiments/1", {{"Cookie", cookie}, {"Origin", attacker}});
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 403) << del->body;
  httplib::Request preflight;
  preflight.method = "OPTIONS";
  preflight.path = "/api/v1/users";
  preflight.headers = {{"Origin", attacker}, {"Access-Control-Request-Method", "POST"},
                       {"Access-Control-Request-Headers", "content-type"}};
  auto options = client.send(preflight);
  ASSERT_TRUE(options);
  for (const auto& [name, value] : options->headers) {
    EXPECT_FALSE(absl::StartsWithIgnoreCase(name, "Access-Control-")) << name << ": " << value;
  }
}

// What the dashboard and det-cli send still works: the cookie with the
// master's own Origin (or Sec-Fetch-Site: same-origin) and JSON, and a
// Bearer token from anywhere.
void ExpectSameOriginAndBearerWritesWork(TestCluster& cluster, const std::string& admin, const std::string& cookie,
                                         const std::string& self, const std::string& attacker) {
  EXPECT_EQ(CreateUser(cluster, "same-origin", {{"Cookie", cookie}, {"Origin", self}}, "application/json").status,
            200);
  EXPECT_EQ(CreateUser(cluster, "fetch-site", {{"Cookie", cookie}, {"Sec-Fetch-Site", "same-origin"}},
                       "application/json; charset=utf-8")
                .status,
            200);
  EXPECT_EQ(CreateUser(cluster, "bearer", {{"Authorization", "Bearer " + admin}, {"Cookie", cookie}, {"Origin", attacker}},
                       "text/plain")
                .status,
            200);
  EXPECT_TRUE(HasUser(cluster, "same-origin"));
  EXPECT_TRUE(HasUser(cluster, "fetch-site"));
  EXPECT_TRUE(HasUser(cluster, "bearer"));
}

TEST(SecurityWebTest, CookieWritesFromAnotherOriginAreRefused) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  ASSERT_FALSE(admin.empty());
  const std::string cookie = "det_token=" + admin;
  const std::string self = absl::StrCat("http://127.0.0.1:", cluster.http_port());
  const std::string attacker = absl::StrCat("http://127.0.0.1:", cluster.http_port() == 65535 ? 1 : cluster.http_port() + 1);

  const std::vector<CsrfAttempt> refused = CsrfAttempts(cookie, self, attacker);
  for (const CsrfAttempt& a : refused) {
    httplib::Response res = CreateUser(cluster, a.name, a.headers, a.content_type);
    EXPECT_EQ(res.status, 403) << a.name << ": " << res.body;
    const json body = json::parse(res.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << a.name << ": " << res.body;
    EXPECT_TRUE(absl::StrContains(body.value("message", ""), a.reason)) << a.name << ": " << res.body;
    EXPECT_TRUE(absl::StrContains(body.value("message", ""), "send Authorization: Bearer")) << res.body;
  }
  httplib::Client client("127.0.0.1", cluster.http_port());
  ExpectOtherCrossOriginWritesRefused(client, cookie, attacker);
  const std::vector<std::string> users = Usernames(cluster);
  for (const CsrfAttempt& a : refused) {
    EXPECT_EQ(std::count(users.begin(), users.end(), a.name), 0) << a.name << " was created";
  }
  ExpectMasterAlive(cluster);

  ExpectSameOriginAndBearerWritesWork(cluster, admin, cookie, self, attacker);
  // Reads with the cookie from anywhere are unaffected (GET changes nothing).
  auto me = client.Get("/api/v1/me", {{"Cookie", cookie}, {"Origin", attacker}});
  ASSERT_TRUE(me);
  EXPECT_EQ(me->status, 200) << me->body;
  ExpectMasterAlive(cluster);
}

// ---------------------------------------------------------------------------
// Finding 5: the data dir and the database at rest
// ---------------------------------------------------------------------------

// A fresh master makes its data dir 0700 and det.db, -wal, -shm 0600; another
// uid (a trial's) cannot open the database even where the dirs above are
// open to it. Loose modes left by an older master are fixed at start. A data
// dir that others may enter is refused naming the fix, unless
// --allow-insecure-data-dir. Needs root (to act as another uid); CI runs it
// as root.
TEST(SecurityWebTest, DataDirIsPrivateAndAnAccessibleOneIsRefused) {
  ASSERT_EQ(geteuid(), 0u) << "this test acts as uid 65534 to read the database, which needs root (CI runs the "
                              "security tests as root); run it with sudo";
  TempDir dir;
  // The temp dir is 0700: open it, so that only the data dir's own modes
  // stand between another uid and the database.
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  TestCluster cluster(dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ASSERT_FALSE(cluster.Token().empty());  // a write: the -wal has content
  const std::string data = dir / "master";
  const std::string db = cluster.db_path();
  EXPECT_EQ(ModeOf(data), 0700u);
  for (const std::string& f : {db, db + "-wal", db + "-shm"}) {
    ASSERT_TRUE(std::filesystem::exists(f)) << f;
    EXPECT_EQ(ModeOf(f), 0600u) << f;
  }
  EXPECT_FALSE(NobodyCanRead(db)) << "uid 65534 opened " << db;
  // Even with the dir opened by hand, the files themselves are closed.
  ASSERT_EQ(chmod(data.c_str(), 0755), 0);
  EXPECT_FALSE(NobodyCanRead(db)) << "uid 65534 opened " << db;
  EXPECT_FALSE(NobodyCanRead(db + "-wal"));
  EXPECT_TRUE(NobodyCanRead(dir / "master"));  // the check itself works: a 0755 dir is readable

  // A master started on that 0755 data dir refuses, naming the dir, its mode
  // and the fix, and touches nothing.
  cluster.KillMaster();
  Subprocess refused({std::string(kTestBinDir) + "/det-master", "--data-dir", data, "--grpc-port", "0",
                      "--http-port", "0", "--ports-file", dir / "refused-ports.json"},
                     dir / "refused.out", dir / "refused.err");
  EXPECT_EQ(refused.Wait(30s), 2) << refused.Stderr();
  EXPECT_TRUE(absl::StrContains(refused.Stderr(), "data dir " + data + " has mode 0755")) << refused.Stderr();
  EXPECT_TRUE(absl::StrContains(refused.Stderr(), "chmod 700 " + data)) << refused.Stderr();
  EXPECT_TRUE(absl::StrContains(refused.Stderr(), "--allow-insecure-data-dir")) << refused.Stderr();
  EXPECT_EQ(ModeOf(data), 0755u);
  EXPECT_FALSE(std::filesystem::exists(dir / "refused-ports.json"));

  // The fix it names works; database files left 0644 (an older master) are
  // made 0600 at start, with a log line.
  ASSERT_EQ(chmod(data.c_str(), 0700), 0);
  for (const std::string& f : {db, db + "-wal", db + "-shm"}) {
    if (std::filesystem::exists(f)) ASSERT_EQ(chmod(f.c_str(), 0644), 0) << f;
  }
  cluster.RestartMaster();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_TRUE(absl::StrContains(cluster.MasterLog(), "had mode 0644: now 0600")) << cluster.MasterLog();
  for (const std::string& f : {db, db + "-wal", db + "-shm"}) {
    if (std::filesystem::exists(f)) EXPECT_EQ(ModeOf(f), 0600u) << f;
  }
  ExpectMasterAlive(cluster);
}

// --allow-insecure-data-dir starts the master on a group/world-accessible
// data dir with a warning; its database files are still 0600.
TEST(SecurityWebTest, AllowInsecureDataDirOverridesWithAWarning) {
  TempDir dir;
  ASSERT_TRUE(std::filesystem::create_directory(dir / "master"));
  ASSERT_EQ(chmod((dir / "master").c_str(), 0775), 0);
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--allow-insecure-data-dir"}));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ExpectMasterAlive(cluster);
  EXPECT_TRUE(absl::StrContains(cluster.MasterLog(), "has mode 0775")) << cluster.MasterLog();
  EXPECT_TRUE(absl::StrContains(cluster.MasterLog(), "not recommended")) << cluster.MasterLog();
  EXPECT_EQ(ModeOf(dir / "master"), 0775u);
  EXPECT_EQ(ModeOf(cluster.db_path()), 0600u);
}

}  // namespace
}  // namespace det::testing
