// Whether a trial.so can be loaded by a cluster's det-trial, decided from its
// ELF tables alone (common/elf_symbols.h; the file is never loaded): each
// undefined symbol it needs from the Trial SDK (libdet_sdk), LibTorch
// (libtorch*, libc10) or libstdc++ must be exported by the cluster's copies
// of those libraries, and the libdet_sdk soname it NEEDs must be the
// cluster's. det-cli checks against the libraries beside it before an upload;
// the master checks against the AbiManifest each agent reports when it
// registers (proto/det/agent/v1/agent.proto). docs/guides/building-a-trial.md.
//
// Which symbols are checked: mangled C++ names in the namespaces std,
// __gnu_cxx, __cxxabiv1 (libstdc++), c10, at, torch, caffe2 (LibTorch) and
// det (the SDK), including their vtables and typeinfo. C symbols (libc, libm,
// libgcc, __cxa_*) and every other namespace are not checked: they come from
// libraries det-cpp does not ship.
#ifndef DET_COMMON_ABI_CHECK_H_
#define DET_COMMON_ABI_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/elf_symbols.h"

namespace det {

// Bounds of a manifest (an agent's is refused beyond them). The libraries of
// a LibTorch 1.13 CPU cluster export about 40k checked symbols (libtorch_cpu
// 33.7k, libstdc++ 6k, libc10 0.5k, libdet_sdk 0.3k): 320 KiB of hashes.
inline constexpr size_t kMaxAbiManifestSymbols = size_t{1} << 18;
inline constexpr size_t kMaxAbiManifestLibraries = 16;
inline constexpr size_t kMaxAbiNameBytes = 255;

// The symbols of a cluster's trial runtime libraries, compactly: the sorted,
// distinct AbiSymbolHash of every checked symbol they export. A name whose
// hash is present is taken as exported; a wrong accept needs a 64-bit hash
// collision (about 40k / 2^64 = 2e-15 per unresolved symbol).
struct AbiManifest {
  std::vector<uint64_t> symbol_hashes;
  // The libdet_sdk sonames present (e.g. "libdet_sdk.so.0") and the SDK
  // version from the library's file name ("0.1.0", or "" when unknown).
  std::vector<std::string> sdk_sonames;
  std::string sdk_version;
  // The sonames of every library read, for messages.
  std::vector<std::string> libraries;

  bool Exports(std::string_view symbol) const;
};

// FNV-1a 64 of the name's bytes: stable across builds and hosts.
uint64_t AbiSymbolHash(std::string_view name);

// The namespace that makes `mangled` a checked symbol ("std", "c10", "det",
// ...), or "" when it is not checked.
std::string AbiSymbolNamespace(std::string_view mangled);

// Whether a soname is one of the checked libraries (libdet_sdk.so*,
// libtorch*.so*, libc10*.so*, libstdc++.so*), and whether it is the SDK's.
bool IsAbiLibrary(std::string_view soname);
bool IsSdkSoname(std::string_view soname);

// Untrusted names (a trial.so's symbols) are demangled only when they are at
// most 1024 bytes with at most kMaxDemangleBackReferences back-references
// (substitutions S_/S<seq-id>_, template parameters T_/T<n>_, function
// parameters fp/fL, counted over the whole name, so over-counted, never
// under). Each reference can at most double the output, so a demangled name
// is at most 1024 * 2^10 bytes (1 MiB); without the bound a 727-byte name
// demangles to ~2^60 bytes.
inline constexpr size_t kMaxDemangleBackReferences = 10;
size_t DemangleBackReferences(std::string_view mangled);
bool DemangleTooComplex(std::string_view mangled);

// abi::__cxa_demangle of `mangled`, or `mangled` itself when it does not
// demangle or DemangleTooComplex (untrusted input).
std::string Demangle(const std::string& mangled);

// The likely cause of `mangled` being unresolved (CheckTrialAbi's wording,
// e.g. "built with -D_GLIBCXX_USE_CXX11_ABI=0 (...)"); det-trial adds it to
// a dlopen "undefined symbol" error.
std::string LikelyAbiCause(const std::string& mangled, const std::string& sdk_version = "");

// A manifest of the libraries at `paths` (each read with ReadElfDynamic).
absl::StatusOr<AbiManifest> BuildAbiManifest(const std::vector<std::string>& paths);

// A manifest from an agent's report: hashes sorted and deduplicated here;
// INVALID_ARGUMENT beyond the bounds above, naming `who`.
absl::StatusOr<AbiManifest> AbiManifestFromParts(std::vector<uint64_t> hashes, std::vector<std::string> sdk_sonames,
                                                 std::string sdk_version, std::vector<std::string> libraries,
                                                 const std::string& who);

// The checked libraries the det-trial binary at `det_trial` (a name without
// '/' is looked up on PATH) loads, found the way the dynamic loader does: its DT_NEEDED (and theirs, transitively) that
// IsAbiLibrary, searched in LD_LIBRARY_PATH, its DT_RUNPATH ($ORIGIN
// expanded), the directories of the libraries this process has loaded, then
// the default directories. FAILED_PRECONDITION when libdet_sdk or libstdc++
// is not found (naming what was searched).
absl::StatusOr<std::vector<std::string>> FindTrialRuntimeLibraries(const std::string& det_trial);

// OK when `trial` can be loaded against `manifest`: the libdet_sdk sonames it
// NEEDs are the manifest's, and every checked undefined symbol is exported.
// Else INVALID_ARGUMENT naming `file_name` (the user's file), the first
// unresolved symbol demangled and mangled, `against` (whose libraries) and
// the likely cause: "built with -D_GLIBCXX_USE_CXX11_ABI=0 (...)" when it
// uses the old std::string, "built against another LibTorch" for c10/at/
// torch/caffe2, "built against another Trial SDK" for det, "built with a
// newer GCC" for std, or "linked against libdet_sdk.so.N, the cluster has
// libdet_sdk.so.M (SDK version V)" for the soname.
absl::Status CheckTrialAbi(const ElfDynamicInfo& trial, const AbiManifest& manifest, const std::string& file_name,
                           const std::string& against);

}  // namespace det

#endif  // DET_COMMON_ABI_CHECK_H_
