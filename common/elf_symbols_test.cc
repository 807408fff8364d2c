#include "common/elf_symbols.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "tests/test_util.h"

namespace det {
namespace {

// The path of this process's libc (a real, stripped-of-nothing shared library).
std::string LibcPath() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    size_t at = line.find('/');
    if (at != std::string::npos && line.find("libc.so") != std::string::npos) return line.substr(at);
  }
  return "";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ElfSymbolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    libc_ = LibcPath();
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

}  // namespace
}  // namespace det
