#include "common/s3/s3_credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/secret_token_file.h"

namespace det::s3 {
namespace {

constexpr size_t kMaxProfileNameBytes = 64;
constexpr size_t kMaxKeyIdBytes = 128;
constexpr size_t kMaxSecretBytes = 256;
constexpr size_t kMaxSessionTokenBytes = 8192;
constexpr size_t kMaxEndpointBytes = 2048;
constexpr size_t kMaxWorkspaces = 256;
constexpr size_t kMaxWorkspaceBytes = 128;

constexpr const char* kKeys[] = {"aws_access_key_id", "aws_secret_access_key", "aws_session_token", "endpoint_url",
                                 "region",            "ca_bundle",             "det_workspaces"};

bool IsSecretKey(absl::string_view key) { return key == "aws_secret_access_key" || key == "aws_session_token"; }

absl::Status Error(absl::string_view source, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": ", what));
}

bool IsPrintableWord(absl::string_view s) {
  for (char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b <= 0x20 || b >= 0x7f) return false;
  }
  return !s.empty();
}

bool IsNameChars(absl::string_view s, absl::string_view extra) {
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && extra.find(c) == absl::string_view::npos) return false;
  }
  return !s.empty();
}

// scheme://host[:port] (a trailing '/' allowed), http or https, no user
// info, path, query or fragment.
std::string EndpointProblem(absl::string_view url) {
  if (url.size() > kMaxEndpointBytes) return absl::StrCat("longer than ", kMaxEndpointBytes, " bytes");
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "https://") && !absl::ConsumePrefix(&rest, "http://")) {
    return "not http:// or https://";
  }
  absl::ConsumeSuffix(&rest, "/");
  if (rest.find_first_of("/?#@ \t\\") != absl::string_view::npos) return "has a path, query, user info or space";
  absl::string_view host = rest;
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.rfind(']');  // [::1]:9000
  if (colon != absl::string_view::npos && (bracket == absl::string_view::npos || colon > bracket)) {
    int port = 0;
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &port) || port < 1 || port > 65535) return "has a bad port";
    host = rest.substr(0, colon);
  }
  if (host.empty() || !IsPrintableWord(host)) return "has no host";
  return "";
}

// The text of PEM file `path` (absolute; a regular file of at most
// kMaxCaBundleBytes holding a certificate), or why not.
absl::StatusOr<std::string> ReadCaBundle(const std::string& path) {
  if (path.empty() || path[0] != '/') return absl::InvalidArgumentError("is not an absolute path: name the PEM file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat("cannot be read: ", std::strerror(errno)));
  struct stat st {};
  std::string text;
  absl::Status status;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError("is not a regular file: name a PEM file of CA certificates");
  } else if (st.st_size > static_cast<off_t>(kMaxCaBundleBytes)) {
    status = absl::InvalidArgumentError(absl::StrCat("is larger than ", kMaxCaBundleBytes, " bytes"));
  } else {
    text.resize(kMaxCaBundleBytes + 1);
    size_t got = 0;
    ssize_t n;
    while (got < text.size() && ((n = ::read(fd, text.data() + got, text.size() - got)) > 0 || errno == EINTR)) {
      if (n > 0) got += static_cast<size_t>(n);
    }
    text.resize(got);
    if (got > kMaxCaBundleBytes) {
      status = absl::InvalidArgumentError(absl::StrCat("is larger than ", kMaxCaBundleBytes, " bytes"));
    } else if (!absl::StrContains(text, "-----BEGIN CERTIFICATE-----")) {
      status = absl::InvalidArgumentError("holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return text;
}

absl::StatusOr<std::vector<std::string>> ParseWorkspaces(absl::string_view value) {
  std::vector<std::string> out;
  for (absl::string_view w : absl::StrSplit(value, ',')) {
    w = absl::StripAsciiWhitespace(w);
    if (w.empty()) return absl::InvalidArgumentError("has an empty entry");
    if (w.size() > kMaxWorkspaceBytes || !IsPrintableWord(w)) {
      return absl::InvalidArgumentError(
          absl::StrCat("has an entry longer than ", kMaxWorkspaceBytes, " bytes or with a space or control character"));
    }
    out.emplace_back(w);
  }
  if (out.size() > kMaxWorkspaces) return absl::InvalidArgumentError(absl::StrCat("names over ", kMaxWorkspaces));
  return out;
}

// Checks and stores `value` as `key` of `p`. The message (without the
// source and line) never quotes a secret.
absl::Status SetKey(S3Profile& p, const std::string& key, absl::string_view value) {
  const std::string fix = absl::StrCat("; fix ", key, " in profile [", p.name, "]");
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(key, " is empty", fix));
  if (key == "aws_access_key_id") {
    if (value.size() > kMaxKeyIdBytes || !IsPrintableWord(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " must be one word of printable ASCII, at most ", kMaxKeyIdBytes, " bytes", fix));
    }
    p.access_key_id = std::string(value);
  } else if (IsSecretKey(key)) {
    const size_t max = key == "aws_session_token" ? kMaxSessionTokenBytes : kMaxSecretBytes;
    if (value.size() > max || !IsPrintableWord(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, " must be one word of printable ASCII, at most ", max, " bytes (its value is not shown)", fix));
    }
    (key == "aws_session_token" ? p.session_token : p.secret_access_key) = std::string(value);
  } else if (key == "endpoint_url") {
    if (std::string problem = EndpointProblem(value); !problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "endpoint_url \"", value.substr(0, 200), "\" ", problem, ": write scheme://host[:port], e.g. "
          "https://minio.example:9000", fix));
    }
    p.endpoint_url = std::string(absl::StripSuffix(value, "/"));
  } else if (key == "region") {
    if (value.size() > 64 || !IsNameChars(value, "-")) {
      return absl::InvalidArgumentError(
          absl::StrCat("region must be letters, digits and '-', at most 64 bytes (e.g. us-east-1)", fix));
    }
    p.region = std::string(value);
  } else if (key == "ca_bundle") {
    absl::StatusOr<std::string> pem = ReadCaBundle(std::string(value));
    if (!pem.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("ca_bundle ", value.substr(0, 4096), " ", pem.status().message(), fix));
    }
    p.ca_pem = *std::move(pem);
  } else if (key == "det_workspaces") {
    absl::StatusOr<std::vector<std::string>> ws = ParseWorkspaces(value);
    if (!ws.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("det_workspaces ", ws.status().message(),
                                                     ": write a comma-separated list of workspaces, or *", fix));
    }
    p.workspaces = *std::move(ws);
  }
  return absl::OkStatus();
}

struct Pending {
  S3Profile profile;
  int line = 0;
  std::vector<std::string> keys;
};

absl::Status FinishProfile(const Pending& pending, absl::string_view source) {
  for (const char* required : {"aws_access_key_id", "aws_secret_access_key", "det_workspaces"}) {
    if (std::find(pending.keys.begin(), pending.keys.end(), required) == pending.keys.end()) {
      return Error(source, pending.line,
                   absl::StrCat("profile [", pending.profile.name, "] has no ", required, ": add `", required,
                                " = ...`", absl::string_view(required) == "det_workspaces"
                                               ? " (the workspaces whose experiments may use it, or *)"
                                               : ""));
    }
  }
  return absl::OkStatus();
}

// One `[name]` line: checks the name.
absl::StatusOr<std::string> ProfileName(absl::string_view line) {
  absl::string_view name = absl::StripAsciiWhitespace(line.substr(1, line.size() - 2));
  absl::ConsumePrefix(&name, "profile ");  // ~/.aws/config's spelling
  name = absl::StripAsciiWhitespace(name);
  if (name.size() > kMaxProfileNameBytes || !IsNameChars(name, "._-")) {
    return absl::InvalidArgumentError(absl::StrCat("a profile name must be 1 to ", kMaxProfileNameBytes,
                                                   " letters, digits, '.', '_' or '-'"));
  }
  return std::string(name);
}

}  // namespace

bool S3Profile::AllowsWorkspace(absl::string_view workspace) const {
  for (const std::string& w : workspaces) {
    if (w == "*" || w == workspace) return true;
  }
  return false;
}

absl::StatusOr<std::map<std::string, S3Profile>> ParseS3Credentials(absl::string_view text,
                                                                    absl::string_view source) {
  if (text.size() > kMaxCredentialsFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, " is larger than ", kMaxCredentialsFileBytes, " bytes"));
  }
  std::map<std::string, S3Profile> profiles;
  std::optional<Pending> pending;
  auto finish = [&]() -> absl::Status {
    if (!pending) return absl::OkStatus();
    if (absl::Status s = FinishProfile(*pending, source); !s.ok()) return s;
    profiles.emplace(pending->profile.name, std::move(pending->profile));
    pending.reset();
    return absl::OkStatus();
  };
  int n = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++n;
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      if (absl::Status s = finish(); !s.ok()) return s;
      absl::StatusOr<std::string> name = ProfileName(line);
      if (!name.ok()) return Error(source, n, name.status().message());
      if (profiles.count(*name) > 0) {
        return Error(source, n, absl::StrCat("profile [", *name, "] appears twice: keep one"));
      }
      if (profiles.size() >= static_cast<size_t>(kMaxCredentialProfiles)) {
        return Error(source, n, absl::StrCat("more than ", kMaxCredentialProfiles, " profiles"));
      }
      pending.emplace();
      pending->profile.name = *name;
      pending->line = n;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return Error(source, n, "expected `[profile]` or `key = value` (the line is not shown: it may hold a secret)");
    }
    const std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)));
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(eq + 1));
    const bool known = std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys);
    if (!known) {
      const std::string shown = key.size() <= 40 && IsNameChars(key, "_") ? "`" + key + "`" : "(not shown)";
      return Error(source, n, absl::StrCat("unknown key ", shown, "; the keys are ", absl::StrJoin(kKeys, ", ")));
    }
    if (!pending) return Error(source, n, absl::StrCat(key, " is outside a profile: put a [name] line above it"));
    if (std::find(pending->keys.begin(), pending->keys.end(), key) != pending->keys.end()) {
      return Error(source, n, absl::StrCat(key, " appears twice in profile [", pending->profile.name, "]: keep one"));
    }
    if (absl::Status s = SetKey(pending->profile, key, value); !s.ok()) return Error(source, n, s.message());
    pending->keys.push_back(key);
  }
  if (absl::Status s = finish(); !s.ok()) return s;
  if (profiles.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " has no profile: add a [default] section with "
                                                           "aws_access_key_id, aws_secret_access_key and det_workspaces"));
  }
  return profiles;
}

absl::StatusOr<std::map<std::string, S3Profile>> ReadS3CredentialsFile(const std::string& path,
                                                                       absl::string_view flag) {
  return ReadS3CredentialsFileAs(path, flag, ::geteuid(), ::getegid());
}

absl::StatusOr<std::map<std::string, S3Profile>> ReadS3CredentialsFileAs(const std::string& path,
                                                                         absl::string_view flag, uid_t euid,
                                                                         gid_t egid) {
  absl::StatusOr<std::string> text =
      ReadSecretFileAs(path, flag, euid, egid, kMaxCredentialsFileBytes, "the S3 credentials (AWS's format)");
  if (!text.ok()) return text.status();
  return ParseS3Credentials(*text, absl::StrCat(flag, " ", path));
}

}  // namespace det::s3
