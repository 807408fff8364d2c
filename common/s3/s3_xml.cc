#include "common/s3/s3_xml.h"

#include <expat.h>

#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace det::s3 {
namespace {

struct ParseState {
  XML_Parser parser = nullptr;
  const XmlLimits* limits = nullptr;
  XmlElement root;
  bool have_root = false;
  std::vector<XmlElement*> stack;
  int64_t elements = 0;
  std::string error;  // set when a handler stopped the parse
};

void Stop(ParseState* s, std::string error) {
  if (s->error.empty()) s->error = std::move(error);
  XML_StopParser(s->parser, XML_FALSE);
}

absl::string_view LocalName(const char* name) {
  absl::string_view n(name);
  size_t colon = n.rfind(':');
  return colon == absl::string_view::npos ? n : n.substr(colon + 1);
}

void XMLCALL OnStart(void* data, const XML_Char* name, const XML_Char** /*attrs*/) {
  auto* s = static_cast<ParseState*>(data);
  if (!s->error.empty()) return;
  if (++s->elements > s->limits->max_elements) {
    return Stop(s, absl::StrCat("more than ", s->limits->max_elements, " elements"));
  }
  if (static_cast<int>(s->stack.size()) >= s->limits->max_depth) {
    return Stop(s, absl::StrCat("elements nested deeper than ", s->limits->max_depth));
  }
  XmlElement* e;
  if (s->stack.empty()) {
    if (s->have_root) return Stop(s, "more than one root element");
    s->have_root = true;
    e = &s->root;
  } else {
    s->stack.back()->children.emplace_back();
    e = &s->stack.back()->children.back();
  }
  e->name = std::string(LocalName(name));
  s->stack.push_back(e);
}

void XMLCALL OnEnd(void* data, const XML_Char* /*name*/) {
  auto* s = static_cast<ParseState*>(data);
  if (!s->stack.empty()) s->stack.pop_back();
}

void XMLCALL OnText(void* data, const XML_Char* text, int len) {
  auto* s = static_cast<ParseState*>(data);
  if (!s->error.empty() || s->stack.empty()) return;
  std::string& t = s->stack.back()->text;
  if (static_cast<int64_t>(t.size()) + len > s->limits->max_text_bytes) {
    return Stop(s, absl::StrCat("a text longer than ", s->limits->max_text_bytes, " bytes"));
  }
  t.append(text, static_cast<size_t>(len));
}

void XMLCALL OnDoctype(void* data, const XML_Char* /*name*/, const XML_Char* /*sysid*/,
                       const XML_Char* /*pubid*/, int /*has_internal_subset*/) {
  Stop(static_cast<ParseState*>(data), "a DOCTYPE declaration (S3 replies have none; DTDs and entities are refused)");
}

void XMLCALL OnEntityDecl(void* data, const XML_Char* /*name*/, int, const XML_Char*, int, const XML_Char*,
                          const XML_Char*, const XML_Char*, const XML_Char*) {
  Stop(static_cast<ParseState*>(data), "an entity declaration (refused)");
}

struct ParserFree {
  void operator()(XML_Parser p) const { XML_ParserFree(p); }
};

bool ParseBool(absl::string_view s) { return s == "true"; }

}  // namespace

const XmlElement* XmlElement::Child(absl::string_view child_name) const {
  for (const XmlElement& c : children) {
    if (c.name == child_name) return &c;
  }
  return nullptr;
}

std::string XmlElement::ChildText(absl::string_view child_name) const {
  const XmlElement* c = Child(child_name);
  return c == nullptr ? std::string() : c->text;
}

absl::StatusOr<XmlElement> ParseXml(absl::string_view xml, const XmlLimits& limits) {
  std::unique_ptr<std::remove_pointer_t<XML_Parser>, ParserFree> parser(XML_ParserCreate("UTF-8"));
  if (!parser) return absl::ResourceExhaustedError("S3 reply: cannot create an XML parser");
  ParseState s;
  s.parser = parser.get();
  s.limits = &limits;
  XML_SetUserData(s.parser, &s);
  XML_SetElementHandler(s.parser, OnStart, OnEnd);
  XML_SetCharacterDataHandler(s.parser, OnText);
  XML_SetStartDoctypeDeclHandler(s.parser, OnDoctype);
  XML_SetEntityDeclHandler(s.parser, OnEntityDecl);
  XML_SetParamEntityParsing(s.parser, XML_PARAM_ENTITY_PARSING_NEVER);
  // expat takes an int length: feed the document in chunks.
  constexpr size_t kChunk = 1 << 20;
  size_t off = 0;
  do {
    size_t n = std::min(kChunk, xml.size() - off);
    bool last = off + n == xml.size();
    if (XML_Parse(s.parser, xml.data() + off, static_cast<int>(n), last ? XML_TRUE : XML_FALSE) !=
        XML_STATUS_OK) {
      if (!s.error.empty()) return absl::InvalidArgumentError(absl::StrCat("S3 reply: XML refused: ", s.error));
      return absl::InvalidArgumentError(absl::StrCat("S3 reply: malformed XML at line ",
                                                     XML_GetCurrentLineNumber(s.parser), ": ",
                                                     XML_ErrorString(XML_GetErrorCode(s.parser))));
    }
    off += n;
  } while (off < xml.size());
  if (!s.have_root) return absl::InvalidArgumentError("S3 reply: XML without a root element");
  return std::move(s.root);
}

namespace {

// Undoes S3's encoding-type=url (as botocore's unquote_plus does: %XX and
// '+' for a space). InvalidArgument on a malformed escape.
absl::StatusOr<std::string> UrlDecodeKey(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] != '%') {
      out += s[i];
    } else if (i + 2 < s.size() && absl::ascii_isxdigit(s[i + 1]) && absl::ascii_isxdigit(s[i + 2])) {
      out += absl::HexStringToBytes(s.substr(i + 1, 2));
      i += 2;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("ListObjectsV2 reply: the url-encoded <Key> '",
                                                     s.substr(0, 128), "' has a malformed %XX escape"));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ListPage> ParseListObjectsV2(absl::string_view xml) {
  auto doc = ParseXml(xml);
  if (!doc.ok()) return doc.status();
  if (doc->name != "ListBucketResult") {
    return absl::InvalidArgumentError(absl::StrCat("ListObjectsV2 reply: root element <", doc->name.substr(0, 64),
                                                   ">, expected <ListBucketResult>"));
  }
  ListPage page;
  page.truncated = ParseBool(doc->ChildText("IsTruncated"));
  page.next_token = doc->ChildText("NextContinuationToken");
  // S3 says when it url-encoded the keys (s3rver ignores encoding-type and
  // sends them raw, without <EncodingType>).
  const bool url_encoded = doc->ChildText("EncodingType") == "url";
  for (const XmlElement& c : doc->children) {
    if (c.name != "Contents") continue;
    ObjectInfo o;
    o.key = c.ChildText("Key");
    if (url_encoded) {
      absl::StatusOr<std::string> key = UrlDecodeKey(o.key);
      if (!key.ok()) return key.status();
      o.key = *std::move(key);
    }
    o.etag = Unquote(c.ChildText("ETag"));
    if (!absl::SimpleAtoi(c.ChildText("Size"), &o.size) || o.size < 0 || o.key.empty()) {
      return absl::InvalidArgumentError("ListObjectsV2 reply: a <Contents> without a valid <Key> and <Size>");
    }
    page.objects.push_back(std::move(o));
  }
  if (page.truncated && page.next_token.empty()) {
    return absl::InvalidArgumentError("ListObjectsV2 reply: IsTruncated without a NextContinuationToken");
  }
  return page;
}

absl::StatusOr<std::string> ParseUploadId(absl::string_view xml) {
  auto doc = ParseXml(xml);
  if (!doc.ok()) return doc.status();
  std::string id = doc->ChildText("UploadId");
  if (doc->name != "InitiateMultipartUploadResult" || id.empty()) {
    return absl::InvalidArgumentError("CreateMultipartUpload reply: no <UploadId>");
  }
  return id;
}

absl::StatusOr<std::string> ParseCompleteMultipart(absl::string_view xml) {
  auto doc = ParseXml(xml);
  if (!doc.ok()) return doc.status();
  if (doc->name == "Error") {
    return absl::UnavailableError(absl::StrCat("CompleteMultipartUpload failed: ", doc->ChildText("Code"), ": ",
                                               doc->ChildText("Message")));
  }
  std::string etag = Unquote(doc->ChildText("ETag"));
  if (doc->name != "CompleteMultipartUploadResult" || etag.empty()) {
    return absl::InvalidArgumentError("CompleteMultipartUpload reply: no <ETag>");
  }
  return etag;
}

S3ErrorInfo ParseS3Error(absl::string_view xml) {
  S3ErrorInfo info;
  auto doc = ParseXml(xml);
  if (!doc.ok() || doc->name != "Error") return info;
  info.code = doc->ChildText("Code").substr(0, 128);
  info.message = doc->ChildText("Message").substr(0, 512);
  return info;
}

absl::StatusOr<std::vector<DeleteError>> ParseDeleteResult(absl::string_view xml) {
  auto doc = ParseXml(xml);
  if (!doc.ok()) return doc.status();
  if (doc->name != "DeleteResult") {
    return absl::InvalidArgumentError(absl::StrCat("DeleteObjects reply: root element <", doc->name.substr(0, 64),
                                                   ">, expected <DeleteResult>"));
  }
  std::vector<DeleteError> errors;
  for (const XmlElement& c : doc->children) {
    if (c.name != "Error") continue;
    errors.push_back({c.ChildText("Key"), c.ChildText("Code"), c.ChildText("Message")});
  }
  return errors;
}

std::string XmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\r': out += "&#13;"; break;
      case '\n': out += "&#10;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string DeleteObjectsXml(const std::vector<std::string>& keys) {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>";
  for (const std::string& k : keys) absl::StrAppend(&out, "<Object><Key>", XmlEscape(k), "</Key></Object>");
  out += "</Delete>";
  return out;
}

std::string CompleteMultipartXml(const std::vector<std::string>& part_etags) {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><CompleteMultipartUpload>";
  for (size_t i = 0; i < part_etags.size(); ++i) {
    absl::StrAppend(&out, "<Part><PartNumber>", i + 1, "</PartNumber><ETag>\"", XmlEscape(part_etags[i]),
                    "\"</ETag></Part>");
  }
  out += "</CompleteMultipartUpload>";
  return out;
}

std::string Unquote(absl::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return std::string(etag);
}

}  // namespace det::s3
