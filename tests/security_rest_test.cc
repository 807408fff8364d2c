// Security, round three (issue 46). Finding 4: slow clients cannot starve the REST port.
// Part of the security_test executable (tests/CMakeLists.txt).
