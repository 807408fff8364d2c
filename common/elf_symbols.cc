#include "common/elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace det {
namespace {

constexpr uint64_t kMaxTableBytes = uint64_t{64} << 20;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads [offset, offset + n) of the file, which must lie inside `size`.
bool ReadAt(int fd, uint64_t size, uint64_t offset, uint64_t n, void* out) {
  if (offset > size || n > size - offset) return false;
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got <= 0) return false;
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
  return true;
}

}  // namespace

absl::Status CheckElfExports(const std::string& path, const std::string& symbol, const std::string& label) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return absl::NotFoundError(absl::StrCat(label, ": cannot open ", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto bad = [&](const std::string& why) { return absl::InvalidArgumentError(absl::StrCat(label, ": ", why)); };
  Elf64_Ehdr eh{};
  if (!ReadAt(fd.get(), size, 0, sizeof(eh), &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return bad("not an ELF file (build it as a shared library of this platform)");
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return bad("not a 64-bit little-endian ELF file");
  }
  if (eh.e_type != ET_DYN) return bad("not a shared library (link it with -shared)");
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0) return bad("has no section headers to read");
  const uint64_t sh_bytes = uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr);
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  if (!ReadAt(fd.get(), size, eh.e_shoff, sh_bytes, sections.data())) return bad("truncated section headers");
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= sections.size()) return bad("malformed .dynsym");
    const Elf64_Shdr& strtab = sections[sh.sh_link];
    if (sh.sh_size > kMaxTableBytes || strtab.sh_size > kMaxTableBytes || strtab.sh_type != SHT_STRTAB) {
      return bad("malformed or oversized dynamic symbol table");
    }
    std::vector<Elf64_Sym> syms(sh.sh_size / sizeof(Elf64_Sym));
    std::string names(strtab.sh_size, '\0');
    if (!ReadAt(fd.get(), size, sh.sh_offset, syms.size() * sizeof(Elf64_Sym), syms.data()) ||
        !ReadAt(fd.get(), size, strtab.sh_offset, names.size(), names.data())) {
      return bad("truncated dynamic symbol table");
    }
    for (const Elf64_Sym& sym : syms) {
      const int bind = ELF64_ST_BIND(sym.st_info);
      const int vis = ELF64_ST_VISIBILITY(sym.st_other);
      if (sym.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK)) continue;
      if (vis != STV_DEFAULT && vis != STV_PROTECTED) continue;
      if (sym.st_name >= names.size()) continue;
      const char* name = names.data() + sym.st_name;
      const size_t len = strnlen(name, names.size() - sym.st_name);
      if (len == symbol.size() && std::memcmp(name, symbol.data(), len) == 0) return absl::OkStatus();
    }
    return bad(absl::StrCat("has no entry symbol '", symbol, "' (declare the trial with DET_REGISTER_TRIAL)"));
  }
  return bad("has no dynamic symbol table");
}

}  // namespace det
