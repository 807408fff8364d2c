#include "tests/s3_harness.h"
