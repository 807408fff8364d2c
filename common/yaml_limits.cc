#include "common/yaml_limits.h"

#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/mark.h"
#include "yaml-cpp/yaml.h"

namespace det {
namespace {

// Thrown out of the parser's callbacks to stop at the first limit.
struct LimitExceeded {
  absl::Status status;
};

uint64_t Digits(uint64_t n) {
  uint64_t d = 1;
  while (n >= 10) n /= 10, ++d;
  return d;
}

// Counts nodes, depth and bytes of the document as if every alias were
// replaced by a copy of its anchor's node. A node's "path" is the length of
// its dotted field path; an anchor remembers what its subtree cost relative
// to its own path, so an alias is charged as that subtree placed at the
// alias's path.
class BudgetCounter final : public YAML::EventHandler {
 public:
  BudgetCounter(std::string_view source_name, const YamlLimits& limits) : name_(source_name), limits_(limits) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { Leaf(mark, anchor, 0); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string& value) override {
    Leaf(mark, anchor, value.size());
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Place place = NextPlace(mark);
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {  // still open: the alias is inside its own anchor
      throw LimitExceeded{Error(mark, "YAML alias refers to a node that contains it (a cycle)")};
    }
    const Subtree& s = it->second;
    CheckDepth(mark, place.depth + s.depth);
    Charge(mark, s.nodes, s.relative_bytes + s.nodes * place.path);
    NoteDepth(place.depth + s.depth);
    Finished(place, s.scalar_bytes);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor, /*map=*/false);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor, /*map=*/true);
  }
  void OnMapEnd() override { Close(); }

 private:
  // Where the next node goes: its path length and depth, and whether it is
  // a map key.
  struct Place {
    uint64_t path = 0;
    int depth = 0;
    bool key = false;
  };
  // An open list or map.
  struct Frame {
    bool map = false;
    YAML::anchor_t anchor = YAML::NullAnchor;
    Place place;
    uint64_t nodes_before = 0;  // totals when it opened (itself excluded)
    uint64_t bytes_before = 0;
    int max_depth = 0;  // deepest node inside it so far (absolute)
    uint64_t index = 0;  // next list index
    bool expect_key = true;
    uint64_t key_bytes = 0;  // the last key's length
  };
  // What an anchored node expands to.
  struct Subtree {
    uint64_t nodes = 0;
    uint64_t relative_bytes = 0;  // bytes minus nodes * (the anchor's path)
    int depth = 0;  // relative nesting below the anchored node
    uint64_t scalar_bytes = 0;  // a scalar's length (for an alias used as a key)
  };

  Place NextPlace(const YAML::Mark& mark) {
    Place p;
    if (frames_.empty()) return p;
    Frame& f = frames_.back();
    p.depth = f.place.depth + 1;
    CheckDepth(mark, p.depth);
    if (!f.map) {
      p.path = f.place.path + 2 + Digits(f.index++);  // "[i]"
    } else if (f.expect_key) {
      p.path = f.place.path;
      p.key = true;
    } else {
      p.path = f.place.path + 1 + f.key_bytes;  // ".key"
    }
    return p;
  }

  // After a node at `place` is complete.
  void Finished(const Place& place, uint64_t scalar_bytes) {
    if (frames_.empty() || !frames_.back().map) return;
    Frame& f = frames_.back();
    if (place.key) {
      f.key_bytes = scalar_bytes;
      f.expect_key = false;
    } else {
      f.expect_key = true;
    }
  }

  void Leaf(const YAML::Mark& mark, YAML::anchor_t anchor, uint64_t size) {
    Place place = NextPlace(mark);
    Charge(mark, 1, size + place.path);
    NoteDepth(place.depth);
    if (anchor != YAML::NullAnchor) anchors_[anchor] = Subtree{1, size, 0, size};
    Finished(place, size);
  }

  void Open(const YAML::Mark& mark, YAML::anchor_t anchor, bool map) {
    Place place = NextPlace(mark);
    Frame f;
    f.map = map;
    f.anchor = anchor;
    f.place = place;
    f.nodes_before = nodes_;
    f.bytes_before = bytes_;
    f.max_depth = place.depth;
    Charge(mark, 1, place.path);
    frames_.push_back(f);
  }

  void Close() {
    if (frames_.empty()) return;
    Frame f = frames_.back();
    frames_.pop_back();
    if (f.anchor != YAML::NullAnchor) {
      Subtree s;
      s.nodes = nodes_ - f.nodes_before;
      uint64_t bytes = bytes_ - f.bytes_before;
      uint64_t base = s.nodes * f.place.path;  // every node inside has a path >= the anchor's
      s.relative_bytes = bytes > base ? bytes - base : 0;
      s.depth = f.max_depth - f.place.depth;
      anchors_[f.anchor] = s;
    }
    NoteDepth(f.max_depth);
    Finished(f.place, 0);
  }

  void NoteDepth(int depth) {
    if (!frames_.empty() && depth > frames_.back().max_depth) frames_.back().max_depth = depth;
  }

  void CheckDepth(const YAML::Mark& mark, int depth) {
    if (depth > limits_.max_depth) {
      throw LimitExceeded{Error(mark, absl::StrCat("YAML nests more than ", limits_.max_depth,
                                                   " levels deep (aliases included); the limit is ",
                                                   limits_.max_depth))};
    }
  }

  void Charge(const YAML::Mark& mark, uint64_t nodes, uint64_t bytes) {
    // Both stay below the limits before this call, so neither sum overflows
    // (a subtree's figures were themselves within the limits).
    nodes_ += nodes;
    bytes_ += bytes;
    if (nodes_ > limits_.max_nodes) {
      throw LimitExceeded{Error(mark, absl::StrCat("YAML expands to more than ", limits_.max_nodes,
                                                   " nodes (aliases included); the limit is ", limits_.max_nodes))};
    }
    if (bytes_ > limits_.max_expanded_bytes) {
      throw LimitExceeded{Error(mark, absl::StrCat("YAML expands to more than ", limits_.max_expanded_bytes,
                                                   " bytes of keys, values and field paths (aliases included); "
                                                   "the limit is ",
                                                   limits_.max_expanded_bytes, Mib(limits_.max_expanded_bytes)))};
    }
  }

  static std::string Mib(uint64_t bytes) {
    if (bytes % (uint64_t{1} << 20) != 0) return "";
    return absl::StrCat(" (", bytes >> 20, " MiB)");
  }

  absl::Status Error(const YAML::Mark& mark, std::string_view message) const {
    if (mark.is_null()) return absl::InvalidArgumentError(absl::StrCat(name_, ": ", std::string(message)));
    return absl::InvalidArgumentError(absl::StrCat(name_, ":", mark.line + 1, ": ", std::string(message)));
  }

  std::string name_;
  YamlLimits limits_;
  std::vector<Frame> frames_;
  std::unordered_map<YAML::anchor_t, Subtree> anchors_;
  uint64_t nodes_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace

absl::Status CheckYamlLimits(std::string_view text, std::string_view source_name, const YamlLimits& limits) {
  if (text.size() > limits.max_bytes) {
    std::string mib = limits.max_bytes % (uint64_t{1} << 20) == 0 ? absl::StrCat(" (", limits.max_bytes >> 20, " MiB)")
                                                                   : "";
    return absl::InvalidArgumentError(absl::StrCat(std::string(source_name), ": the config is ", text.size(),
                                                   " bytes; the limit is ", limits.max_bytes, " bytes", mib));
  }
  std::istringstream in{std::string(text)};
  BudgetCounter counter(source_name, limits);
  try {
    YAML::Parser parser(in);
    parser.HandleNextDocument(counter);
  } catch (const LimitExceeded& e) {
    return e.status;
  } catch (const std::exception&) {
    // Syntax errors: the tree-building parse reports them with its message.
  }
  return absl::OkStatus();
}

}  // namespace det
