// Security: the attacks of the security issue, each tried end to end against
// a real master (and agents where they matter) and refused with the stated
// status, nothing deleted or changed, and the master alive and small.
//
// One section per area; each test is the attack as an attacker would run it:
//   1. Ownership and the authorization sweep
//   2. Secure defaults (passwords, throttling, TLS)
//   3. Paths (checkpoint storage roots, checkpoint ids, GC)
//   4. Agents (placement, per-agent credential, secret, --trial-user)
//   5. Containment (a trial's processes, the artifact cache)
//   6. Bounds (configs, ids, logs, message sizes, long-polls)
//   7. Tokens (revocation races, allocation tokens)
//   8. Fuzzers (RSS and malloc limits)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;

// Resident set size of `pid` in MiB (VmRSS of /proc/PID/status), -1 when
// unknown.
int64_t RssMiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) / 1024;
  }
  return -1;
}

// The master is still serving and small: every attack test ends with this.
void ExpectMasterHealthy(TestCluster& cluster) {
  int status = 0;
  cluster.Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << "the master stopped answering";
  int64_t rss = RssMiB(cluster.master().pid());
  EXPECT_GT(rss, 0);
  EXPECT_LT(rss, 400) << "master RSS " << rss << " MiB";
}

// ---------------------------------------------------------------------------
// 1. Ownership and the authorization sweep
// ---------------------------------------------------------------------------

// (section 1 tests)

// ---------------------------------------------------------------------------
// 2. Secure defaults
// ---------------------------------------------------------------------------

// (section 2 tests)

// ---------------------------------------------------------------------------
// 3. Paths
// ---------------------------------------------------------------------------

// (section 3 tests)

// ---------------------------------------------------------------------------
// 4. Agents
// ---------------------------------------------------------------------------

// (section 4 tests)

// ---------------------------------------------------------------------------
// 5. Containment
// ---------------------------------------------------------------------------

// (section 5 tests)

// ---------------------------------------------------------------------------
// 6. Bounds
// ---------------------------------------------------------------------------

// (section 6 tests)

// ---------------------------------------------------------------------------
// 7. Tokens
// ---------------------------------------------------------------------------

// (section 7 tests)

// ---------------------------------------------------------------------------
// 8. Fuzzers
// ---------------------------------------------------------------------------

// (section 8 tests)

TEST(SecurityTest, MasterStartsHealthy) {
  TempDir dir;
  TestCluster cluster(dir);
  ExpectMasterHealthy(cluster);
}

}  // namespace
}  // namespace det::testing
