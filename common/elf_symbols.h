// Reading an ELF shared library's dynamic symbols and dependencies without
// loading it: the master checks an uploaded trial.so (untrusted bytes) this
// way and never dlopen()s user code; det-cli and det-agent read their own
// LibTorch and SDK libraries the same way (common/abi_check.h).
#ifndef DET_COMMON_ELF_SYMBOLS_H_
#define DET_COMMON_ELF_SYMBOLS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace det {

// The symbol every trial.so exports (trial_runtime's DET_TRIAL_ENTRY_SYMBOL;
// trial_runtime static_asserts that they agree).
inline constexpr char kTrialEntrySymbol[] = "det_trial_plugin_entry";

// Bounds of ReadElfDynamic: tables (section headers, .dynsym, .dynstr,
// .dynamic) larger than kMaxElfTableBytes, more than kMaxElfSymbols dynamic
// symbols or more than kMaxElfNeeded DT_NEEDED/DT_RUNPATH entries are
// refused. libtorch_cpu.so 1.13 has 34k exported symbols and 3 MiB of names.
inline constexpr uint64_t kMaxElfTableBytes = uint64_t{64} << 20;
inline constexpr size_t kMaxElfSymbols = size_t{1} << 20;
inline constexpr size_t kMaxElfNeeded = 1024;

// What the dynamic linker would read from a shared library.
struct ElfDynamicInfo {
  // Defined symbols with global or weak binding and default or protected
  // visibility, in table order.
  std::vector<std::string> exported;
  // Undefined symbols with global binding (weak undefined ones may stay
  // unresolved and are left out), in table order.
  std::vector<std::string> undefined;
  // DT_NEEDED sonames in order, DT_SONAME, and DT_RUNPATH (or DT_RPATH when
  // there is no DT_RUNPATH) split at ':'.
  std::vector<std::string> needed;
  std::string soname;
  std::vector<std::string> runpath;
};

// Reads the dynamic symbols and entries of the 64-bit little-endian ELF
// shared library at `path`. INVALID_ARGUMENT naming `label` and what is
// wrong (not ELF, not a shared library, no dynamic symbol table, truncated
// or oversized tables); NOT_FOUND when the file cannot be opened. Every
// offset and size read from the file is checked against the file's size and
// the bounds above; names are cut at their table's end.
absl::StatusOr<ElfDynamicInfo> ReadElfDynamic(const std::string& path, const std::string& label);
// The same over bytes in memory (the fuzz target's entry).
absl::StatusOr<ElfDynamicInfo> ReadElfDynamicFromBytes(std::string_view bytes, const std::string& label);

// OK when the file at `path` is a 64-bit little-endian ELF shared library
// whose dynamic symbol table exports `symbol` (see ElfDynamicInfo::exported).
// Else ReadElfDynamic's errors, or INVALID_ARGUMENT "<label>: has no entry
// symbol '<symbol>'".
absl::Status CheckElfExports(const std::string& path, const std::string& symbol, const std::string& label);

}  // namespace det

#endif  // DET_COMMON_ELF_SYMBOLS_H_
