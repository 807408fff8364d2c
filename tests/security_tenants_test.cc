// Security, round three (issue 46). Finding 1: trials of different det users run as different uids and cannot read or signal each other.
// Part of the security_test executable (tests/CMakeLists.txt).
