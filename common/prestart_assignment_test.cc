#include "common/prestart_assignment.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

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

// A process that kept a capability after the drop (securebits
// SECBIT_NO_SETUID_FIXUP, an ambient set) is refused, naming the set.
TEST(PrestartAssignmentTest, CapabilitiesLeftAfterTheDropAreRefused) {
  const std::string clean =
      "Name:\tdet-trial\nUid:\t20001\t20001\t20001\t20001\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n"
      "CapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\n";
  EXPECT_TRUE(CheckNoCapabilitiesLeft(clean).ok()) << CheckNoCapabilitiesLeft(clean);
  for (const char* field : {"CapPrm:", "CapEff:", "CapAmb:"}) {
    std::string kept = clean;
    const size_t at = kept.find(absl::StrCat(field, "\t")) + std::string(field).size() + 1;
    kept.replace(at, 16, "0000000000000002");  // CAP_DAC_OVERRIDE
    absl::Status st = CheckNoCapabilitiesLeft(kept);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << field << ": " << st;
    EXPECT_NE(st.message().find(absl::StrCat(field, " 0000000000000002")), std::string::npos) << st;
    std::string missing = clean;
    missing.erase(missing.find(field), 1);
    EXPECT_FALSE(CheckNoCapabilitiesLeft(missing).ok()) << field;
  }
}

}  // namespace
}  // namespace det
