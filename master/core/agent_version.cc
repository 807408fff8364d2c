#include "master/core/agent_version.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace det::master {
namespace {

struct MajorMinor {
  int64_t major = 0;
  int64_t minor = 0;
};

// A SemVer pre-release or build suffix ("-rc.1", "+git.abc"): a '-' or '+'
// then at least one of [0-9A-Za-z.+-] (what SemVer's identifiers use), so
// no control character or escape reaches GET /api/v1/agents.
bool ValidSuffix(const std::string& suffix) {
  if (suffix.empty()) return true;
  if (suffix.size() < 2 || (suffix[0] != '-' && suffix[0] != '+')) return false;
  for (char c : suffix) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '.' ||
                    c == '-' || c == '+';
    if (!ok) return false;
  }
  return true;
}

// MAJOR.MINOR of "MAJOR.MINOR.PATCH[-suffix|+suffix]"; nullopt for anything
// else.
std::optional<MajorMinor> ParseVersion(const std::string& version) {
  const size_t end = version.find_first_of("-+");
  if (!ValidSuffix(end == std::string::npos ? "" : version.substr(end))) return std::nullopt;
  const std::string core = version.substr(0, end);
  std::vector<std::string> parts = absl::StrSplit(core, '.');
  if (parts.size() != 3) return std::nullopt;
  int64_t n[3] = {0, 0, 0};
  for (size_t i = 0; i < 3; ++i) {
    if (parts[i].empty() || parts[i].size() > 9 || !absl::SimpleAtoi(parts[i], &n[i]) || n[i] < 0) return std::nullopt;
    for (char c : parts[i]) {
      if (c < '0' || c > '9') return std::nullopt;
    }
  }
  return MajorMinor{n[0], n[1]};
}

}  // namespace

absl::Status CheckAgentVersion(const std::string& agent_id, const std::string& agent_version,
                               const std::string& master_version) {
  const std::string who = absl::StrCat("agent '", agent_id.substr(0, 128), "'");
  if (agent_version.size() > kMaxAgentVersionBytes) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": version is ", agent_version.size(),
                                                   " bytes; at most ", kMaxAgentVersionBytes));
  }
  std::optional<MajorMinor> agent = ParseVersion(agent_version);
  if (!agent) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": version '", absl::CHexEscape(agent_version),
        "' is not MAJOR.MINOR.PATCH with an optional -suffix or +suffix of [0-9A-Za-z.+-]; this master is det-cpp ",
        master_version,
        "; install det-cpp ", master_version, " on the agent's node (docs/operations/upgrade.md)"));
  }
  std::optional<MajorMinor> master = ParseVersion(master_version);
  if (master && agent->major == master->major && agent->minor == master->minor) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      who, " runs det-cpp ", agent_version, " but this master runs det-cpp ", master_version,
      "; agents must run the master's MAJOR.MINOR release (patch releases may mix): install det-cpp ",
      master_version, " on every node and restart det-agent (docs/operations/upgrade.md)"));
}

}  // namespace det::master
