// PrepareContainment: the agent says which containment is in force, and why
// not cgroups. A plain directory stands in for the agent's cgroup (creating
// the "det-agent-<pid>" child is a mkdir in either).
#include "agent/cgroup.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

class ContainmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "det-cgroup-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ContainmentTest, CgroupsWhereTheAgentsCgroupTakesAChild) {
  Containment c = PrepareContainment(true, dir_, 4242);
  EXPECT_EQ(c.cgroup_parent, dir_ + "/det-agent-4242");
  EXPECT_TRUE(std::filesystem::is_directory(c.cgroup_parent));
  EXPECT_EQ(c.description, "trial containment: cgroup v2 under " + dir_ + "/det-agent-4242");
}

TEST_F(ContainmentTest, NoCgroupsFlagIsSaidAndCreatesNothing) {
  Containment c = PrepareContainment(false, dir_, 4242);
  EXPECT_EQ(c.cgroup_parent, "");
  EXPECT_EQ(c.description, "trial containment: process group and reaper only (--no-cgroups)");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/det-agent-4242"));
}

TEST_F(ContainmentTest, FallbackSaysWhy) {
  Containment none = PrepareContainment(true, absl::NotFoundError("no cgroup v2 hierarchy is mounted"), 4242);
  EXPECT_EQ(none.cgroup_parent, "");
  EXPECT_THAT(none.description, HasSubstr("process group and reaper only, no cgroups: no cgroup v2 hierarchy is mounted"));
  // The agent's cgroup takes no child (here: it does not exist).
  Containment denied = PrepareContainment(true, dir_ + "/missing", 4242);
  EXPECT_EQ(denied.cgroup_parent, "");
  EXPECT_THAT(denied.description, HasSubstr("no cgroups: mkdir " + dir_ + "/missing/det-agent-4242"));
  EXPECT_THAT(denied.description, HasSubstr("det-agent as root, or systemd's Delegate=yes"));
}

}  // namespace
}  // namespace det::agent
