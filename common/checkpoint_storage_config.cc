#include "common/checkpoint_storage_config.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config_redact.h"
#include "common/safe_path.h"
#include "common/status_macros.h"

namespace det {
namespace {

using json = nlohmann::json;

absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

const std::vector<std::string_view>& SharedFsKeys() {
  static const std::vector<std::string_view> keys = {"host_path", "storage_path"};
  return keys;
}
const std::vector<std::string_view>& S3Keys() {
  static const std::vector<std::string_view> keys = {"bucket", "prefix", "endpoint_url", "region", "profile",
                                                     "addressing_style"};
  return keys;
}

// A key of the other type: a clear error rather than "unknown field".
absl::Status CheckNoKeysOf(const ConfigMapReader& r, const std::vector<std::string_view>& keys,
                           std::string_view type, std::string_view use) {
  for (std::string_view key : keys) {
    if (r.json().contains(std::string(key))) {
      return r.Error(key, absl::StrCat("field '", r.PathOf(key), "' is for checkpoint_storage.type ", A(type),
                                       ", not this type; ", A(use)));
    }
  }
  return absl::OkStatus();
}

absl::Status RefuseCredentials(const ConfigMapReader& r) {
  for (auto it = r.json().begin(); it != r.json().end(); ++it) {
    if (!IsSecretConfigKey(it.key())) continue;
    return r.Error(it.key(),
                   absl::StrCat(r.PathOf(it.key()),
                                ": an experiment config must not hold credentials (it is stored and shown to every "
                                "reader of the experiment); put them in the master's S3 credentials file "
                                "(--s3-credentials-file) and name its profile with checkpoint_storage.profile"));
  }
  return absl::OkStatus();
}

bool AllOf(absl::string_view s, size_t min, size_t max, bool (*ok)(char)) {
  if (s.size() < min || s.size() > max) return false;
  for (char ch : s) {
    if (!ok(ch)) return false;
  }
  return true;
}

absl::Status ParseS3(const ConfigMapReader& r, CheckpointStorageConfig* c) {
  DET_RETURN_IF_ERROR(CheckNoKeysOf(r, SharedFsKeys(), "shared_fs", "with type s3 use bucket and prefix"));
  std::vector<std::string_view> known = {"type", "save_experiment_best", "save_trial_best", "save_trial_latest"};
  known.insert(known.end(), S3Keys().begin(), S3Keys().end());
  DET_RETURN_IF_ERROR(r.CheckKeys(known));
  if (r.Find("bucket") == nullptr) return r.Missing("bucket");
  DET_RETURN_IF_ERROR(r.GetString("bucket", &c->bucket));
  if (!ValidS3BucketName(c->bucket)) {
    return r.TypeError("bucket", "an S3 bucket name (3 to 63 of a-z, 0-9, '.', '-', starting and ending with a "
                                 "letter or digit, no '..', '.-' or '-.', not an IP address)");
  }
  DET_RETURN_IF_ERROR(r.GetString("prefix", &c->prefix));
  if (std::string problem = S3PrefixProblem(c->prefix); !problem.empty()) {
    return r.Error("prefix", absl::StrCat("field '", r.PathOf("prefix"), "' ", problem));
  }
  DET_RETURN_IF_ERROR(r.GetString("endpoint_url", &c->endpoint_url));
  if (r.Find("endpoint_url") != nullptr) {
    if (std::string problem = S3EndpointProblem(c->endpoint_url); !problem.empty()) {
      return r.Error("endpoint_url", absl::StrCat("field '", r.PathOf("endpoint_url"), "' ", problem));
    }
  }
  DET_RETURN_IF_ERROR(r.GetString("region", &c->region));
  if (r.Find("region") != nullptr &&
      !AllOf(c->region, 1, 32, [](char ch) { return absl::ascii_islower(ch) || absl::ascii_isdigit(ch) || ch == '-'; })) {
    return r.TypeError("region", "an S3 region such as us-east-1 (1 to 32 of a-z, 0-9, '-')");
  }
  DET_RETURN_IF_ERROR(r.GetString("profile", &c->profile));
  if (!AllOf(c->profile, 1, 64, [](char ch) {
        return absl::ascii_isalnum(ch) || ch == '_' || ch == '.' || ch == '-';
      })) {
    return r.TypeError("profile", "the name of a profile of the master's S3 credentials file (1 to 64 of A-Z, a-z, "
                                  "0-9, '_', '.', '-')");
  }
  DET_RETURN_IF_ERROR(r.GetEnum("addressing_style", {"auto", "path", "virtual"}, &c->addressing_style));
  return absl::OkStatus();
}

absl::Status ParseSharedFs(const ConfigMapReader& r, bool typed, CheckpointStorageConfig* c) {
  DET_RETURN_IF_ERROR(CheckNoKeysOf(r, S3Keys(), "s3", "set checkpoint_storage.type: s3 to store checkpoints in S3"));
  DET_RETURN_IF_ERROR(r.CheckKeys({"type", "host_path", "storage_path", "save_experiment_best", "save_trial_best",
                                   "save_trial_latest"},
                                  {"container_path", "propagation", "checkpoint_path", "tensorboard_path"}));
  if (typed && r.Find("host_path") == nullptr) return r.Missing("host_path");
  DET_RETURN_IF_ERROR(r.GetString("host_path", &c->host_path));
  if (r.Find("host_path") != nullptr && c->host_path.empty()) return r.TypeError("host_path", "a non-empty path");
  DET_RETURN_IF_ERROR(r.GetString("storage_path", &c->storage_path));
  // Checkpoints must stay under host_path.
  return ValidateRelativePath(c->storage_path, r.PathOf("storage_path"));
}

}  // namespace

// Without `type`, Determined inherits the master's storage: here shared_fs
// under the master's --checkpoint-root, host_path optional (empty: the root).
absl::Status ParseCheckpointStorage(const ConfigMapReader& r, CheckpointStorageConfig* c) {
  DET_RETURN_IF_ERROR(RefuseCredentials(r));
  const bool typed = r.Find("type") != nullptr;
  DET_RETURN_IF_ERROR(r.GetString("type", &c->type));
  if (c->type != "shared_fs" && c->type != "s3") {
    return r.Error("type", absl::StrCat("field '", r.PathOf("type"), "' must be shared_fs or s3, got '", c->type,
                                        "' (det-cpp supports shared_fs and S3-compatible checkpoint storage)"));
  }
  DET_RETURN_IF_ERROR(c->type == "s3" ? ParseS3(r, c) : ParseSharedFs(r, typed, c));
  DET_RETURN_IF_ERROR(r.GetInt("save_experiment_best", &c->save_experiment_best, 0, kInt64Max));
  DET_RETURN_IF_ERROR(r.GetInt("save_trial_best", &c->save_trial_best, 0, kInt64Max));
  DET_RETURN_IF_ERROR(r.GetInt("save_trial_latest", &c->save_trial_latest, 0, kInt64Max));
  return absl::OkStatus();
}

json CheckpointStorageToJson(const CheckpointStorageConfig& cs) {
  auto optional = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json storage;
  if (cs.type == "s3") {
    storage = {{"type", "s3"},
               {"bucket", cs.bucket},
               {"prefix", optional(cs.prefix)},
               {"endpoint_url", optional(cs.endpoint_url)},
               {"region", optional(cs.region)},
               {"profile", cs.profile},
               {"addressing_style", cs.addressing_style}};
  } else {
    // No host_path: the master's storage, as written (no type).
    storage = {{"type", cs.host_path.empty() ? json(nullptr) : json(cs.type)},
               {"host_path", optional(cs.host_path)},
               {"storage_path", optional(cs.storage_path)}};
  }
  storage["save_experiment_best"] = cs.save_experiment_best;
  storage["save_trial_best"] = cs.save_trial_best;
  storage["save_trial_latest"] = cs.save_trial_latest;
  return storage;
}

bool ValidS3BucketName(std::string_view bucket_in) {
  const absl::string_view bucket = A(bucket_in);
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  if (!absl::ascii_isalnum(bucket.front()) || !absl::ascii_isalnum(bucket.back())) return false;
  if (absl::StrContains(bucket, "..") || absl::StrContains(bucket, ".-") || absl::StrContains(bucket, "-.")) {
    return false;
  }
  for (char ch : bucket) {
    if (!(absl::ascii_islower(ch) || absl::ascii_isdigit(ch) || ch == '.' || ch == '-')) return false;
  }
  // Not shaped like an IPv4 address (192.168.5.4): S3 refuses those.
  std::vector<absl::string_view> labels = absl::StrSplit(bucket, '.');
  const bool ip_shaped = labels.size() == 4 && std::all_of(labels.begin(), labels.end(), [](absl::string_view l) {
    return !l.empty() && std::all_of(l.begin(), l.end(), [](char ch) { return absl::ascii_isdigit(ch); });
  });
  return !ip_shaped;
}

std::string S3PrefixProblem(std::string_view prefix_in) {
  const absl::string_view prefix = A(prefix_in);
  if (prefix.empty()) return "";
  if (prefix.size() > kMaxS3PrefixBytes) {
    return absl::StrCat("must be at most ", kMaxS3PrefixBytes, " bytes, got ", prefix.size());
  }
  for (char ch : prefix) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return "must not contain control characters";
  }
  if (prefix.front() == '/' || prefix.back() == '/') return "must not start or end with '/' (write a/b, not /a/b/)";
  for (absl::string_view segment : absl::StrSplit(prefix, '/')) {
    if (segment.empty() || segment == "." || segment == "..") {
      return absl::StrCat("must not have an empty, '.' or '..' segment, got '", prefix, "'");
    }
  }
  return "";
}

std::string S3EndpointProblem(std::string_view url_in) {
  const absl::string_view url = A(url_in);
  const std::string fix = "must be http://HOST[:PORT] or https://HOST[:PORT] (no path, query or user info)";
  if (url.size() > kMaxS3EndpointBytes) return absl::StrCat("must be at most ", kMaxS3EndpointBytes, " bytes");
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "https://") && !absl::ConsumePrefix(&rest, "http://")) return fix;
  absl::string_view host = rest;
  absl::string_view port;
  if (absl::StartsWith(rest, "[")) {  // [IPv6]
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) return fix;
    host = rest.substr(1, close - 1);
    absl::string_view after = rest.substr(close + 1);
    if (!after.empty() && !absl::ConsumePrefix(&after, ":")) return fix;
    port = after;
    if (host.empty() || !AllOf(host, 1, 64, [](char ch) { return absl::ascii_isxdigit(ch) || ch == ':' || ch == '.'; })) {
      return fix;
    }
  } else {
    const size_t colon = rest.find(':');
    if (colon != absl::string_view::npos) {
      host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      if (port.empty()) return fix;
    }
    if (!AllOf(host, 1, 253, [](char ch) { return absl::ascii_isalnum(ch) || ch == '.' || ch == '-'; })) return fix;
  }
  if (!port.empty()) {
    int n = 0;
    if (!AllOf(port, 1, 5, [](char ch) { return absl::ascii_isdigit(ch) != 0; }) || !absl::SimpleAtoi(port, &n) ||
        n < 1 || n > 65535) {
      return fix;
    }
  }
  return "";
}

std::string S3StorageUrl(const CheckpointStorageConfig& c) {
  return c.prefix.empty() ? absl::StrCat("s3://", c.bucket) : absl::StrCat("s3://", c.bucket, "/", c.prefix);
}

}  // namespace det
