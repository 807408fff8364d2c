// Where trial processes dial the master: the --host the master listens on
// and its --advertise-address.
//
// Pure functions over strings; thread-safe.
#ifndef DET_MASTER_CORE_LISTEN_ADDRESS_H_
#define DET_MASTER_CORE_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det::master {

// Whether `host` (a --host value) listens on every interface: "0.0.0.0",
// "::", "[::]" or empty. No process can dial such an address from another
// node.
bool IsWildcardHost(absl::string_view host);

// The gRPC address the master gives its trial processes.
// - `advertise` empty: HOST:PORT ([HOST]:PORT for IPv6), where `port` is the bound gRPC port; a
//   wildcard `host` is refused (InvalidArgument naming advertise-address),
//   because trials on other nodes would dial it.
// - `advertise` without a port ("det-master.internal", "10.0.0.5",
//   "[fd00::5]"): that host with the bound port appended.
// - `advertise` with a port ("det-master.internal:8090"): as given.
// Requires: port > 0.
absl::StatusOr<std::string> TrialMasterAddress(absl::string_view host, absl::string_view advertise, int port);

}  // namespace det::master

#endif  // DET_MASTER_CORE_LISTEN_ADDRESS_H_
