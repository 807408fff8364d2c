// End to end: workspaces and projects on a real cluster. det-cli creates a
// workspace and a project, an experiment whose config names them runs there,
// `experiment list --project` shows only it, an unknown project is refused
// naming `project`, the REST routes answer, and everything survives a
// kill -9 of the master. Attacks: names with control characters, over-long
// names and SQL-like names (stored verbatim) through det-cli and REST; a
// user who does not own a workspace or project cannot archive it.
#include <chrono>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

// A synthetic trial that completes in a few batches; `placement` holds the
// top-level workspace/project lines.
std::string ShortConfig(const std::string& name, const std::string& checkpoint_dir, const std::string& placement) {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 4
min_checkpoint_period:
  batches: 2
scheduling_unit: 2
checkpoint_storage:
  type: shared_fs
  host_path: )",
                      checkpoint_dir, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 128
  val_size: 32
)",
                      placement);
}

nlohmann::json ParseOrNull(const std::string& text) { return nlohmann::json::parse(text, nullptr, false); }

// The ids `experiment list ARGS --json` prints.
std::vector<int> ListedIds(TestCluster& cluster, std::vector<std::string> args) {
  args.insert(args.begin(), {"experiment", "list"});
  args.push_back("--json");
  std::string out, err;
  EXPECT_EQ(cluster.Cli(args, &out, &err), 0) << err;
  std::vector<int> ids;
  nlohmann::json j = ParseOrNull(out);
  if (!j.is_object()) return ids;
  for (const auto& e : j.value("experiments", nlohmann::json::array())) {
    ids.push_back(e["id"].is_string() ? std::stoi(e["id"].get<std::string>()) : e["id"].get<int>());
  }
  return ids;
}

TEST(WorkspacesEndToEndTest, AnExperimentRunsInItsProjectAndTheListFiltersByIt) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a1");
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"workspace", "create", "team-a", "--description", "the A team"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("Created workspace 2 'team-a'"));
  ASSERT_EQ(cluster.Cli({"project", "create", "team-a", "vision"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("Created project 2 'vision' in workspace 'team-a'"));
  EXPECT_EQ(cluster.Cli({"workspace", "create", "team-a"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("workspace 'team-a' already exists"));
  EXPECT_EQ(cluster.Cli({"project", "create", "no-such-team", "x"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("workspace 'no-such-team' not found"));

  const int placed = cluster.CreateExperiment(
      ShortConfig("placed", dir / "checkpoints", "workspace: team-a\nproject: vision\n"), "placed");
  ASSERT_GT(placed, 0);
  const std::string loose_yaml = dir / "loose.yaml";
  WriteFile(loose_yaml, ShortConfig("loose", dir / "checkpoints", ""));
  ASSERT_EQ(cluster.Cli({"experiment", "create", loose_yaml, kTestSyntheticTrial, "--paused"}, &out, &err), 0) << err;
  ASSERT_TRUE(cluster.WaitForState(placed, "STATE_COMPLETED", 180s)) << cluster.MasterLog() << cluster.AgentLogs();

  // The config's project, in the experiment and in the lists.
  nlohmann::json exp = cluster.Get(absl::StrCat("/api/v1/experiments/", placed))["experiment"];
  EXPECT_EQ(exp.value("workspace_name", ""), "team-a") << exp.dump();
  EXPECT_EQ(exp.value("project_name", ""), "vision");
  EXPECT_EQ(exp.value("project_id", 0), 2);
  EXPECT_EQ(ListedIds(cluster, {"--project", "vision"}), std::vector<int>{placed});
  EXPECT_EQ(ListedIds(cluster, {"--workspace", "team-a", "--project", "vision"}), std::vector<int>{placed});
  EXPECT_EQ(ListedIds(cluster, {"--workspace", "Uncategorized"}), std::vector<int>{placed + 1});
  EXPECT_EQ(ListedIds(cluster, {}).size(), 2u);
  ASSERT_EQ(cluster.Cli({"experiment", "list", "--project", "vision"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("team-a/vision"));
  EXPECT_THAT(out, Not(HasSubstr("loose")));
  EXPECT_EQ(cluster.Cli({"experiment", "list", "--project", "nope"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("project: no project named 'nope'"));

  ASSERT_EQ(cluster.Cli({"project", "list", "team-a"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("vision"));
  EXPECT_THAT(out, Not(HasSubstr("Uncategorized")));
  ASSERT_EQ(cluster.Cli({"project", "list", "--json"}, &out, &err), 0) << err;
  nlohmann::json projects = ParseOrNull(out);
  ASSERT_TRUE(projects.is_object()) << out;
  ASSERT_EQ(projects["projects"].size(), 2u) << out;
  EXPECT_EQ(projects["projects"][1]["name"], "vision");
  EXPECT_EQ(projects["projects"][1]["num_experiments"], 1);
  ASSERT_EQ(cluster.Cli({"workspace", "list"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("team-a"));
  EXPECT_THAT(out, HasSubstr("the A team"));

  // An unknown project in a config is refused, naming the field.
  const std::string bad_yaml = dir / "bad.yaml";
  WriteFile(bad_yaml, ShortConfig("bad", dir / "checkpoints", "workspace: team-a\nproject: nope\n"));
  EXPECT_EQ(cluster.Cli({"experiment", "create", bad_yaml, kTestSyntheticTrial}, &out, &err), 1);
  // det-cli names the user's file where the master says "config".
  EXPECT_THAT(err, HasSubstr(bad_yaml + ": field 'project': workspace 'team-a' has no project named 'nope'"));
  EXPECT_THAT(err, HasSubstr("INVALID_ARGUMENT"));

  // REST, Determined's paths.
  int status = 0;
  nlohmann::json ws = cluster.Send("POST", "/api/v1/workspaces", R"({"name": "rest-ws"})", &status);
  ASSERT_EQ(status, 200) << ws.dump();
  const int ws_id = ws["workspace"]["id"];
  nlohmann::json p =
      cluster.Send("POST", absl::StrCat("/api/v1/workspaces/", ws_id, "/projects"), R"({"name": "rest-p"})", &status);
  ASSERT_EQ(status, 200) << p.dump();
  EXPECT_EQ(p["project"]["workspace_id"], ws_id);
  EXPECT_EQ(cluster.Get(absl::StrCat("/api/v1/workspaces/", ws_id))["workspace"]["username"], "determined");
  EXPECT_EQ(cluster.Get(absl::StrCat("/api/v1/workspaces/", ws_id, "/projects"))["projects"].size(), 1u);
  EXPECT_EQ(cluster.Get("/api/v1/projects/2")["project"]["name"], "vision");
  EXPECT_EQ(cluster.Get("/api/v1/workspaces")["workspaces"].size(), 3u);
  EXPECT_EQ(cluster.Get("/api/v1/experiments?project_id=2")["experiments"].size(), 1u);
  cluster.Get("/api/v1/projects/999", &status);
  EXPECT_EQ(status, 404);

  // All of it survives a kill -9 of the master.
  cluster.KillMaster();
  cluster.RestartMaster();
  EXPECT_EQ(ListedIds(cluster, {"--project", "vision"}), std::vector<int>{placed});
  ASSERT_EQ(cluster.Cli({"workspace", "list", "--json"}, &out, &err), 0) << err;
  nlohmann::json all = ParseOrNull(out);
  ASSERT_TRUE(all.is_object()) << out;
  ASSERT_EQ(all["workspaces"].size(), 3u) << out;
  EXPECT_EQ(all["workspaces"][1]["name"], "team-a");
  EXPECT_EQ(all["workspaces"][1]["num_experiments"], 1);
  EXPECT_EQ(cluster.Get(absl::StrCat("/api/v1/experiments/", placed))["experiment"].value("project_name", ""),
            "vision");
}

TEST(WorkspacesEndToEndTest, HostileNamesAreRefusedOrStoredVerbatim) {
  TempDir dir;
  TestCluster cluster(dir);
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"workspace", "create", "evil\x1b[2Jname"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("name: control character U+001B"));
  EXPECT_EQ(cluster.Cli({"workspace", "create", std::string(129, 'w')}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("name: must be 1 to 128 bytes, not 129"));
  EXPECT_EQ(cluster.Cli({"workspace", "create", "ok", "--description", "bell\x07"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("description: control character U+0007"));
  int status = 0;
  nlohmann::json r = cluster.Send("POST", "/api/v1/workspaces",
                                  nlohmann::json({{"name", std::string(1 << 20, 'x')}}).dump(), &status);
  EXPECT_EQ(status, 400) << r.dump();
  r = cluster.Send("POST", "/api/v1/workspaces", R"({"name": "nul\u0000byte"})", &status);
  EXPECT_EQ(status, 400) << r.dump();

  const std::string sql = "x'); DROP TABLE workspaces; --";
  ASSERT_EQ(cluster.Cli({"workspace", "create", sql}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"project", "create", sql, "\" OR \"1\"=\"1"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"project", "list", sql, "--json"}, &out, &err), 0) << err;
  nlohmann::json projects = ParseOrNull(out);
  ASSERT_TRUE(projects.is_object()) << out;
  ASSERT_EQ(projects["projects"].size(), 1u);
  EXPECT_EQ(projects["projects"][0]["name"], "\" OR \"1\"=\"1");
  EXPECT_EQ(projects["projects"][0]["workspace_name"], sql);
  EXPECT_EQ(cluster.Get("/api/v1/workspaces")["workspaces"].size(), 2u) << "the table is still there";
  // A project name matching no project is not a pattern.
  cluster.Get("/api/v1/experiments?project=%25", &status);
  EXPECT_EQ(status, 404);
}

TEST(WorkspacesEndToEndTest, OnlyTheOwnerOrAnAdminArchivesAWorkspaceOrProject) {
  TempDir dir;
  TestCluster cluster(dir);
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"workspace", "create", "mine"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"project", "create", "mine", "p"}, &out, &err), 0) << err;
  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  ASSERT_FALSE(admin.empty());
  auto made = cluster.Http("POST", "/api/v1/users", {{"Authorization", "Bearer " + admin}},
                           R"({"user": {"username": "bob", "active": true}, "password": "bob-pw"})");
  ASSERT_TRUE(made && made->status == 200) << (made ? made->body : "no answer");
  const std::string bob = RestLogin(cluster.http_port(), "bob", "bob-pw");
  ASSERT_FALSE(bob.empty());
  for (const char* path : {"/api/v1/workspaces/2/archive", "/api/v1/projects/2/archive",
                           "/api/v1/workspaces/2/unarchive", "/api/v1/projects/2/unarchive"}) {
    auto res = cluster.Http("POST", path, {{"Authorization", "Bearer " + bob}});
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 403) << path << " " << res->body;
    EXPECT_THAT(res->body, HasSubstr("only the owner of")) << path;
  }
  auto immutable = cluster.Http("POST", "/api/v1/workspaces/1/archive", {{"Authorization", "Bearer " + admin}});
  ASSERT_TRUE(immutable);
  EXPECT_EQ(immutable->status, 409) << immutable->body;

  // The owner (determined, through det-cli) archives the project: a config
  // naming it is refused; an admin archives the workspace.
  ASSERT_EQ(cluster.Cli({"project", "archive", "mine", "p"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("Archived project 'p' of workspace 'mine'"));
  const std::string yaml = dir / "archived.yaml";
  WriteFile(yaml, ShortConfig("archived", dir / "checkpoints", "workspace: mine\nproject: p\n"));
  EXPECT_EQ(cluster.Cli({"experiment", "create", yaml, kTestSyntheticTrial}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr(yaml + ": field 'project': project 'p' of workspace 'mine' is archived"));
  auto archived = cluster.Http("POST", "/api/v1/workspaces/2/archive", {{"Authorization", "Bearer " + admin}});
  ASSERT_TRUE(archived);
  EXPECT_EQ(archived->status, 200) << archived->body;
  EXPECT_EQ(cluster.Cli({"project", "create", "mine", "q"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("workspace 'mine' is archived"));
  EXPECT_EQ(cluster.Get("/api/v1/workspaces?archived=true")["workspaces"].size(), 1u);
  ASSERT_EQ(cluster.Cli({"workspace", "unarchive", "mine"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"project", "unarchive", "mine", "p"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"experiment", "create", yaml, kTestSyntheticTrial, "--paused"}, &out, &err), 0) << err;
}

}  // namespace
}  // namespace det::testing
