// Bounds on what CheckTrialAbi does with an untrusted trial.so's symbol
// names: demangling (whose output can grow exponentially with the name's
// back-references) and the length of the names in its message.
#include <chrono>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/abi_check.h"

namespace det {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The mangled substitution <seq-id> of the substitution numbered `n`
// (0 is "S_", 1 is "S0_", 37 is "S10_").
std::string SeqId(size_t n) {
  if (n == 0) return "S_";
  const char* digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::string r;
  for (--n;; n /= 36) {
    r.insert(r.begin(), digits[n % 36]);
    if (n < 36) break;
  }
  return "S" + r + "_";
}

// det::f(A, pair<A, A>, pair<pair<A, A>, pair<A, A>>, ...): each of the
// `steps` parameters refers twice to the previous one, so the demangled name
// doubles per step (15 steps: 192 bytes demangle to 1.9 MB; 80: ~2^80).
std::string DoublingName(size_t steps) {
  std::string s = "_ZN3det1fE1ASt4pairIS0_S0_E";  // det S_, A S0_, std::pair S1_, pair<A, A> S2_
  for (size_t last = 3; last < 3 + steps; ++last) s += "S1_I" + SeqId(last) + SeqId(last) + "E";
  return s;
}

TEST(AbiCheckBoundsTest, BackReferencesAreCounted) {
  EXPECT_EQ(DemangleBackReferences("_ZN2at6TensorC1ERKS0_"), 1u);
  EXPECT_EQ(DemangleBackReferences("_ZN3det1fIiEEvT_fp_"), 2u);
  EXPECT_EQ(DemangleBackReferences(DoublingName(15)), 2u + 3 * 15);
  EXPECT_FALSE(DemangleTooComplex("_ZN2at6TensorC1ERKS0_"));
  EXPECT_TRUE(DemangleTooComplex(DoublingName(15)));
}

TEST(AbiCheckBoundsTest, ExponentialNameIsNotDemangled) {
  const std::string name = DoublingName(15);
  ASSERT_LT(name.size(), 200u);
  const std::string out = Demangle(name);
  EXPECT_LT(out.size(), 64u * 1024) << "a 192-byte name demangled to " << out.size() << " bytes";
  EXPECT_EQ(out, name);
  // A normal LibTorch symbol still demangles.
  EXPECT_EQ(Demangle("_ZN2at6TensorC1ERKS0_"), "at::Tensor::Tensor(at::Tensor const&)");
}

// ~2^80 bytes demangled: without the bound this never returns.
TEST(AbiCheckBoundsTest, CheckTrialAbiReturnsPromptlyOnAHugeExpansion) {
  ElfDynamicInfo trial;
  trial.undefined = {DoublingName(80)};
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = CheckTrialAbi(trial, AbiManifest{}, "my_trial.so", "the cluster");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("(not demangled: too complex)"));
  EXPECT_LT(s.message().size(), 2048u);
}

TEST(AbiCheckBoundsTest, LongNamesAreCutInTheMessage) {
  ElfDynamicInfo trial;
  const std::string huge = "_ZN3det" + std::to_string(100000) + std::string(100000, 'x') + "Ev";
  trial.undefined = {huge};
  absl::Status s = CheckTrialAbi(trial, AbiManifest{}, "my_trial.so", "the cluster");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_LT(s.message().size(), 2048u) << s.message().substr(0, 200);
  EXPECT_THAT(s.message(), HasSubstr("x\u2026"));
  // Demangled (short enough to demangle, long once demangled): both cut.
  const std::string long_id = "_ZN3det900" + std::string(900, 'y') + "Ev";
  trial.undefined = {long_id};
  s = CheckTrialAbi(trial, AbiManifest{}, "my_trial.so", "the cluster");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("det::yyyy"));
  EXPECT_THAT(s.message(), Not(HasSubstr(std::string(600, 'y'))));
  EXPECT_LT(s.message().size(), 1600u);
}

}  // namespace
}  // namespace det
