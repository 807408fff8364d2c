// What operator_cluster*.cc share; not for tests.
#ifndef DET_TESTS_MULTI_HOST_OPERATOR_CLUSTER_INTERNAL_H_
#define DET_TESTS_MULTI_HOST_OPERATOR_CLUSTER_INTERNAL_H_

#include <string>

#include "tests/multi_host/operator_cluster.h"

namespace det::testing {

// The checkout (deploy/install.sh), the build dir it installs from, and the
// example trials (set by tests/CMakeLists.txt).
extern const char kOperatorSourceDir[];
extern const char kOperatorBuildDir[];
extern const char kOperatorTrialsDir[];

// The shipped master.toml's ports.
constexpr int kGrpcPort = 8090;
constexpr int kHttpPort = 8080;

inline Host AgentHost(int i) { return i == 1 ? Host::kAgent1 : Host::kAgent2; }

struct OperatorCluster::HostState {
  Host host;
  std::string name;        // "master", "agent1", ...
  std::string netns;       // its network namespace
  std::string address;     // its address on the bridge
  std::string root;        // its install's /
  std::string bridge_end;  // its veth's end on the bridge
};

}  // namespace det::testing

#endif  // DET_TESTS_MULTI_HOST_OPERATOR_CLUSTER_INTERNAL_H_
