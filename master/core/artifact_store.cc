#include "master/core/artifact_store.h"

#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/elf_symbols.h"
#include "common/safe_path.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "master/core/proto_convert.h"

namespace det::master {
namespace fs = std::filesystem;

absl::Status CheckSharedLibrary(const std::string& bytes) {
  if (bytes.empty()) return absl::InvalidArgumentError("trial.so is empty");
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0) {
    return absl::InvalidArgumentError("trial.so is not a shared library: it has no ELF header");
  }
  Elf64_Ehdr header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (header.e_ident[EI_CLASS] != ELFCLASS64) {
    return absl::InvalidArgumentError("trial.so is not a 64-bit ELF shared library");
  }
  if (header.e_type != ET_DYN) {
    return absl::InvalidArgumentError(absl::StrCat("trial.so is an ELF file but not a shared library (e_type ",
                                                   header.e_type, ")"));
  }
#if defined(__x86_64__)
  if (header.e_machine != EM_X86_64) {
    return absl::InvalidArgumentError(absl::StrCat("trial.so was built for another architecture (e_machine ",
                                                   header.e_machine, ")"));
  }
#elif defined(__aarch64__)
  if (header.e_machine != EM_AARCH64) {
    return absl::InvalidArgumentError(absl::StrCat("trial.so was built for another architecture (e_machine ",
                                                   header.e_machine, ")"));
  }
#endif
  return absl::OkStatus();
}

absl::StatusOr<std::string> ValidateTrialSoName(const std::string& name) {
  if (name.empty()) return std::string("trial.so");
  if (name.size() > 255) {
    return absl::InvalidArgumentError(absl::StrCat("trial_so_name: ", name.size(),
                                                   " bytes; a file name of at most 255 bytes, e.g. my_trial.so"));
  }
  for (unsigned char c : name) {
    if (c == '/' || c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          "trial_so_name: a file name without '/' or control characters (its last path component), e.g. my_trial.so");
    }
  }
  if (name == "." || name == "..") return absl::InvalidArgumentError("trial_so_name: '.' and '..' are not file names");
  if (!IsUtf8(name)) {
    return absl::InvalidArgumentError(
        "trial_so_name: not valid UTF-8; send the file name as UTF-8 (det-cli replaces other bytes with '?')");
  }
  return name;
}

absl::Status ArtifactStore::SetName(const std::string& sha256, const std::string& name) const {
  if (absl::Status st = ValidateSha256(sha256, "sha256"); !st.ok()) return st;
  DET_ASSIGN_OR_RETURN(std::string valid, ValidateTrialSoName(name));
  const std::string path = (fs::path(dir_) / (sha256 + ".name")).string();
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + RandomHex(8);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << valid;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("cannot store the name of artifact ", sha256));
  }
  return absl::OkStatus();
}

std::string ArtifactStore::Name(const std::string& sha256) const {
  if (!IsSha256Hex(sha256)) return "trial.so";
  std::ifstream in(fs::path(dir_) / (sha256 + ".name"), std::ios::binary);
  std::string name(256, '\0');
  in.read(name.data(), static_cast<std::streamsize>(name.size()));
  name.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  absl::StatusOr<std::string> valid = ValidateTrialSoName(name);
  return valid.ok() ? *valid : "trial.so";
}

std::string ArtifactStore::PathOf(const std::string& sha256) const { return (fs::path(dir_) / (sha256 + ".so")).string(); }

absl::StatusOr<std::string> ArtifactStore::FilePath(const std::string& sha256) const {
  if (!Has(sha256)) return absl::NotFoundError(absl::StrCat("artifact ", sha256.substr(0, 64), " is not stored"));
  return PathOf(sha256);
}

bool ArtifactStore::Has(const std::string& sha256) const { return IsSha256Hex(sha256) && fs::exists(PathOf(sha256)); }

absl::StatusOr<std::string> ArtifactStore::Put(const std::string& bytes) {
  absl::Status st = CheckSharedLibrary(bytes);
  if (!st.ok()) return st;
  std::string sha = Sha256Hex(bytes);
  if (Has(sha)) return sha;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  std::string tmp = PathOf(sha) + ".tmp." + std::to_string(getpid()) + "." +
                    std::to_string(reinterpret_cast<uintptr_t>(&bytes));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return absl::InternalError(absl::StrCat("cannot write artifact ", tmp));
  }
  if (absl::Status exports = CheckElfExports(tmp, kTrialEntrySymbol, "trial.so"); !exports.ok()) {
    fs::remove(tmp, ec);
    return exports;
  }
  fs::rename(tmp, PathOf(sha), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot store artifact ", sha, ": ", ec.message()));
  return sha;
}

absl::StatusOr<std::pair<std::string, int>> ArtifactStore::CreateTemp() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  std::string path = (fs::path(dir_) / "upload.tmp.XXXXXX").string();
  int fd = mkstemp(path.data());
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create a temporary artifact in ", dir_));
  return std::make_pair(path, fd);
}

absl::Status ArtifactStore::Adopt(const std::string& tmp_path, const std::string& sha256) {
  std::error_code ec;
  auto fail = [&](absl::Status st) {
    fs::remove(tmp_path, ec);
    return st;
  };
  if (absl::Status st = ValidateSha256(sha256, "sha256"); !st.ok()) return fail(st);
  std::string header(sizeof(Elf64_Ehdr), '\0');
  {
    std::ifstream in(tmp_path, std::ios::binary);
    in.read(header.data(), static_cast<std::streamsize>(header.size()));
    header.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  }
  if (absl::Status st = CheckSharedLibrary(header); !st.ok()) return fail(st);
  // The master never loads user code: the entry symbol is read from the
  // dynamic symbol table (a trial.so without DET_REGISTER_TRIAL would
  // otherwise be scheduled and fail on an agent).
  if (absl::Status st = CheckElfExports(tmp_path, kTrialEntrySymbol, "trial.so"); !st.ok()) return fail(st);
  if (Has(sha256)) return fail(absl::OkStatus());
  fs::rename(tmp_path, PathOf(sha256), ec);
  if (ec) return fail(absl::InternalError(absl::StrCat("cannot store artifact ", sha256, ": ", ec.message())));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ArtifactStore::Size(const std::string& sha256) const {
  // The hash names a file: never let it name one outside dir_.
  if (absl::Status st = ValidateSha256(sha256, "sha256"); !st.ok()) return st;
  std::error_code ec;
  auto size = fs::file_size(PathOf(sha256), ec);
  if (ec) return absl::NotFoundError(absl::StrCat("artifact ", sha256, " not found"));
  return static_cast<int64_t>(size);
}

absl::StatusOr<std::string> ArtifactStore::Read(const std::string& sha256, int64_t offset, int64_t max_bytes) const {
  if (absl::Status st = ValidateSha256(sha256, "sha256"); !st.ok()) return st;
  std::ifstream in(PathOf(sha256), std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("artifact ", sha256, " not found"));
  in.seekg(0, std::ios::end);
  int64_t size = in.tellg();
  if (offset < 0 || offset > size) return absl::OutOfRangeError("offset past the end of the artifact");
  in.seekg(offset);
  std::string out(static_cast<size_t>(std::min(max_bytes, size - offset)), '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  return out;
}

absl::Status ArtifactStore::Remove(const std::string& sha256) const {
  if (absl::Status st = ValidateSha256(sha256, "sha256"); !st.ok()) return st;
  std::error_code ec;
  fs::remove(fs::path(dir_) / (sha256 + ".name"), ec);
  fs::remove(PathOf(sha256), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot delete artifact ", sha256, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace det::master
