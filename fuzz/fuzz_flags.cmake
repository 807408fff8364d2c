# Compiler flags of the fuzz-only configuration (DET_FUZZ=ON, clang): every
# library the fuzzers link (proto, common, master) is built with coverage
# instrumentation for libFuzzer plus AddressSanitizer and
# UndefinedBehaviorSanitizer; UB aborts (no recovery) so the fuzzer sees it.
# Included by the top-level CMakeLists.txt before its subdirectories.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "DET_FUZZ=ON needs clang (-DCMAKE_CXX_COMPILER=clang++), not ${CMAKE_CXX_COMPILER_ID}")
endif()
set(DET_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
add_compile_options(-fsanitize=fuzzer-no-link ${DET_SANITIZE_FLAGS})
add_link_options(${DET_SANITIZE_FLAGS})
