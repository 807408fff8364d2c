#include "master/core/listen_address.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace det::master {
namespace {

// Whether `address` ends in ":PORT": "host:8090", "[::1]:8090". A bare IPv6
// address ("fd00::5", two colons or more) has no port unless bracketed.
bool HasPort(absl::string_view address) {
  if (absl::StartsWith(address, "[")) return address.find("]:") != absl::string_view::npos;
  const size_t colons = std::count(address.begin(), address.end(), ':');
  return colons == 1;
}

}  // namespace

bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

absl::StatusOr<std::string> TrialMasterAddress(absl::string_view host, absl::string_view advertise, int port) {
  if (advertise.empty()) {
    if (IsWildcardHost(host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--host '", host, "' listens on every interface, so trials on other nodes cannot dial it: set "
          "--advertise-address (TOML key advertise-address) to this host's name or IP as the agents see it, "
          "e.g. advertise-address = \"det-master.example.internal\" (the gRPC port is appended when omitted)"));
    }
    // A bare IPv6 address ("::1") is bracketed before its port.
    if (host.find(':') != absl::string_view::npos && !absl::StartsWith(host, "[")) {
      return absl::StrCat("[", host, "]:", port);
    }
    return absl::StrCat(host, ":", port);
  }
  if (HasPort(advertise)) return std::string(advertise);
  if (advertise.find(':') != absl::string_view::npos && !absl::StartsWith(advertise, "[")) {
    return absl::StrCat("[", advertise, "]:", port);  // a bare IPv6 address
  }
  return absl::StrCat(advertise, ":", port);
}

}  // namespace det::master
