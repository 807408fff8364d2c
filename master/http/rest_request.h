// How a REST request's path and query fill an RPC's request message: path
// templates ("/api/v1/trials/{trial_id}") and text values set on fields by
// protobuf reflection. Pure functions; thread-safe.
#ifndef DET_MASTER_HTTP_REST_REQUEST_H_
#define DET_MASTER_HTTP_REST_REQUEST_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det::master {

// A compiled path template: '/'-separated segments, each literal text or a
// whole "{field}" parameter that matches one non-empty path segment.
struct PathTemplate {
  struct Segment {
    std::string text;    // the literal, or the parameter's name
    bool param = false;
  };
  std::vector<Segment> segments;    // after the leading '/'
  std::vector<std::string> params;  // parameter names in path order
};

// InvalidArgument for a template not starting with '/', a brace anywhere
// but around a whole segment, or a parameter name that is no identifier.
absl::StatusOr<PathTemplate> CompilePathTemplate(absl::string_view path_template);

// The values of the template's parameters in `path` (percent-decoded, as
// httplib gives req.path), in template order; false when it does not match.
bool MatchPathTemplate(const PathTemplate& t, absl::string_view path, std::vector<std::string>* values);

// The field of `type` named `name` by its proto name ("experiment_id") or
// its JSON name ("experimentId"); null when none.
const google::protobuf::FieldDescriptor* FindFieldByAnyName(const google::protobuf::Descriptor* type,
                                                            absl::string_view name);

// Whether a text value can set `field`: a scalar or enum field, singular or
// repeated (not a message or map).
bool IsTextSettable(const google::protobuf::FieldDescriptor* field);

// Sets `field` of `message` from `text` (a repeated field gets `text`
// appended): integers in decimal, floats, bools as true/false/1/0, enums by
// value name ("SORT_BY_SEARCHER_METRIC"), short name without the enum's
// prefix ("searcher_metric"; the prefix is the enum's name in upper snake
// case), either in any case, or number; strings and bytes as they are.
// InvalidArgument naming the field otherwise, e.g. "limit: not an integer:
// 'abc'" (the value quoted, at most 64 bytes of it); an unknown enum value's
// error lists the allowed short names.
absl::Status SetFieldFromText(google::protobuf::Message* message, const google::protobuf::FieldDescriptor* field,
                              absl::string_view text);

// Sets every (name, value) pair whose name is a field of `message`;
// unknown names are skipped, a known field that is not IsTextSettable is
// InvalidArgument ("labels: cannot be set from text"). Errors as
// SetFieldFromText.
absl::Status SetFieldsFromPairs(const std::multimap<std::string, std::string>& pairs,
                                google::protobuf::Message* message);

// Parses "a=1&b=two" (no percent-decoding; for the route table's own
// constants) into pairs.
std::multimap<std::string, std::string> ParseFixedPairs(absl::string_view fixed);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_REST_REQUEST_H_
