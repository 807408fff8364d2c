#include "common/elf_symbols.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "common/test_loaded_library.h"
#include "tests/test_util.h"

namespace det {
namespace {

using det::testing::LoadedLibraryPath;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ElfSymbolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    libc_ = LoadedLibraryPath();
    ASSERT_FALSE(libc_.empty());
    bytes_ = Slurp(libc_);
    ASSERT_GT(bytes_.size(), sizeof(Elf64_Ehdr));
    std::memcpy(&eh_, bytes_.data(), sizeof(eh_));
    // A directory of this test's own: ctest runs the cases as parallel
    // processes, which overwrote one shared file under /tmp.
    path_ = dir_ / "elf_symbols_test.so";
  }
  std::string Check(const std::string& bytes, const std::string& symbol = "malloc") {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
    absl::Status st = CheckElfExports(path_, symbol, "trial.so");
    return st.ok() ? "OK" : std::string(st.message());
  }
  std::string WithHeader(const Elf64_Ehdr& eh) {
    std::string b = bytes_;
    std::memcpy(b.data(), &eh, sizeof(eh));
    return b;
  }
  det::testing::TempDir dir_;
  std::string libc_, bytes_, path_;
  Elf64_Ehdr eh_{};
};

TEST_F(ElfSymbolsTest, FindsExportedSymbolsOfARealLibrary) {
  EXPECT_TRUE(CheckElfExports(libc_, "malloc", "libc").ok());
  absl::Status st = CheckElfExports(libc_, kTrialEntrySymbol, "trial.so");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "trial.so: has no entry symbol 'det_trial_plugin_entry'")) << st;
  EXPECT_EQ(CheckElfExports("/nonexistent/x.so", "malloc", "trial.so").code(), absl::StatusCode::kNotFound);
}

TEST_F(ElfSymbolsTest, NotElfOrNotASharedLibrary) {
  EXPECT_TRUE(absl::StrContains(Check("this is text, not ELF\n"), "not an ELF file"));
  EXPECT_TRUE(absl::StrContains(Check(""), "not an ELF file"));
  Elf64_Ehdr eh = eh_;
  eh.e_type = ET_EXEC;
  EXPECT_TRUE(absl::StrContains(Check(WithHeader(eh)), "not a shared library"));
  eh = eh_;
  eh.e_ident[EI_CLASS] = ELFCLASS32;
  EXPECT_TRUE(absl::StrContains(Check(WithHeader(eh)), "64-bit"));
}

// Attacks: offsets and counts that point outside the file, or ask for huge
// reads, are refused with an error, never read.
TEST_F(ElfSymbolsTest, HostileOffsetsAndSizesAreRefused) {
  Elf64_Ehdr eh = eh_;
  eh.e_shoff = ~uint64_t{0} - 10;  // offset + size overflows
  EXPECT_TRUE(absl::StrContains(Check(WithHeader(eh)), "truncated section headers"));
  eh = eh_;
  eh.e_shnum = 0xffff;
  EXPECT_TRUE(absl::StrContains(Check(WithHeader(eh)), "truncated section headers"));
  eh = eh_;
  eh.e_shentsize = 12;
  EXPECT_TRUE(absl::StrContains(Check(WithHeader(eh)), "section headers"));
  // The library cut short: its section headers are at the end.
  EXPECT_TRUE(absl::StrContains(Check(bytes_.substr(0, bytes_.size() / 2)), "truncated"));
  // The offset and size of .dynsym and of the string table it links to,
  // corrupted in turn.
  auto header_at = [&](int i) { return eh_.e_shoff + static_cast<size_t>(i) * sizeof(Elf64_Shdr); };
  int dynsym = -1;
  for (int i = 0; i < eh_.e_shnum && dynsym < 0; ++i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, bytes_.data() + header_at(i), sizeof(sh));
    if (sh.sh_type == SHT_DYNSYM) dynsym = i;
  }
  ASSERT_GE(dynsym, 0);
  Elf64_Shdr dynsym_header;
  std::memcpy(&dynsym_header, bytes_.data() + header_at(dynsym), sizeof(dynsym_header));
  for (int i : {dynsym, static_cast<int>(dynsym_header.sh_link)}) {
    std::string b = bytes_;
    Elf64_Shdr sh;
    const size_t at = header_at(i);
    std::memcpy(&sh, b.data() + at, sizeof(sh));
    for (uint64_t bad : {~uint64_t{0}, uint64_t{1} << 40, static_cast<uint64_t>(b.size())}) {
      Elf64_Shdr evil = sh;
      evil.sh_size = bad;
      std::memcpy(b.data() + at, &evil, sizeof(evil));
      EXPECT_NE(Check(b), "OK") << "section " << i << " size " << bad;
      evil = sh;
      evil.sh_offset = bad;
      std::memcpy(b.data() + at, &evil, sizeof(evil));
      EXPECT_NE(Check(b), "OK") << "section " << i << " offset " << bad;
      std::memcpy(b.data() + at, &sh, sizeof(sh));
    }
  }
}

// Undefined symbols, DT_NEEDED and DT_SONAME of a real library, the same from
// the file and from its bytes.
TEST_F(ElfSymbolsTest, ReadsUndefinedSymbolsNeededAndSoname) {
  const std::string stdcxx = LoadedLibraryPath("libstdc++.so");
  ASSERT_FALSE(stdcxx.empty());
  absl::StatusOr<ElfDynamicInfo> info = ReadElfDynamic(stdcxx, "libstdc++");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->soname, "libstdc++.so.6");
  EXPECT_THAT(info->needed, ::testing::Contains("libc.so.6"));
  EXPECT_THAT(info->undefined, ::testing::Contains("malloc"));
  EXPECT_THAT(info->exported, ::testing::Contains("_ZSt9terminatev"));
  EXPECT_THAT(info->exported, ::testing::Not(::testing::Contains("malloc")));
  absl::StatusOr<ElfDynamicInfo> same = ReadElfDynamicFromBytes(Slurp(stdcxx), "libstdc++");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->undefined, info->undefined);
  EXPECT_EQ(same->exported, info->exported);
  EXPECT_EQ(same->needed, info->needed);
}

// A corrupted .dynamic (the section DT_NEEDED is read from) is refused, never
// read out of bounds; a DT_NEEDED offset past its string table reads as "".
TEST_F(ElfSymbolsTest, HostileDynamicSectionIsRefused) {
  auto header_at = [&](int i) { return eh_.e_shoff + static_cast<size_t>(i) * sizeof(Elf64_Shdr); };
  int dynamic = -1;
  for (int i = 0; i < eh_.e_shnum && dynamic < 0; ++i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, bytes_.data() + header_at(i), sizeof(sh));
    if (sh.sh_type == SHT_DYNAMIC) dynamic = i;
  }
  ASSERT_GE(dynamic, 0);
  Elf64_Shdr sh;
  std::memcpy(&sh, bytes_.data() + header_at(dynamic), sizeof(sh));
  auto with = [&](const Elf64_Shdr& evil) {
    std::string b = bytes_;
    std::memcpy(b.data() + header_at(dynamic), &evil, sizeof(evil));
    absl::StatusOr<ElfDynamicInfo> info = ReadElfDynamicFromBytes(b, "trial.so");
    return info.ok() ? std::string("OK") : std::string(info.status().message());
  };
  for (uint64_t bad : {~uint64_t{0}, uint64_t{1} << 40, static_cast<uint64_t>(bytes_.size())}) {
    Elf64_Shdr evil = sh;
    evil.sh_offset = bad;
    EXPECT_THAT(with(evil), ::testing::HasSubstr("trial.so: ")) << "offset " << bad;
    EXPECT_NE(with(evil), "OK");
    evil = sh;
    evil.sh_size = bad;
    EXPECT_NE(with(evil), "OK") << "size " << bad;
  }
  Elf64_Shdr evil = sh;
  evil.sh_entsize = 7;
  EXPECT_THAT(with(evil), ::testing::HasSubstr("malformed .dynamic"));
  evil = sh;
  evil.sh_link = 0xffff;
  EXPECT_THAT(with(evil), ::testing::HasSubstr("malformed .dynamic"));
  // Every DT_NEEDED pointing past the string table.
  std::string b = bytes_;
  for (uint64_t off = sh.sh_offset; off + sizeof(Elf64_Dyn) <= sh.sh_offset + sh.sh_size; off += sizeof(Elf64_Dyn)) {
    Elf64_Dyn d;
    std::memcpy(&d, b.data() + off, sizeof(d));
    if (d.d_tag != DT_NEEDED) continue;
    d.d_un.d_val = ~uint64_t{0};
    std::memcpy(b.data() + off, &d, sizeof(d));
  }
  absl::StatusOr<ElfDynamicInfo> info = ReadElfDynamicFromBytes(b, "trial.so");
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_FALSE(info->needed.empty());
  for (const std::string& n : info->needed) EXPECT_EQ(n, "");
}

// The fuzzer's seed (fuzz/corpus/elf_symbols/trial_seed.so, a hand-made
// trial.so of section headers only) reads as what it was made of.
TEST(ElfSymbolsSeedTest, FuzzSeedReadsAsMade) {
  absl::StatusOr<ElfDynamicInfo> info =
      ReadElfDynamic(std::string(DET_SOURCE_DIR) + "/fuzz/corpus/elf_symbols/trial_seed.so", "seed");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->exported, ::testing::ElementsAre(kTrialEntrySymbol));
  EXPECT_THAT(info->undefined, ::testing::ElementsAre("_ZNK3det12TrialContext11hparam_jsonERKSs", "_ZSt9terminatev",
                                                      "malloc"));
  EXPECT_THAT(info->needed, ::testing::ElementsAre("libdet_sdk.so.0", "libstdc++.so.6"));
  EXPECT_EQ(info->soname, "seed.so");
  EXPECT_THAT(info->runpath, ::testing::ElementsAre("$ORIGIN/../lib"));
}

}  // namespace
}  // namespace det
