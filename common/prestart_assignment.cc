#include "common/prestart_assignment.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace det {
namespace {

absl::Status Bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("the agent sent a bad prestart assignment: ", field, " ", what,
                   " (det-agent and det-trial must come from the same build)"));
}

bool CleanPath(const std::string& p) {
  return !p.empty() && p[0] == '/' && p.find('\0') == std::string::npos && p.size() <= 4096;
}

}  // namespace

std::string EncodePrestartAssignment(const PrestartAssignment& a) {
  nlohmann::json j;
  j["trial_path"] = a.trial_path;
  j["env"] = a.env;
  j["cwd"] = a.cwd;
  j["umask"] = a.umask;
  j["set_user"] = a.set_user;
  j["uid"] = a.uid;
  j["gid"] = a.gid;
  j["groups"] = a.groups;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<PrestartAssignment> DecodePrestartAssignment(const std::string& bytes) {
  if (bytes.size() > kMaxPrestartAssignmentBytes) {
    return Bad("length", absl::StrCat(bytes.size(), " bytes; at most ", kMaxPrestartAssignmentBytes));
  }
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Bad("payload", "is not a JSON object");
  PrestartAssignment a;
  try {
    a.trial_path = j.at("trial_path").get<std::string>();
    a.cwd = j.at("cwd").get<std::string>();
    a.umask = j.at("umask").get<int>();
    a.set_user = j.at("set_user").get<bool>();
    a.uid = j.at("uid").get<uint32_t>();
    a.gid = j.at("gid").get<uint32_t>();
    const auto& env = j.at("env");
    const auto& groups = j.at("groups");
    if (!env.is_array() || env.size() > kMaxPrestartEnvEntries) {
      return Bad("env", absl::StrCat("is not a list of at most ", kMaxPrestartEnvEntries, " entries"));
    }
    if (!groups.is_array() || groups.size() > kMaxPrestartGroups) {
      return Bad("groups", absl::StrCat("is not a list of at most ", kMaxPrestartGroups, " gids"));
    }
    a.env = env.get<std::vector<std::string>>();
    a.groups = groups.get<std::vector<uint32_t>>();
  } catch (const nlohmann::json::exception& e) {
    return Bad("field", absl::StrCat("missing or of the wrong type: ", e.what()));
  }
  if (!CleanPath(a.trial_path)) return Bad("trial_path", "is not an absolute path");
  if (!CleanPath(a.cwd)) return Bad("cwd", "is not an absolute path");
  if (a.umask < -1 || a.umask > 0777) return Bad("umask", absl::StrCat(a.umask, " is not -1 or 0..0777"));
  if (a.set_user && (a.uid == 0 || a.gid == 0)) return Bad("uid/gid", "is root (0); trials never run as root");
  for (size_t i = 0; i < a.env.size(); ++i) {
    const std::string& e = a.env[i];
    const size_t eq = e.find('=');
    if (eq == 0 || eq == std::string::npos || e.find('\0') != std::string::npos) {
      return Bad(absl::StrCat("env[", i, "]"), "is not NAME=value");
    }
  }
  return a;
}

absl::Status CheckNoCapabilitiesLeft(const std::string& proc_status) {
  for (const char* field : {"CapPrm:", "CapEff:", "CapAmb:"}) {
    const size_t at = proc_status.find(absl::StrCat("\n", field));
    if (at == std::string::npos) {
      return absl::FailedPreconditionError(absl::StrCat("no ", field, " line in /proc/self/status"));
    }
    const size_t end = std::min(proc_status.find('\n', at + 1), proc_status.size());
    size_t begin = at + 1 + std::strlen(field);
    while (begin < end && (proc_status[begin] == ' ' || proc_status[begin] == '\t')) ++begin;
    const std::string mask = proc_status.substr(begin, end - begin);
    if (mask.empty() || mask.find_first_not_of('0') != std::string::npos) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, " ", mask,
                       " after dropping to the user, where a fresh launch's exec holds none (look at the agent's "
                       "securebits and ambient capabilities: its unit's SecureBits= and AmbientCapabilities=)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace det
