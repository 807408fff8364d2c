// Test-only: where this process loaded a shared library from, for the tests
// that read real ELF files (common/abi_check_test.cc, elf_symbols_test.cc).
#ifndef DET_COMMON_TEST_LOADED_LIBRARY_H_
#define DET_COMMON_TEST_LOADED_LIBRARY_H_

#include <fstream>
#include <string>

namespace det::testing {

// The path of a library this process has loaded (real, stripped-of-nothing
// shared libraries): "libc.so", "libstdc++.so". Empty when none is mapped.
inline std::string LoadedLibraryPath(const std::string& name = "libc.so") {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    size_t at = line.find('/');
    if (at != std::string::npos && line.find("/" + name) != std::string::npos) return line.substr(at);
  }
  return "";
}

}  // namespace det::testing

#endif  // DET_COMMON_TEST_LOADED_LIBRARY_H_
