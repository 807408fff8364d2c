// The channel arguments of the long-lived connections to the master
// (det-agent's and det-trial's), and the master's side of their keepalive.
//
// Reconnect: a lost connection is redialled after 100 ms, backing off to at
// most 1 s, so that a restarted master or a link that came back is reached
// within about a second. Each connection attempt (TCP, TLS and HTTP/2
// handshakes) may take kConnectTimeoutMs: gRPC drives an attempt only while
// a thread waits on the channel, else every 5 s (its backup poller), so a
// shorter timeout can fail every attempt of a channel nobody waits on.
//
// Keepalive: without it a call on a TCP connection whose link died (a cut
// cable, a partition) waits for its deadline or the kernel's retransmission
// timeout (minutes); with it the channel sees the dead link within
// kKeepaliveTimeMs + kKeepaliveTimeoutMs and reconnects.
#ifndef DET_COMMON_MASTER_CHANNEL_H_
#define DET_COMMON_MASTER_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

namespace det {

inline constexpr int kReconnectInitialBackoffMs = 100;
inline constexpr int kReconnectMaxBackoffMs = 1000;
inline constexpr int kConnectTimeoutMs = 10000;
// A client pings after this long without traffic on its connection...
inline constexpr int kKeepaliveTimeMs = 5000;
// ... and drops the connection when the ping is not answered this long.
inline constexpr int kKeepaliveTimeoutMs = 5000;
// The master accepts pings this often (below kKeepaliveTimeMs, so that a
// client is never sent GOAWAY too_many_pings).
inline constexpr int kKeepaliveMinPingIntervalMs = 1000;

// Sets reconnect and keepalive arguments for a channel to the master.
inline void SetMasterChannelArgs(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectInitialBackoffMs);
  args->SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectMaxBackoffMs);
  // gRPC takes its minimum connect timeout from this argument.
  args->SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args->SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

// The credentials of a client's channel to the master: insecure when
// `ca_file` is "", else TLS trusting the PEM certificates in `ca_file` (one
// that cannot be read trusts nothing: the handshake fails).
inline std::shared_ptr<grpc::ChannelCredentials> TlsOrInsecureCredentials(const std::string& ca_file) {
  if (ca_file.empty()) return grpc::InsecureChannelCredentials();
  std::ifstream in(ca_file, std::ios::binary);
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::SslCredentials(ssl);
}

// Sets the master's side: accepts the clients' pings (SetMasterChannelArgs).
inline void AddServerKeepalivePolicy(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, kKeepaliveMinPingIntervalMs);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);  // 0: no GOAWAY for pings
}

}  // namespace det

#endif  // DET_COMMON_MASTER_CHANNEL_H_
