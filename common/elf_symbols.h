// Reading an ELF shared library's exported dynamic symbols without loading
// it: the master checks an uploaded trial.so (untrusted bytes) this way and
// never dlopen()s user code.
#ifndef DET_COMMON_ELF_SYMBOLS_H_
#define DET_COMMON_ELF_SYMBOLS_H_

#include <string>

#include "absl/status/status.h"

namespace det {

// The symbol every trial.so exports (trial_runtime's DET_TRIAL_ENTRY_SYMBOL;
// trial_runtime static_asserts that they agree).
inline constexpr char kTrialEntrySymbol[] = "det_trial_plugin_entry";

// OK when the file at `path` is a 64-bit little-endian ELF shared library
// whose dynamic symbol table defines `symbol` with global or weak binding
// and default or protected visibility. Else INVALID_ARGUMENT naming `label`
// (e.g. "trial.so") and what is wrong: not ELF, not a shared library, no
// dynamic symbol table, or "has no entry symbol '<symbol>'". Every offset
// and size read from the file is checked against the file's size; at most
// 64 MiB of tables are read. NOT_FOUND when the file cannot be opened.
absl::Status CheckElfExports(const std::string& path, const std::string& symbol, const std::string& label);

}  // namespace det

#endif  // DET_COMMON_ELF_SYMBOLS_H_
