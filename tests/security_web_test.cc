// Security, round three (issue 46). Findings 3 and 5: CSRF through the dashboard cookie, the master's data at rest.
// Part of the security_test executable (tests/CMakeLists.txt).
