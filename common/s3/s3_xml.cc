// Placeholder: implemented in issue 49.
#include "common/s3/s3_xml.h"
