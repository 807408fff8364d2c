// Placeholder: the S3 test harness lands in issue 49.
#ifndef DET_TESTS_S3_HARNESS_H_
#define DET_TESTS_S3_HARNESS_H_
#endif
