#include "common/prestart_assignment.h"

#include <gtest/gtest.h>

#include <string>

namespace det {
namespace {

PrestartAssignment Sample() {
  PrestartAssignment a;
  a.trial_path = "/var/lib/det-agent/cache/abc.so";
  a.env = {"DET_MASTER=127.0.0.1:8090", "EMPTY=", "WITH_EQ=a=b"};
  a.cwd = "/var/lib/det-agent/allocations/a1";
  a.umask = 007;
  a.set_user = true;
  a.uid = 20001;
  a.gid = 20001;
  a.groups = {20001, 30};
  return a;
}

TEST(PrestartAssignmentTest, RoundTrips) {
  absl::StatusOr<PrestartAssignment> got = DecodePrestartAssignment(EncodePrestartAssignment(Sample()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->trial_path, Sample().trial_path);
  EXPECT_EQ(got->env, Sample().env);
  EXPECT_EQ(got->cwd, Sample().cwd);
  EXPECT_EQ(got->umask, 007);
  EXPECT_TRUE(got->set_user);
  EXPECT_EQ(got->uid, 20001u);
  EXPECT_EQ(got->gid, 20001u);
  EXPECT_EQ(got->groups, Sample().groups);
}

void ExpectBad(const PrestartAssignment& a, const std::string& field) {
  absl::StatusOr<PrestartAssignment> got = DecodePrestartAssignment(EncodePrestartAssignment(a));
  ASSERT_FALSE(got.ok()) << field;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find(field), std::string::npos) << got.status();
}

TEST(PrestartAssignmentTest, RefusesWhatAFreshLaunchCouldNotBe) {
  PrestartAssignment a = Sample();
  a.uid = 0;
  ExpectBad(a, "uid/gid");
  a = Sample();
  a.gid = 0;
  ExpectBad(a, "uid/gid");
  a = Sample();
  a.trial_path = "relative.so";
  ExpectBad(a, "trial_path");
  a = Sample();
  a.cwd = "";
  ExpectBad(a, "cwd");
  a = Sample();
  a.umask = 01000;
  ExpectBad(a, "umask");
  a = Sample();
  a.env.push_back("NO_EQUALS");
  ExpectBad(a, "env[3]");
  a = Sample();
  a.env.push_back("=value");
  ExpectBad(a, "env[3]");
  a = Sample();
  a.groups.assign(kMaxPrestartGroups + 1, 5);
  ExpectBad(a, "groups");
}

TEST(PrestartAssignmentTest, RefusesOversizeAndGarbage) {
  std::string big(kMaxPrestartAssignmentBytes + 1, ' ');
  EXPECT_NE(DecodePrestartAssignment(big).status().message().find("length"), std::string::npos);
  EXPECT_NE(DecodePrestartAssignment("not json").status().message().find("payload"), std::string::npos);
  EXPECT_NE(DecodePrestartAssignment("{\"cwd\": 5}").status().message().find("field"), std::string::npos);
  // Without set_user a uid of 0 is not looked at (the agent's own user).
  PrestartAssignment a = Sample();
  a.set_user = false;
  a.uid = a.gid = 0;
  EXPECT_TRUE(DecodePrestartAssignment(EncodePrestartAssignment(a)).ok());
}

}  // namespace
}  // namespace det
