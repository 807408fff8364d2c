// Bounded parsing of S3's XML replies with expat, and the two XML bodies
// det-cpp sends (DeleteObjects, CompleteMultipartUpload). Internal to det_s3.
//
// ParseXml refuses a document that declares a DOCTYPE (no DTD, no entity of
// any kind is ever expanded), nests deeper than XmlLimits::max_depth, has
// more than max_elements elements or a text longer than max_text_bytes; the
// caller bounds the document's own size (S3Limits::max_reply_bytes). Each
// error says which bound was hit. Pure and thread-safe.
#ifndef DET_COMMON_S3_S3_XML_H_
#define DET_COMMON_S3_S3_XML_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/s3/s3_client.h"

namespace det::s3 {

struct XmlLimits {
  int max_depth = 32;
  int64_t max_elements = 200000;
  int64_t max_text_bytes = 64 * 1024;
};

struct XmlElement {
  std::string name;  // without a namespace prefix
  std::string text;  // the element's own character data
  std::vector<XmlElement> children;

  // The first child named `name`, or nullptr.
  const XmlElement* Child(absl::string_view name) const;
  // The text of the first child named `name`, or "".
  std::string ChildText(absl::string_view name) const;
};

// The document's root element. InvalidArgument naming the bound or expat's
// error (with its line) otherwise.
absl::StatusOr<XmlElement> ParseXml(absl::string_view xml, const XmlLimits& limits = {});

// ListObjectsV2's reply. When it says <EncodingType>url</EncodingType> (the
// client asks for encoding-type=url, so that a key with a character XML 1.0
// cannot carry still parses), each Key is decoded (%XX, '+' is a space).
struct ListPage {
  std::vector<ObjectInfo> objects;
  bool truncated = false;
  std::string next_token;
};
absl::StatusOr<ListPage> ParseListObjectsV2(absl::string_view xml);

// InitiateMultipartUpload's UploadId (InvalidArgument when missing).
absl::StatusOr<std::string> ParseUploadId(absl::string_view xml);

// CompleteMultipartUpload's ETag without quotes. S3 may answer 200 with an
// <Error> document: that is an error naming its Code and Message.
absl::StatusOr<std::string> ParseCompleteMultipart(absl::string_view xml);

// S3's <Error><Code>..</Code><Message>..</Message></Error>; empty strings
// when the body is not such a document.
struct S3ErrorInfo {
  std::string code;
  std::string message;
};
S3ErrorInfo ParseS3Error(absl::string_view xml);

// DeleteObjects' reply: the keys it would not delete.
struct DeleteError {
  std::string key;
  std::string code;
  std::string message;
};
absl::StatusOr<std::vector<DeleteError>> ParseDeleteResult(absl::string_view xml);

// Request bodies.
std::string XmlEscape(absl::string_view text);
std::string DeleteObjectsXml(const std::vector<std::string>& keys);  // Quiet
std::string CompleteMultipartXml(const std::vector<std::string>& part_etags);  // part i+1's ETag

// Removes one pair of surrounding double quotes (S3 quotes ETags).
std::string Unquote(absl::string_view etag);

}  // namespace det::s3

#endif  // DET_COMMON_S3_S3_XML_H_
