#include "common/elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace det {
namespace {

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

// Reads [offset, offset + n) of a file or buffer of `size` bytes; false when
// the range is not inside it.
struct Source {
  uint64_t size = 0;
  std::function<bool(uint64_t offset, uint64_t n, void* out)> read;

  // Whether [offset, offset + n) lies inside: checked before allocating a
  // buffer for it, so a small hostile file cannot make us allocate much.
  bool Contains(uint64_t offset, uint64_t n) const { return offset <= size && n <= size - offset; }
  bool ReadAt(uint64_t offset, uint64_t n, void* out) const {
    if (!Contains(offset, n)) return false;
    return n == 0 || read(offset, n, out);
  }
};

bool PreadAll(int fd, uint64_t offset, uint64_t n, void* out) {
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

// The NUL-terminated name at `offset` of a string table, cut at its end.
std::string NameAt(const std::string& table, uint64_t offset) {
  if (offset >= table.size()) return "";
  const char* p = table.data() + offset;
  return std::string(p, strnlen(p, table.size() - offset));
}

class Reader {
 public:
  Reader(const Source& src, const std::string& label) : src_(src), label_(label) {}

  absl::StatusOr<ElfDynamicInfo> Read() {
    Elf64_Ehdr eh{};
    if (!src_.ReadAt(0, sizeof(eh), &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
      return Bad("not an ELF file (build it as a shared library of this platform)");
    }
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
      return Bad("not a 64-bit little-endian ELF file");
    }
    if (eh.e_type != ET_DYN) return Bad("not a shared library (link it with -shared)");
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0) return Bad("has no section headers to read");
    if (!src_.Contains(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) return Bad("truncated section headers");
    sections_.resize(eh.e_shnum);
    if (!src_.ReadAt(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), sections_.data())) {
      return Bad("truncated section headers");
    }
    ElfDynamicInfo info;
    bool have_dynsym = false;
    for (const Elf64_Shdr& sh : sections_) {
      if (sh.sh_type == SHT_DYNSYM && !have_dynsym) {
        if (absl::Status st = ReadSymbols(sh, &info); !st.ok()) return st;
        have_dynsym = true;
      } else if (sh.sh_type == SHT_DYNAMIC) {
        if (absl::Status st = ReadDynamic(sh, &info); !st.ok()) return st;
      }
    }
    if (!have_dynsym) return Bad("has no dynamic symbol table");
    return info;
  }

 private:
  absl::Status Bad(const std::string& why) const { return absl::InvalidArgumentError(absl::StrCat(label_, ": ", why)); }

  // The string table section `link` names, read whole.
  absl::StatusOr<std::string> StringTable(uint32_t link, const char* what) const {
    if (link >= sections_.size() || sections_[link].sh_type != SHT_STRTAB) {
      return Bad(absl::StrCat("malformed ", what, " (its string table)"));
    }
    const Elf64_Shdr& sh = sections_[link];
    if (sh.sh_size > kMaxElfTableBytes) return Bad(absl::StrCat("oversized string table of ", what));
    if (!src_.Contains(sh.sh_offset, sh.sh_size)) return Bad(absl::StrCat("truncated string table of ", what));
    std::string names(sh.sh_size, '\0');
    if (!src_.ReadAt(sh.sh_offset, names.size(), names.data())) {
      return Bad(absl::StrCat("truncated string table of ", what));
    }
    return names;
  }

  absl::Status ReadSymbols(const Elf64_Shdr& sh, ElfDynamicInfo* info) const {
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= sections_.size()) return Bad("malformed .dynsym");
    if (sh.sh_size > kMaxElfTableBytes || sh.sh_size / sizeof(Elf64_Sym) > kMaxElfSymbols) {
      return Bad("malformed or oversized dynamic symbol table");
    }
    if (!src_.Contains(sh.sh_offset, sh.sh_size)) return Bad("truncated dynamic symbol table");
    absl::StatusOr<std::string> names = StringTable(sh.sh_link, "dynamic symbol table");
    if (!names.ok()) return names.status();
    std::vector<Elf64_Sym> syms(sh.sh_size / sizeof(Elf64_Sym));
    if (!src_.ReadAt(sh.sh_offset, syms.size() * sizeof(Elf64_Sym), syms.data())) {
      return Bad("truncated dynamic symbol table");
    }
    for (const Elf64_Sym& sym : syms) {
      const int bind = ELF64_ST_BIND(sym.st_info);
      const int vis = ELF64_ST_VISIBILITY(sym.st_other);
      if (sym.st_name == 0 || sym.st_name >= names->size()) continue;
      if (sym.st_shndx == SHN_UNDEF) {
        if (bind == STB_GLOBAL) info->undefined.push_back(NameAt(*names, sym.st_name));
        continue;
      }
      if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
      if (vis != STV_DEFAULT && vis != STV_PROTECTED) continue;
      info->exported.push_back(NameAt(*names, sym.st_name));
    }
    return absl::OkStatus();
  }

  absl::Status ReadDynamic(const Elf64_Shdr& sh, ElfDynamicInfo* info) const {
    if (sh.sh_entsize != sizeof(Elf64_Dyn) || sh.sh_size > kMaxElfTableBytes) return Bad("malformed .dynamic");
    if (!src_.Contains(sh.sh_offset, sh.sh_size)) return Bad("truncated .dynamic");
    absl::StatusOr<std::string> names = StringTable(sh.sh_link, ".dynamic");
    if (!names.ok()) return names.status();
    std::vector<Elf64_Dyn> entries(sh.sh_size / sizeof(Elf64_Dyn));
    if (!src_.ReadAt(sh.sh_offset, entries.size() * sizeof(Elf64_Dyn), entries.data())) {
      return Bad("truncated .dynamic");
    }
    std::string runpath, rpath;
    for (const Elf64_Dyn& d : entries) {
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED) {
        if (info->needed.size() >= kMaxElfNeeded) return Bad(absl::StrCat("more than ", kMaxElfNeeded, " DT_NEEDED"));
        info->needed.push_back(NameAt(*names, d.d_un.d_val));
      } else if (d.d_tag == DT_SONAME) {
        info->soname = NameAt(*names, d.d_un.d_val);
      } else if (d.d_tag == DT_RUNPATH) {
        runpath = NameAt(*names, d.d_un.d_val);
      } else if (d.d_tag == DT_RPATH) {
        rpath = NameAt(*names, d.d_un.d_val);
      }
    }
    const std::string& path = runpath.empty() ? rpath : runpath;
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      if (info->runpath.size() >= kMaxElfNeeded) break;
      info->runpath.emplace_back(dir);
    }
    return absl::OkStatus();
  }

  const Source& src_;
  const std::string& label_;
  std::vector<Elf64_Shdr> sections_;
};

}  // namespace

absl::StatusOr<ElfDynamicInfo> ReadElfDynamic(const std::string& path, const std::string& label) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return absl::NotFoundError(absl::StrCat(label, ": cannot open ", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": not a regular file"));
  }
  Source src;
  src.size = static_cast<uint64_t>(st.st_size);
  const int raw = fd.get();
  src.read = [raw](uint64_t offset, uint64_t n, void* out) { return PreadAll(raw, offset, n, out); };
  return Reader(src, label).Read();
}

absl::StatusOr<ElfDynamicInfo> ReadElfDynamicFromBytes(std::string_view bytes, const std::string& label) {
  Source src;
  src.size = bytes.size();
  src.read = [bytes](uint64_t offset, uint64_t n, void* out) {
    std::memcpy(out, bytes.data() + offset, n);
    return true;
  };
  return Reader(src, label).Read();
}

absl::Status CheckElfExports(const std::string& path, const std::string& symbol, const std::string& label) {
  absl::StatusOr<ElfDynamicInfo> info = ReadElfDynamic(path, label);
  if (!info.ok()) return info.status();
  for (const std::string& name : info->exported) {
    if (name == symbol) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(label, ": has no entry symbol '", symbol, "' (declare the trial with DET_REGISTER_TRIAL)"));
}

}  // namespace det
