// Workspaces and projects in process: the name rules and bounds, the default
// "Uncategorized" workspace and project, duplicates, where a config places
// an experiment (unknown names refused naming the field), forks, the
// GetExperiments filters, and persistence over a restart. No processes.
#include "master/core/workspaces.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

TEST(WorkspaceNameTest, BoundsCharsetAndSpaces) {
  for (const std::string& ok : std::vector<std::string>{"a", "team-42", "Équipe ML 🚀",
                                                       "x'); DROP TABLE experiments;--", "%_*?", std::string(128, 'n')}) {
    EXPECT_TRUE(ValidateWorkspaceName(ok, "name").ok()) << ok;
  }
  struct Bad {
    std::string name;
    const char* why;
  };
  for (const Bad& bad : std::vector<Bad>{{"", "1 to 128 bytes"},
                                         {std::string(129, 'n'), "1 to 128 bytes"},
                                         {"new\nline", "control character U+000A"},
                                         {std::string("nul\0x", 5), "control character U+0000"},
                                         {"bell\x07", "control character U+0007"},
                                         {"del\x7f", "control character U+007F"},
                                         {"c1\xc2\x85", "control character U+0085"},
                                         {"esc\x1b[31m", "control character U+001B"},
                                         {"bad\xff", "not valid UTF-8"},
                                         {"overlong\xc0\xaf", "not valid UTF-8"},
                                         {"surrogate\xed\xa0\x80", "not valid UTF-8"},
                                         {"cut\xe2\x82", "not valid UTF-8"},
                                         {" lead", "space"},
                                         {"trail ", "space"}}) {
    absl::Status st = ValidateWorkspaceName(bad.name, "name");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad.why;
    EXPECT_THAT(std::string(st.message()), HasSubstr("name: ")) << bad.why;
    EXPECT_THAT(std::string(st.message()), HasSubstr(bad.why));
  }
  EXPECT_TRUE(ValidateWorkspaceDescription("two\nlines\tand a tab", "description").ok());
  EXPECT_TRUE(ValidateWorkspaceDescription("", "description").ok());
  EXPECT_EQ(ValidateWorkspaceDescription(std::string(4097, 'd'), "description").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ValidateWorkspaceDescription("cr\r", "description").message()),
              HasSubstr("description: control character U+000D"));
}

class WorkspacesTest : public MasterCoreFixture {
 protected:
  void SetUp() override {
    alice_.set_id(7);
    alice_.set_username("alice");
    Open();
  }

  absl::StatusOr<apiv1::Workspace> NewWorkspace(const std::string& name, const std::string& description = "") {
    apiv1::PostWorkspaceRequest req;
    req.set_name(name);
    req.set_description(description);
    auto resp = core_->PostWorkspace(req, alice_);
    if (!resp.ok()) return resp.status();
    return resp->workspace();
  }
  absl::StatusOr<apiv1::Project> NewProject(int32_t workspace_id, const std::string& name) {
    apiv1::PostProjectRequest req;
    req.set_workspace_id(workspace_id);
    req.set_name(name);
    auto resp = core_->PostProject(req, alice_);
    if (!resp.ok()) return resp.status();
    return resp->project();
  }
  // `placement`: top-level YAML lines appended to the config.
  absl::StatusOr<apiv1::CreateExperimentResponse> Create(const std::string& placement, int64_t parent_id = 0,
                                                         bool validate_only = false) {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(det::testing::SingleTrialConfig("ws", dir_ / "checkpoints") + "\n" + placement);
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_parent_id(parent_id);
    req.set_validate_only(validate_only);
    return core_->CreateExperiment(req, alice_);
  }
  std::vector<int64_t> Listed(const std::function<void(apiv1::GetExperimentsRequest&)>& fill,
                              absl::Status* status = nullptr) {
    apiv1::GetExperimentsRequest req;
    fill(req);
    auto resp = core_->GetExperiments(req);
    if (status != nullptr) *status = resp.status();
    std::vector<int64_t> ids;
    if (resp.ok()) {
      for (const auto& e : resp->experiments()) ids.push_back(e.id());
    }
    return ids;
  }

  apiv1::User alice_;
};

TEST_F(WorkspacesTest, TheDefaultWorkspaceHoldsTheDefaultProject) {
  auto all = core_->GetWorkspaces(apiv1::GetWorkspacesRequest());
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->workspaces_size(), 1);
  EXPECT_EQ(all->workspaces(0).id(), 1);
  EXPECT_EQ(all->workspaces(0).name(), "Uncategorized");
  EXPECT_TRUE(all->workspaces(0).immutable());
  EXPECT_EQ(all->workspaces(0).num_projects(), 1);
  apiv1::GetWorkspaceProjectsRequest req;
  req.set_id(1);
  auto projects = core_->GetWorkspaceProjects(req);
  ASSERT_TRUE(projects.ok()) << projects.status();
  ASSERT_EQ(projects->projects_size(), 1);
  EXPECT_EQ(projects->projects(0).id(), 1);
  EXPECT_EQ(projects->projects(0).name(), "Uncategorized");
  EXPECT_EQ(projects->projects(0).workspace_name(), "Uncategorized");

  auto created = Create("");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->experiment().project_id(), 1);
  EXPECT_EQ(created->experiment().project_name(), "Uncategorized");
  EXPECT_EQ(created->experiment().workspace_name(), "Uncategorized");
  apiv1::GetProjectRequest get;
  get.set_id(1);
  EXPECT_EQ(core_->GetProject(get)->project().num_experiments(), 1);
}

TEST_F(WorkspacesTest, CreateListGetDuplicatesAndUnknownIds) {
  auto ws = NewWorkspace("vision", "image models");
  ASSERT_TRUE(ws.ok()) << ws.status();
  EXPECT_EQ(ws->name(), "vision");
  EXPECT_EQ(ws->description(), "image models");
  EXPECT_EQ(ws->user_id(), 7);
  EXPECT_FALSE(ws->immutable());
  auto dup = NewWorkspace("vision");
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("'vision'"));
  EXPECT_TRUE(NewWorkspace("Vision").ok()) << "names are case-sensitive";

  auto p = NewProject(ws->id(), "resnet");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->workspace_id(), ws->id());
  EXPECT_EQ(p->workspace_name(), "vision");
  auto pdup = NewProject(ws->id(), "resnet");
  EXPECT_EQ(pdup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(pdup.status().message()), HasSubstr("'vision' already has a project named 'resnet'"));
  EXPECT_TRUE(NewProject(1, "resnet").ok()) << "the same name in another workspace";
  auto unknown = NewProject(999, "x");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("workspace_id: workspace 999 not found"));
  EXPECT_EQ(NewProject(ws->id(), "bad\nname").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewWorkspace(std::string(129, 'w')).status().code(), absl::StatusCode::kInvalidArgument);

  apiv1::GetWorkspaceRequest get;
  get.set_id(ws->id());
  auto got = core_->GetWorkspace(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->workspace().num_projects(), 1);
  get.set_id(12345);
  EXPECT_EQ(core_->GetWorkspace(get).status().code(), absl::StatusCode::kNotFound);
  apiv1::GetProjectRequest getp;
  getp.set_id(12345);
  EXPECT_EQ(core_->GetProject(getp).status().code(), absl::StatusCode::kNotFound);
  apiv1::GetWorkspaceProjectsRequest list;
  list.set_id(12345);
  EXPECT_EQ(core_->GetWorkspaceProjects(list).status().code(), absl::StatusCode::kNotFound);

  apiv1::GetWorkspacesRequest by_name;
  by_name.set_name("vision");
  auto found = core_->GetWorkspaces(by_name);
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->workspaces_size(), 1);
  EXPECT_EQ(found->workspaces(0).id(), ws->id());
  apiv1::GetWorkspacesRequest page;
  page.set_offset(1);
  page.set_limit(1);
  auto paged = core_->GetWorkspaces(page);
  ASSERT_TRUE(paged.ok());
  ASSERT_EQ(paged->workspaces_size(), 1);
  EXPECT_EQ(paged->workspaces(0).name(), "vision");
  EXPECT_EQ(paged->pagination().total(), 3);
  page.set_offset(-1);
  EXPECT_EQ(core_->GetWorkspaces(page).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(WorkspacesTest, SqlLikeNamesAreStoredVerbatim) {
  const std::string evil = "x'); DROP TABLE experiments; --";
  auto ws = NewWorkspace(evil, "'; DELETE FROM projects; --");
  ASSERT_TRUE(ws.ok()) << ws.status();
  auto p = NewProject(ws->id(), "\" OR 1=1 --");
  ASSERT_TRUE(p.ok()) << p.status();
  auto created = Create(absl::StrCat("workspace: \"x'); DROP TABLE experiments; --\"\nproject: '\" OR 1=1 --'\n"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->experiment().workspace_name(), evil);
  EXPECT_EQ(created->experiment().project_name(), "\" OR 1=1 --");
  Restart();
  apiv1::GetWorkspaceRequest get;
  get.set_id(ws->id());
  EXPECT_EQ(core_->GetWorkspace(get)->workspace().name(), evil);
  EXPECT_EQ(core_->GetWorkspace(get)->workspace().description(), "'; DELETE FROM projects; --");
  EXPECT_EQ(Listed([](auto&) {}).size(), 1u) << "the experiments table is still there";
}

TEST_F(WorkspacesTest, TheConfigPlacesTheExperimentAndUnknownNamesAreRefused) {
  auto ws = NewWorkspace("nlp");
  ASSERT_TRUE(ws.ok());
  auto p = NewProject(ws->id(), "bert");
  ASSERT_TRUE(p.ok());
  auto placed = Create("workspace: nlp\nproject: bert\n");
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->experiment().project_id(), p->id());
  EXPECT_EQ(placed->experiment().workspace_id(), ws->id());

  struct Bad {
    std::string yaml;
    std::string message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"workspace: nope\nproject: bert\n", "config: field 'workspace': no workspace named 'nope'"},
           {"workspace: nlp\nproject: gpt\n", "config: field 'project': workspace 'nlp' has no project named 'gpt'"},
           {"workspace: nlp\n", "config: field 'project' is required when 'workspace' is set"},
           {"project: bert\n", "config: field 'workspace' is required when 'project' is set"},
           {"workspace: \"a\\u0007b\"\nproject: bert\n", "config: field 'workspace': control character U+0007"},
           {absl::StrCat("workspace: nlp\nproject: ", std::string(200, 'p'), "\n"),
            "config: field 'project': must be 1 to 128 bytes"}}) {
    for (bool validate_only : {false, true}) {
      auto refused = Create(bad.yaml, 0, validate_only);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad.yaml;
      EXPECT_THAT(std::string(refused.status().message()), HasSubstr(bad.message));
    }
  }
  EXPECT_EQ(Listed([](auto&) {}).size(), 1u) << "nothing refused was stored";
}

TEST_F(WorkspacesTest, AForkKeepsItsParentsProjectUnlessItsConfigNamesAnother) {
  auto ws = NewWorkspace("rl");
  auto a = NewProject(ws->id(), "a");
  auto b = NewProject(ws->id(), "b");
  ASSERT_TRUE(a.ok() && b.ok());
  auto parent = Create("workspace: rl\nproject: a\n");
  ASSERT_TRUE(parent.ok()) << parent.status();
  auto fork = Create("", parent->experiment().id());
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ(fork->experiment().project_id(), a->id());
  auto moved = Create("workspace: rl\nproject: b\n", parent->experiment().id());
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->experiment().project_id(), b->id());
}

TEST_F(WorkspacesTest, GetExperimentsFiltersByWorkspaceAndProject) {
  auto cv = NewWorkspace("cv");
  auto nlp = NewWorkspace("nlp");
  auto cv_main = NewProject(cv->id(), "main");
  auto nlp_main = NewProject(nlp->id(), "main");
  auto nlp_side = NewProject(nlp->id(), "side");
  const int64_t e1 = Create("")->experiment().id();
  const int64_t e2 = Create("workspace: cv\nproject: main\n")->experiment().id();
  const int64_t e3 = Create("workspace: nlp\nproject: main\n")->experiment().id();
  const int64_t e4 = Create("workspace: nlp\nproject: side\n")->experiment().id();
  using V = std::vector<int64_t>;
  EXPECT_EQ(Listed([](auto&) {}), (V{e1, e2, e3, e4}));
  EXPECT_EQ(Listed([](auto& r) { r.set_workspace("nlp"); }), (V{e3, e4}));
  EXPECT_EQ(Listed([](auto& r) { r.set_project("main"); }), (V{e2, e3})) << "a project name in any workspace";
  EXPECT_EQ(Listed([](auto& r) {
              r.set_workspace("nlp");
              r.set_project("main");
            }),
            (V{e3}));
  EXPECT_EQ(Listed([&](auto& r) { r.set_project_id(nlp_side->id()); }), (V{e4}));
  EXPECT_EQ(Listed([](auto& r) { r.set_workspace("Uncategorized"); }), (V{e1}));
  EXPECT_EQ(Listed([&](auto& r) {
              r.set_workspace("cv");
              r.set_project_id(nlp_main->id());
            }),
            V{}) << "both must hold";
  absl::Status st;
  Listed([](auto& r) { r.set_workspace("nope"); }, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr("workspace: no workspace named 'nope'"));
  Listed([](auto& r) { r.set_project("nope"); }, &st);
  EXPECT_THAT(std::string(st.message()), HasSubstr("project: no project named 'nope'"));
  Listed([](auto& r) {
    r.set_workspace("cv");
    r.set_project("side");
  }, &st);
  EXPECT_THAT(std::string(st.message()), HasSubstr("project: no project named 'side' in workspace 'cv'"));
  Listed([](auto& r) { r.set_project_id(999); }, &st);
  EXPECT_THAT(std::string(st.message()), HasSubstr("project_id: project 999 not found"));

  apiv1::GetWorkspaceRequest get;
  get.set_id(nlp->id());
  EXPECT_EQ(core_->GetWorkspace(get)->workspace().num_experiments(), 2);
  EXPECT_EQ(cv_main->num_experiments(), 0) << "counted when read, not when created";
}

TEST_F(WorkspacesTest, WorkspacesProjectsAndPlacementsSurviveARestart) {
  auto ws = NewWorkspace("kept", "still here");
  auto p = NewProject(ws->id(), "proj");
  const int64_t id = Create("workspace: kept\nproject: proj\n")->experiment().id();
  Restart();
  apiv1::GetProjectRequest get;
  get.set_id(p->id());
  auto project = core_->GetProject(get);
  ASSERT_TRUE(project.ok()) << project.status();
  EXPECT_EQ(project->project().name(), "proj");
  EXPECT_EQ(project->project().num_experiments(), 1);
  apiv1::GetExperimentRequest exp;
  exp.set_experiment_id(id);
  EXPECT_EQ(core_->GetExperiment(exp)->experiment().project_name(), "proj");
  EXPECT_EQ(core_->GetExperiment(exp)->experiment().workspace_name(), "kept");
  EXPECT_EQ(NewWorkspace("kept").status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(WorkspacesTest, AtMostTenThousandWorkspacesAndTenThousandProjectsEach) {
  {
    Store::Transaction txn(core_->store());
    WorkspaceRow row;
    for (int i = 1; i < kMaxWorkspaces; ++i) {  // the default one is the first
      row.name = absl::StrCat("w", i);
      ASSERT_TRUE(core_->store()->InsertWorkspace(row).ok());
    }
    ProjectRow p;
    p.workspace_id = 2;
    for (int i = 0; i < kMaxProjectsPerWorkspace; ++i) {
      p.name = absl::StrCat("p", i);
      ASSERT_TRUE(core_->store()->InsertProject(p).ok());
    }
    ASSERT_TRUE(txn.Commit().ok());
  }
  auto full = NewWorkspace("one-too-many");
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.status().message()), HasSubstr("at most 10000 workspaces"));
  auto project = NewProject(2, "one-too-many");
  EXPECT_EQ(project.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(project.status().message()), HasSubstr("'w1' has 10000 projects"));
  EXPECT_TRUE(NewProject(3, "still-fine").ok()) << "the bound is per workspace";
}

TEST_F(WorkspacesTest, OnlyTheOwnerOrAnAdminArchivesAndArchivedOnesTakeNothingNew) {
  auto ws = NewWorkspace("ops");
  auto p = NewProject(ws->id(), "infra");
  ASSERT_TRUE(ws.ok() && p.ok());
  apiv1::User bob;
  bob.set_id(8);
  bob.set_username("bob");
  bob.set_active(true);
  apiv1::User admin;
  admin.set_id(1);
  admin.set_username("admin");
  admin.set_admin(true);
  admin.set_active(true);
  apiv1::ArchiveWorkspaceRequest aw;
  aw.set_id(ws->id());
  auto denied = core_->ArchiveWorkspace(aw, bob);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(denied.status().message()), HasSubstr("only the owner of workspace 'ops' (user 7)"));
  apiv1::ArchiveProjectRequest ap;
  ap.set_id(p->id());
  EXPECT_EQ(core_->ArchiveProject(ap, bob).status().code(), absl::StatusCode::kPermissionDenied);
  apiv1::User inactive_admin = admin;
  inactive_admin.set_active(false);
  EXPECT_EQ(core_->ArchiveProject(ap, inactive_admin).status().code(), absl::StatusCode::kPermissionDenied);
  apiv1::ArchiveWorkspaceRequest defaults;
  defaults.set_id(1);
  EXPECT_EQ(core_->ArchiveWorkspace(defaults, admin).status().code(), absl::StatusCode::kFailedPrecondition);
  apiv1::ArchiveProjectRequest default_project;
  default_project.set_id(1);
  EXPECT_EQ(core_->ArchiveProject(default_project, admin).status().code(), absl::StatusCode::kFailedPrecondition);
  aw.set_id(999);
  EXPECT_EQ(core_->ArchiveWorkspace(aw, admin).status().code(), absl::StatusCode::kNotFound);
  aw.set_id(ws->id());

  // The owner archives the project: no new experiment goes there.
  ASSERT_TRUE(core_->ArchiveProject(ap, alice_).ok());
  ASSERT_TRUE(core_->ArchiveProject(ap, alice_).ok()) << "idempotent";
  auto refused = Create("workspace: ops\nproject: infra\n");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("config: field 'project': project 'infra' of workspace 'ops' is archived"));
  // An admin archives the workspace: no new project either, and its
  // projects stay archived until it is unarchived.
  ASSERT_TRUE(core_->ArchiveWorkspace(aw, admin).ok());
  auto no_project = NewProject(ws->id(), "more");
  EXPECT_EQ(no_project.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no_project.status().message()), HasSubstr("workspace 'ops' is archived"));
  EXPECT_THAT(std::string(Create("workspace: ops\nproject: infra\n").status().message()),
              HasSubstr("config: field 'workspace': workspace 'ops' is archived"));
  apiv1::UnarchiveProjectRequest up;
  up.set_id(p->id());
  EXPECT_EQ(core_->UnarchiveProject(up, alice_).status().code(), absl::StatusCode::kFailedPrecondition);
  apiv1::GetWorkspacesRequest archived_only;
  archived_only.set_archived(true);
  auto listed = core_->GetWorkspaces(archived_only);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->workspaces_size(), 1);
  EXPECT_TRUE(listed->workspaces(0).archived());

  apiv1::UnarchiveWorkspaceRequest uw;
  uw.set_id(ws->id());
  EXPECT_EQ(core_->UnarchiveWorkspace(uw, bob).status().code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(core_->UnarchiveWorkspace(uw, alice_).ok());
  ASSERT_TRUE(core_->UnarchiveProject(up, alice_).ok());
  Restart();
  auto placed = Create("workspace: ops\nproject: infra\n");
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->experiment().project_id(), p->id());
}

}  // namespace
}  // namespace det::master
