// Security, round three (issue 46). Finding 6: metric bounds, kill and cancel with the disk full, temp checkpoint directories.
// Part of the security_test executable (tests/CMakeLists.txt).
