// Security, round three (issue 46). Findings 2 and 7 and the less-serious input items: invalid UTF-8, terminal escapes, environment_variables at create, error bodies.
// Part of the security_test executable (tests/CMakeLists.txt).
