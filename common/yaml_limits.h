// Bounds on a YAML document from someone else (an experiment config sent to
// the master), checked before any tree is built from it.
//
// yaml-cpp resolves an alias (*a) to the same node as its anchor (&a), so a
// few hundred bytes of nested aliases ("billion laughs") parse into a small
// graph that expands to billions of nodes when walked, copied or converted to
// JSON. CheckYamlLimits streams the document's parse events (no tree) and
// counts what it expands to, aliases included, stopping at the first limit:
//
//   config: the config is 2000000 bytes; the limit is 1048576 bytes (1 MiB)
//   config:9: YAML expands to more than 100000 nodes (aliases included); the limit is 100000
//   config:3: YAML nests more than 32 levels deep (aliases included); the limit is 32
//   config:5: YAML expands to more than 8388608 bytes of keys, values and field paths (aliases
//             included); the limit is 8388608 (8 MiB)
//   config:2: YAML alias refers to a node that contains it (a cycle)
//
// Cost: one pass over the text, memory proportional to the nesting depth and
// the number of anchors. Pure and thread-safe.
#ifndef DET_COMMON_YAML_LIMITS_H_
#define DET_COMMON_YAML_LIMITS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace det {

struct YamlLimits {
  // Size of the text itself.
  uint64_t max_bytes = uint64_t{1} << 20;
  // Nodes (scalars, nulls, lists, maps; map keys included) after expanding
  // every alias.
  uint64_t max_nodes = 100000;
  // Nesting depth after expanding every alias (the top-level map is depth 0).
  int max_depth = 32;
  // Bytes of scalars (keys and values) plus the dotted field path of every
  // node ("searcher.max_trials", "labels[2]"), after expanding every alias:
  // what converting the document to JSON with field lines costs.
  uint64_t max_expanded_bytes = uint64_t{8} << 20;
};

// OK when the first YAML document of `text` stays within `limits`;
// InvalidArgument naming the limit (prefixed "source_name:" or
// "source_name:LINE:") otherwise, and for an alias to a node that contains it.
// YAML syntax errors are left to the parser that builds the tree (OK here).
absl::Status CheckYamlLimits(std::string_view text, std::string_view source_name, const YamlLimits& limits = {});

}  // namespace det

#endif  // DET_COMMON_YAML_LIMITS_H_
