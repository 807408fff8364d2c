#include "common/abi_check.h"

#include <cxxabi.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace det {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxDemangleBytes = 1024;
constexpr size_t kMaxShownNameBytes = 512;

bool IsDigitOrUpper(char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z'); }

// `name` cut to kMaxShownNameBytes (not inside a UTF-8 sequence), "…" marking a cut.
std::string Shown(const std::string& name) {
  if (name.size() <= kMaxShownNameBytes) return name;
  size_t n = kMaxShownNameBytes;
  while (n > 0 && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80) --n;
  return name.substr(0, n) + "\u2026";
}

bool Starts(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool Has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Skips a <number><identifier> at `*i`; returns the identifier or "".
std::string_view SourceName(std::string_view s, size_t* i) {
  size_t n = 0, j = *i;
  while (j < s.size() && s[j] >= '0' && s[j] <= '9' && n < 100000) n = n * 10 + static_cast<size_t>(s[j++] - '0');
  if (j == *i || n == 0 || n > s.size() - j) return {};
  *i = j + n;
  return s.substr(j, n);
}

// Directories of the libraries this process has loaded (the loader's cache
// and default paths as it resolved them here).
int AddLoadedDir(struct dl_phdr_info* info, size_t, void* data) {
  auto* dirs = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] != '/') return 0;
  std::string dir = fs::path(info->dlpi_name).parent_path().string();
  if (std::find(dirs->begin(), dirs->end(), dir) == dirs->end()) dirs->push_back(dir);
  return 0;
}

std::vector<std::string> SearchDirs(const std::string& origin, const std::vector<std::string>& runpath) {
  std::vector<std::string> dirs;
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) {
    for (absl::string_view d : absl::StrSplit(ld, ':', absl::SkipEmpty())) dirs.emplace_back(d);
  }
  for (const std::string& d : runpath) {
    dirs.push_back(absl::StrReplaceAll(d, {{"${ORIGIN}", origin}, {"$ORIGIN", origin}}));
  }
  dl_iterate_phdr(AddLoadedDir, &dirs);
  for (const char* d : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                        "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"}) {
    dirs.emplace_back(d);
  }
  return dirs;
}

// `name` resolved on PATH when it has no '/' (as execvp would run it).
std::string OnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "", ':', absl::SkipEmpty())) {
    std::error_code ec;
    const fs::path candidate = fs::path(std::string(dir)) / name;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return name;
}

std::string SdkVersionOf(const std::string& path) {
  std::error_code ec;
  const std::string real = fs::canonical(path, ec).filename().string();
  const size_t at = real.find(".so.");
  return ec || at == std::string::npos ? "" : real.substr(at + 4);
}

std::string LikelyCause(const std::string& demangled, const std::string& ns, const std::string& sdk_version) {
  for (const char* old : {"std::string", "std::basic_string<", "std::basic_ostringstream", "std::basic_istringstream",
                          "std::basic_stringstream", "std::basic_stringbuf", "std::list<", "std::wstring"}) {
    if (absl::StrContains(demangled, old)) {
      return "built with -D_GLIBCXX_USE_CXX11_ABI=0 (the cluster's LibTorch uses the new ABI, "
             "std::__cxx11::basic_string); rebuild without that flag";
    }
  }
  if (ns == "c10" || ns == "at" || ns == "torch" || ns == "caffe2") {
    return "built against another LibTorch than the cluster's; rebuild against the LibTorch det-cpp uses "
           "(find_package(det) finds it)";
  }
  if (ns == "det") {
    return absl::StrCat("built against another Trial SDK than the cluster's",
                        sdk_version.empty() ? "" : absl::StrCat(" (SDK version ", sdk_version, ")"),
                        "; rebuild against the cluster's SDK");
  }
  return "built with a newer GCC/libstdc++ than the cluster's; rebuild with the cluster's compiler";
}

}  // namespace

bool AbiManifest::Exports(std::string_view symbol) const {
  return std::binary_search(symbol_hashes.begin(), symbol_hashes.end(), AbiSymbolHash(symbol));
}

uint64_t AbiSymbolHash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string AbiSymbolNamespace(std::string_view s) {
  if (!Starts(s, "_Z")) return "";
  size_t i = 2;
  if (s.substr(i, 2) == "TV" || s.substr(i, 2) == "TI" || s.substr(i, 2) == "TS" || s.substr(i, 2) == "GV") i += 2;
  if (i < s.size() && s[i] == 'N') {
    ++i;
    while (i < s.size() && std::strchr("rVKRO", s[i]) != nullptr) ++i;
  }
  const std::string_view rest = s.substr(std::min(i, s.size()));
  if (Starts(rest, "St")) return "std";
  for (const char* abbrev : {"Sa", "Sb", "Ss", "Si", "So", "Sd"}) {
    if (Starts(rest, abbrev)) return "std";
  }
  const std::string_view name = SourceName(s, &i);
  for (const char* ns : {"c10", "at", "torch", "caffe2", "det", "__gnu_cxx", "__cxxabiv1"}) {
    if (name == ns) return std::string(ns);
  }
  return "";
}

std::string LikelyAbiCause(const std::string& mangled, const std::string& sdk_version) {
  return LikelyCause(Demangle(mangled), AbiSymbolNamespace(mangled), sdk_version);
}

bool IsSdkSoname(std::string_view soname) { return Starts(soname, "libdet_sdk.so"); }

bool IsAbiLibrary(std::string_view soname) {
  return IsSdkSoname(soname) || Starts(soname, "libstdc++.so") ||
         (Starts(soname, "libtorch") && Has(soname, ".so")) ||
         (Starts(soname, "libc10") && Has(soname, ".so"));
}

size_t DemangleBackReferences(std::string_view mangled) {
  size_t refs = 0;
  for (size_t i = 0; i + 1 < mangled.size(); ++i) {
    const char c = mangled[i];
    if (c == 'f' && (mangled[i + 1] == 'p' || mangled[i + 1] == 'L')) {
      ++refs;
    } else if (c == 'S' || c == 'T') {
      size_t j = i + 1;
      while (j < mangled.size() && (c == 'S' ? IsDigitOrUpper(mangled[j]) : mangled[j] >= '0' && mangled[j] <= '9')) ++j;
      if (j < mangled.size() && mangled[j] == '_') ++refs;
    }
  }
  return refs;
}

bool DemangleTooComplex(std::string_view mangled) {
  return mangled.size() > kMaxDemangleBytes || DemangleBackReferences(mangled) > kMaxDemangleBackReferences;
}

std::string Demangle(const std::string& mangled) {
  if (DemangleTooComplex(mangled)) return mangled;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                                  &std::free);
  return status == 0 && out ? std::string(out.get()) : mangled;
}

absl::StatusOr<AbiManifest> BuildAbiManifest(const std::vector<std::string>& paths) {
  std::vector<uint64_t> hashes;
  std::vector<std::string> sonames, libraries;
  std::string version;
  for (const std::string& path : paths) {
    absl::StatusOr<ElfDynamicInfo> info = ReadElfDynamic(path, path);
    if (!info.ok()) return info.status();
    const std::string soname = info->soname.empty() ? fs::path(path).filename().string() : info->soname;
    libraries.push_back(soname);
    if (IsSdkSoname(soname)) {
      sonames.push_back(soname);
      if (version.empty()) version = SdkVersionOf(path);
    }
    for (const std::string& name : info->exported) {
      if (!AbiSymbolNamespace(name).empty()) hashes.push_back(AbiSymbolHash(name));
    }
  }
  return AbiManifestFromParts(std::move(hashes), std::move(sonames), std::move(version), std::move(libraries),
                              "this host's libraries");
}

absl::StatusOr<AbiManifest> AbiManifestFromParts(std::vector<uint64_t> hashes, std::vector<std::string> sdk_sonames,
                                                 std::string sdk_version, std::vector<std::string> libraries,
                                                 const std::string& who) {
  std::sort(hashes.begin(), hashes.end());
  hashes.erase(std::unique(hashes.begin(), hashes.end()), hashes.end());
  if (hashes.size() > kMaxAbiManifestSymbols) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ABI manifest has ", hashes.size(),
                                                   " symbols; the limit is ", kMaxAbiManifestSymbols));
  }
  if (sdk_sonames.size() > kMaxAbiManifestLibraries || libraries.size() > kMaxAbiManifestLibraries) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ABI manifest names more than ", kMaxAbiManifestLibraries,
                                                   " libraries"));
  }
  for (const auto* list : {&sdk_sonames, &libraries}) {
    for (const std::string& s : *list) {
      if (s.empty() || s.size() > kMaxAbiNameBytes) {
        return absl::InvalidArgumentError(absl::StrCat(who, ": ABI manifest library name of ", s.size(),
                                                       " bytes (1 to ", kMaxAbiNameBytes, ")"));
      }
    }
  }
  if (sdk_version.size() > kMaxAbiNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ABI manifest sdk_version over ", kMaxAbiNameBytes,
                                                   " bytes"));
  }
  AbiManifest m;
  m.symbol_hashes = std::move(hashes);
  m.sdk_sonames = std::move(sdk_sonames);
  m.sdk_version = std::move(sdk_version);
  m.libraries = std::move(libraries);
  return m;
}

absl::StatusOr<std::vector<std::string>> FindTrialRuntimeLibraries(const std::string& det_trial_arg) {
  const std::string det_trial = OnPath(det_trial_arg);
  std::vector<std::string> found, queue{det_trial};
  std::set<std::string> seen;
  for (size_t q = 0; q < queue.size() && found.size() < kMaxAbiManifestLibraries; ++q) {
    absl::StatusOr<ElfDynamicInfo> info = ReadElfDynamic(queue[q], queue[q]);
    if (!info.ok()) return info.status();
    const std::vector<std::string> dirs = SearchDirs(fs::path(queue[q]).parent_path().string(), info->runpath);
    for (const std::string& soname : info->needed) {
      if (!IsAbiLibrary(soname) || soname.find('/') != std::string::npos || !seen.insert(soname).second) continue;
      for (const std::string& dir : dirs) {
        std::error_code ec;
        const fs::path candidate = fs::path(dir) / soname;
        if (!fs::is_regular_file(candidate, ec)) continue;
        found.push_back(candidate.string());
        queue.push_back(candidate.string());
        break;
      }
    }
  }
  const bool sdk = std::any_of(found.begin(), found.end(),
                               [](const std::string& p) { return IsSdkSoname(fs::path(p).filename().string()); });
  const bool stdcxx = std::any_of(found.begin(), found.end(), [](const std::string& p) {
    return Starts(fs::path(p).filename().string(), "libstdc++.so");
  });
  if (!sdk || !stdcxx) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot find ", !sdk ? "libdet_sdk" : "libstdc++", " as ", det_trial,
        " loads it (its DT_NEEDED in LD_LIBRARY_PATH, its RUNPATH and the default directories); found: ",
        found.empty() ? "nothing" : absl::StrJoin(found, ", ")));
  }
  return found;
}

absl::Status CheckTrialAbi(const ElfDynamicInfo& trial, const AbiManifest& m, const std::string& file_name,
                           const std::string& against) {
  for (const std::string& needed : trial.needed) {
    if (!IsSdkSoname(needed)) continue;
    if (std::find(m.sdk_sonames.begin(), m.sdk_sonames.end(), needed) != m.sdk_sonames.end()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        file_name, ": linked against ", needed, ", the cluster has ",
        m.sdk_sonames.empty() ? "no libdet_sdk" : absl::StrJoin(m.sdk_sonames, ", "),
        m.sdk_version.empty() ? "" : absl::StrCat(" (SDK version ", m.sdk_version, ")"), " (", against,
        "); rebuild the trial against the cluster's SDK (find_package(det))"));
  }
  const std::string* first = nullptr;
  std::string first_ns;
  size_t unresolved = 0;
  for (const std::string& name : trial.undefined) {
    std::string ns = AbiSymbolNamespace(name);
    if (ns.empty() || m.Exports(name)) continue;
    if (++unresolved == 1) {
      first = &name;
      first_ns = std::move(ns);
    }
  }
  if (first == nullptr) return absl::OkStatus();
  const std::string demangled = Demangle(*first);
  const std::string shown = demangled == *first ? Shown(*first)
                                                : absl::StrCat(Shown(demangled), " (", Shown(*first), ")");
  return absl::InvalidArgumentError(absl::StrCat(
      file_name, ": undefined symbol ", shown, DemangleTooComplex(*first) ? " (not demangled: too complex)" : "",
      " is not exported by ", against, unresolved > 1 ? absl::StrCat(" (nor are ", unresolved - 1, " more)") : "",
      ": likely ", LikelyCause(demangled, first_ns, m.sdk_version)));
}

}  // namespace det
