// The master's create-time ABI check (issue 45): a trial.so is checked
// against the AbiManifest each agent of the experiment's pool reported; one
// agent that can load it suffices; none reported is a warning; a manifest
// over its bounds refuses the registration; trial_so_name is a label.
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/abi_check.h"
#include "common/det_version.h"
#include "common/sha256.h"
#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A hand-made trial.so (fuzz/corpus/elf_symbols/trial_seed.so): it exports
// the entry symbol, needs libdet_sdk.so.0 and libstdc++.so.6, and its
// undefined symbols are det::TrialContext::hparam_json(std::string const&)
// const with the old std::string, std::terminate() and malloc.
std::string SeedTrialSo() {
  std::ifstream in(std::string(DET_SOURCE_DIR) + "/fuzz/corpus/elf_symbols/trial_seed.so", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr char kOldAbiSymbol[] = "_ZNK3det12TrialContext11hparam_jsonERKSs";

class TrialAbiCoreTest : public MasterCoreFixture {
 protected:
  // Registers agent `id` reporting a manifest of `exports` (none: no manifest).
  absl::Status Register(const std::string& id, const std::vector<std::string>& exports, bool manifest = true) {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_version(det::kDetVersion);
    req.set_hostname("localhost");
    req.add_devices()->set_id(0);
    if (manifest) {
      agentv1::AbiManifest* m = req.mutable_abi_manifest();
      for (const auto& s : exports) m->add_symbol_hashes(AbiSymbolHash(s));
      m->add_sdk_sonames("libdet_sdk.so.0");
      m->set_sdk_version("0.1.0");
      m->add_libraries("libdet_sdk.so.0");
      m->add_libraries("libstdc++.so.6");
    }
    return core_->RegisterAgent(req).status();
  }
  absl::StatusOr<apiv1::CreateExperimentResponse> Create(const std::string& name = "my_trial.so") {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(det::testing::SingleTrialConfig("abi", dir_ / "checkpoints"));
    req.set_trial_so(SeedTrialSo());
    req.set_trial_so_name(name);
    return core_->CreateExperiment(req);
  }
};

TEST_F(TrialAbiCoreTest, WithNoManifestTheMasterWarnsThatItDidNotCheck) {
  ASSERT_TRUE(Register("old", {}, /*manifest=*/false).ok());
  auto created = Create();
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_THAT(created->warnings(),
              ElementsAre(HasSubstr("no agent of resource pool 'default' has reported its libraries yet, so the "
                                    "master did not check my_trial.so")));
}

TEST_F(TrialAbiCoreTest, RefusedWhenNoAgentOfThePoolCanLoadIt) {
  ASSERT_TRUE(Register("a1", {"_ZSt9terminatev"}).ok());
  ASSERT_TRUE(Register("a2", {"_ZSt9terminatev"}).ok());
  auto created = Create();
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(),
              HasSubstr("my_trial.so: undefined symbol det::TrialContext::hparam_json(std::string const&) const "
                        "(_ZNK3det12TrialContext11hparam_jsonERKSs) is not exported by agent 'a1' (libdet_sdk.so.0, "
                        "libstdc++.so.6): likely built with -D_GLIBCXX_USE_CXX11_ABI=0"));
  EXPECT_THAT(created.status().message(), HasSubstr("; none of the 2 agents of resource pool 'default' can load it"));
  // The refused trial.so is not kept.
  EXPECT_FALSE(core_->artifacts().Has(Sha256Hex(SeedTrialSo())));
}

// `det-cli experiment set trial-so` (PatchExperiment) runs the same check
// on a PAUSED experiment's replacement, and a refused upload is not kept
// either unless an experiment uses it.
TEST_F(TrialAbiCoreTest, AReplacementTrialSoNoAgentCanLoadIsRefusedAndNotKept) {
  apiv1::CreateExperimentRequest req;
  req.set_config_yaml(det::testing::SingleTrialConfig("abi", dir_ / "checkpoints"));
  req.set_trial_so(det::testing::FakeTrialSo());
  auto paused = core_->CreateExperiment(req);
  ASSERT_TRUE(paused.ok()) << paused.status();
  req.set_trial_so(SeedTrialSo());  // uploaded before any agent reported: unchecked
  req.set_validate_only(true);
  ASSERT_TRUE(core_->CreateExperiment(req).ok());
  const std::string seed_sha = Sha256Hex(SeedTrialSo());
  ASSERT_TRUE(core_->artifacts().Has(seed_sha));
  ASSERT_TRUE(Register("a1", {"_ZSt9terminatev"}).ok());

  apiv1::PatchExperimentRequest patch;
  patch.set_experiment_id(paused->experiment().id());
  patch.set_trial_so_sha256(seed_sha);
  patch.set_trial_so_name("my_trial.so");
  absl::Status st = core_->PatchExperiment(patch).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("is not exported by agent 'a1'"));
  EXPECT_FALSE(core_->artifacts().Has(seed_sha)) << "the refused upload was kept";
  EXPECT_TRUE(core_->artifacts().Has(Sha256Hex(det::testing::FakeTrialSo())));
}

TEST_F(TrialAbiCoreTest, OneAgentThatCanLoadItIsEnough) {
  ASSERT_TRUE(Register("a1", {"_ZSt9terminatev"}).ok());
  ASSERT_TRUE(Register("a2", {"_ZSt9terminatev", kOldAbiSymbol}).ok());
  auto created = Create();
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_THAT(created->warnings(), IsEmpty());
}

TEST_F(TrialAbiCoreTest, AManifestOverItsBoundsRefusesTheRegistration) {
  agentv1::RegisterAgentRequest req;
  req.set_agent_id("big");
  req.set_version(det::kDetVersion);
  req.add_devices()->set_id(0);
  for (size_t i = 0; i <= kMaxAbiManifestSymbols; ++i) req.mutable_abi_manifest()->add_symbol_hashes(i);
  absl::Status st = core_->RegisterAgent(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("agent 'big': abi_manifest over its bounds (262144 symbols, 16 libraries)"));
  req.mutable_abi_manifest()->clear_symbol_hashes();
  req.mutable_abi_manifest()->add_libraries(std::string(256, 'x'));
  st = core_->RegisterAgent(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("agent 'big': ABI manifest library name of 256 bytes"));
}

TEST_F(TrialAbiCoreTest, TheNameIsALabelNeverAPath) {
  auto created = Create("../../etc/passwd");
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("trial_so_name: a file name without '/'"));
}

}  // namespace
}  // namespace det::master
