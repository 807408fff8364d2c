// libFuzzer target: the ELF reader the master runs on uploaded trial.so files
// (common/elf_symbols.cc) and the ABI check and demangling it feeds
// (common/abi_check.cc), on arbitrary bytes.
//
// Any input must give an ElfDynamicInfo within the documented bounds or an
// INVALID_ARGUMENT naming the label, never a crash, sanitizer report, hang
// or an allocation beyond the fuzzer's limit.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/abi_check.h"
#include "common/elf_symbols.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "elf_symbols_fuzzer: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<det::ElfDynamicInfo> info = det::ReadElfDynamicFromBytes(bytes, "trial.so");
  if (!info.ok()) {
    if (info.status().code() != absl::StatusCode::kInvalidArgument) Fail("not INVALID_ARGUMENT: " + info.status().ToString());
    if (info.status().message().substr(0, 10) != "trial.so: ") Fail("error does not name the file: " + info.status().ToString());
    return 0;
  }
  if (info->exported.size() + info->undefined.size() > det::kMaxElfSymbols) Fail("more symbols than the bound");
  if (info->needed.size() > det::kMaxElfNeeded || info->runpath.size() > det::kMaxElfNeeded) Fail("too many entries");
  // The master's check against a manifest that exports nothing: the first
  // checked symbol (attacker-chosen) is demangled into the message.
  det::AbiManifest empty;
  empty.sdk_sonames = {"libdet_sdk.so.0"};
  absl::Status st = det::CheckTrialAbi(*info, empty, "trial.so", "agent 'a'");
  if (!st.ok() && st.code() != absl::StatusCode::kInvalidArgument) Fail("check: " + st.ToString());
  for (const std::string& s : info->undefined) (void)det::AbiSymbolNamespace(s);
  return 0;
}
