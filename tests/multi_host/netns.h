// Network-namespace helpers for multi-host tests: the ip binary, running
// code on a thread inside a namespace, ending a namespace's processes.
#ifndef DET_TESTS_MULTI_HOST_NETNS_H_
#define DET_TESTS_MULTI_HOST_NETNS_H_

#include <functional>
#include <string>

namespace det::testing {

// The path of iproute2's ip, "" when it is not installed. Thread-safe.
std::string IpBinary();

// Runs `fn` on a new thread that entered network namespace `netns`
// (/var/run/netns/NETNS; empty: this one) and joins it. Network namespaces
// are per thread, so the caller's other threads stay where they are.
// Returns false (without running `fn`) when the namespace cannot be
// entered. Thread-safe.
bool InNetns(const std::string& netns, const std::function<void()>& fn);

// SIGKILLs every process in network namespace `netns` (ip netns pids) and
// waits up to 10 s until none is left. Thread-safe.
void KillNetnsProcesses(const std::string& ip, const std::string& netns);

// Whether a TCP connection to ADDRESS:PORT succeeds from `netns` within
// about a second. Thread-safe.
bool TcpConnects(const std::string& netns, const std::string& address, int port);

}  // namespace det::testing

#endif  // DET_TESTS_MULTI_HOST_NETNS_H_
