#include "common/abi_check.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/test_loaded_library.h"

namespace det {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using det::testing::LoadedLibraryPath;

// A manifest of this process's libstdc++ plus made-up SDK and LibTorch exports.
AbiManifest ClusterManifest() {
  const std::string stdcxx = LoadedLibraryPath("libstdc++.so");
  EXPECT_FALSE(stdcxx.empty());
  absl::StatusOr<AbiManifest> m = BuildAbiManifest({stdcxx});
  EXPECT_TRUE(m.ok()) << m.status();
  std::vector<uint64_t> hashes = m->symbol_hashes;
  for (const char* s : {"_ZN3det12TrialContext14report_metricsERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
                        "_ZN2at4_ops3add4callERKNS_6TensorES4_RKN3c106ScalarE"}) {
    hashes.push_back(AbiSymbolHash(s));
  }
  absl::StatusOr<AbiManifest> out =
      AbiManifestFromParts(hashes, {"libdet_sdk.so.0"}, "0.1.0", m->libraries, "test");
  EXPECT_TRUE(out.ok()) << out.status();
  return *out;
}

ElfDynamicInfo Trial(std::vector<std::string> undefined, std::vector<std::string> needed = {"libdet_sdk.so.0"}) {
  ElfDynamicInfo t;
  t.undefined = std::move(undefined);
  t.needed = std::move(needed);
  t.exported = {kTrialEntrySymbol};
  return t;
}

std::string Check(const ElfDynamicInfo& t) {
  absl::Status st = CheckTrialAbi(t, ClusterManifest(), "my_trial.so", "the cluster's libraries");
  if (st.ok()) return "OK";
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  return std::string(st.message());
}

TEST(AbiCheckTest, WhichSymbolsAreChecked) {
  EXPECT_EQ(AbiSymbolNamespace("_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm"), "std");
  EXPECT_EQ(AbiSymbolNamespace("_ZNKSs4sizeEv"), "std");
  EXPECT_EQ(AbiSymbolNamespace("_ZSt9terminatev"), "std");
  EXPECT_EQ(AbiSymbolNamespace("_ZTISt9exception"), "std");
  EXPECT_EQ(AbiSymbolNamespace("_ZTVN10__cxxabiv117__class_type_infoE"), "__cxxabiv1");
  EXPECT_EQ(AbiSymbolNamespace("_ZN3c1019UndefinedTensorImpl10_singletonE"), "c10");
  EXPECT_EQ(AbiSymbolNamespace("_ZNK2at10TensorBase4sizeEl"), "at");
  EXPECT_EQ(AbiSymbolNamespace("_ZN5torch8autograd12VariableInfoC1Ev"), "torch");
  EXPECT_EQ(AbiSymbolNamespace("_ZN3det12TrialContextD1Ev"), "det");
  // C symbols, operator new, other namespaces and garbage are not checked.
  for (const char* s : {"malloc", "__cxa_throw", "_Znwm", "_ZN2cv3Mat7releaseEv", "_ZN", "_Z", "_ZN99x", "",
                        "_ZN18446744073709551617x"}) {
    EXPECT_EQ(AbiSymbolNamespace(s), "") << s;
  }
}

TEST(AbiCheckTest, ChecksOnlyTheClusterLibraries) {
  EXPECT_TRUE(IsAbiLibrary("libdet_sdk.so.0"));
  EXPECT_TRUE(IsAbiLibrary("libtorch_cpu.so.1.13"));
  EXPECT_TRUE(IsAbiLibrary("libc10.so"));
  EXPECT_TRUE(IsAbiLibrary("libstdc++.so.6"));
  EXPECT_FALSE(IsAbiLibrary("libc.so.6"));
  EXPECT_FALSE(IsAbiLibrary("libm.so.6"));
  EXPECT_FALSE(IsAbiLibrary("libgcc_s.so.1"));
  EXPECT_TRUE(IsSdkSoname("libdet_sdk.so.9"));
  EXPECT_FALSE(IsSdkSoname("libtorch.so"));
}

TEST(AbiCheckTest, AGoodTrialPasses) {
  EXPECT_EQ(Check(Trial({"malloc", "__cxa_throw", "_ZN2cv3Mat7releaseEv", "_ZSt9terminatev",
                         "_ZN2at4_ops3add4callERKNS_6TensorES4_RKN3c106ScalarE",
                         "_ZN3det12TrialContext14report_metricsERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"},
                        {"libdet_sdk.so.0", "libtorch.so", "libc.so.6"})),
            "OK");
}

// The old std::string (Ss) in an SDK symbol: the _GLIBCXX_USE_CXX11_ABI=0 build.
TEST(AbiCheckTest, OldStringAbiIsNamedAsTheCause) {
  const std::string msg = Check(Trial({"_ZSt9terminatev", "_ZN3det12TrialContext14report_metricsERKSs"}));
  EXPECT_THAT(msg, HasSubstr("my_trial.so: undefined symbol det::TrialContext::report_metrics(std::string const&)"));
  EXPECT_THAT(msg, HasSubstr("(_ZN3det12TrialContext14report_metricsERKSs)"));
  EXPECT_THAT(msg, HasSubstr("is not exported by the cluster's libraries"));
  EXPECT_THAT(msg, HasSubstr("built with -D_GLIBCXX_USE_CXX11_ABI=0 (the cluster's LibTorch uses the new ABI"));
  EXPECT_THAT(msg, Not(HasSubstr("more")));
  // libstdc++ exports both string ABIs: its old-ABI symbols resolve.
  const std::string two = Check(Trial({"_ZNKSs4sizeEv", "_ZN2at4_ops3add4callERKSs",
                                       "_ZN3det12TrialContext14report_metricsERKSs"}));
  EXPECT_THAT(two, HasSubstr("undefined symbol at::_ops::add::call(std::string const&)"));
  EXPECT_THAT(two, HasSubstr("(nor are 1 more)"));
}

TEST(AbiCheckTest, OtherCausesAreNamed) {
  EXPECT_THAT(Check(Trial({"_ZN2at4_ops3mul4callERKNS_6TensorES4_"})),
              HasSubstr("at::_ops::mul::call(at::Tensor const&, at::Tensor const&) (_ZN2at4_ops3mul4callERKNS_6TensorES4_) "
                        "is not exported by the cluster's libraries: likely built against another LibTorch"));
  EXPECT_THAT(Check(Trial({"_ZN3det12TrialContext3fooEv"})),
              HasSubstr("likely built against another Trial SDK than the cluster's (SDK version 0.1.0)"));
  EXPECT_THAT(Check(Trial({"_ZSt28__throw_bad_array_new_lengthv_not_in_libstdcxx"})),
              HasSubstr("built with a newer GCC/libstdc++"));
}

TEST(AbiCheckTest, AnotherSdkSonameIsRefused) {
  const std::string msg = Check(Trial({}, {"libtorch.so", "libdet_sdk.so.9"}));
  EXPECT_THAT(msg, HasSubstr("my_trial.so: linked against libdet_sdk.so.9, the cluster has libdet_sdk.so.0 "
                             "(SDK version 0.1.0)"));
}

TEST(AbiCheckTest, ManifestBoundsAndHashes) {
  EXPECT_NE(AbiSymbolHash("a"), AbiSymbolHash("b"));
  EXPECT_EQ(AbiSymbolHash(""), 0xcbf29ce484222325ULL);  // FNV-1a 64's offset basis: stable across hosts
  EXPECT_EQ(AbiSymbolHash("a"), 0xaf63dc4c8601ec8cULL);
  std::vector<uint64_t> many(kMaxAbiManifestSymbols + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i;
  EXPECT_THAT(AbiManifestFromParts(many, {}, "", {}, "agent 'a1'").status().message(),
              HasSubstr("agent 'a1': ABI manifest has 262145 symbols; the limit is 262144"));
  EXPECT_FALSE(AbiManifestFromParts({}, {std::string(256, 'x')}, "", {}, "a").ok());
  EXPECT_FALSE(AbiManifestFromParts({}, std::vector<std::string>(17, "libdet_sdk.so.0"), "", {}, "a").ok());
  absl::StatusOr<AbiManifest> m = AbiManifestFromParts({3, 1, 2, 3}, {}, "", {}, "a");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->symbol_hashes, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(AbiCheckTest, DemangleIsBounded) {
  EXPECT_EQ(Demangle("_ZSt9terminatev"), "std::terminate()");
  EXPECT_EQ(Demangle("not mangled"), "not mangled");
  const std::string huge = "_ZN" + std::string(2000, '1') + "E";
  EXPECT_EQ(Demangle(huge), huge);
}

}  // namespace
}  // namespace det
