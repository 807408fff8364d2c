#include "common/trial_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"

namespace det {
namespace {

using Vars = std::vector<std::pair<std::string, std::string>>;

TEST(TrialEnvRulesTest, ReservedAndMalformedNamesAreRefusedNamingTheVariable) {
  for (const std::string& name :
       std::vector<std::string>{"LD_PRELOAD", "LD_LIBRARY_PATH", "DET_ALLOCATION_TOKEN", "DET_MASTER"}) {
    absl::Status st = ValidateTrialEnv(Vars{{"OK", "1"}, {name, "x"}}, "environment.environment_variables");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_TRUE(absl::StrContains(st.message(), "environment.environment_variables: variable " + name)) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), "remove it")) << st;
  }
  for (const std::string& name :
       std::vector<std::string>{"", "1ABC", "A-B", "A B", "A=B", std::string(257, 'A'), "\xff"}) {
    absl::Status st = ValidateTrialEnv(Vars{{name, "x"}}, "environment.environment_variables");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_TRUE(absl::StrContains(st.message(), "is not [A-Za-z_][A-Za-z0-9_]*")) << st;
  }
  absl::Status st = ValidateTrialEnv(Vars{{"BAD", std::string("a\0b", 3)}}, "env");
  EXPECT_TRUE(absl::StrContains(st.message(), "the value of BAD")) << st;
}

TEST(TrialEnvRulesTest, CountAndSizeAreBounded) {
  Vars many;
  for (size_t i = 0; i <= kMaxTrialEnvVars; ++i) many.emplace_back("V" + std::to_string(i), "x");
  EXPECT_TRUE(absl::StrContains(ValidateTrialEnv(many, "f").message(), "variables, more than the limit"));
  Vars big;
  for (int i = 0; i < 17; ++i) big.emplace_back("V" + std::to_string(i), std::string(kMaxTrialEnvValueBytes - 8, 'x'));
  EXPECT_TRUE(absl::StrContains(ValidateTrialEnv(big, "f").message(), "bytes of variables")) << ValidateTrialEnv(big, "f");
  EXPECT_EQ(ValidateTrialEnv(Vars{{"V", std::string(kMaxTrialEnvValueBytes + 1, 'x')}}, "f").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateTrialEnv(std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}, {"_x9", ""}}, "f").ok());
}

}  // namespace
}  // namespace det
