// A thin wrapper around the master's det.api.v1.Determined gRPC stub: channel
// creation, per-call deadlines, the token metadata and turning a failed
// grpc::Status into the one-line message det-cli prints.
#ifndef DET_CLI_CLIENT_H_
#define DET_CLI_CLIENT_H_

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "det/api/v1/api.grpc.pb.h"

namespace det::cli {

struct ClientOptions {
  // HOST:PORT of the master's gRPC port.
  std::string master = "localhost:8090";
  // Sent as `authorization: Bearer <token>` when non-empty.
  std::string token;
  // PEM CA certificate file: connect over TLS (empty: plaintext).
  std::string tls_ca;
  // Deadline of every unary RPC; streams with follow get none.
  std::chrono::milliseconds deadline{std::chrono::seconds(30)};
};

// Resolves the master address and token: `flag_master` if non-empty, else
// $DET_MASTER, else localhost:8090; the token from $DET_USER_TOKEN; the TLS
// CA from $DET_MASTER_CERT_FILE.
ClientOptions ClientOptionsFromEnv(const std::string& flag_master);

// Thread-compatible: one Client may be used by one thread at a time (the
// underlying channel and stub are thread-safe).
class Client {
 public:
  using Stub = det::api::v1::Determined::StubInterface;

  // Opens an insecure channel to options.master (connects lazily).
  explicit Client(ClientOptions options);
  // Uses `channel` (tests: an in-process server's channel).
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel);

  const ClientOptions& options() const { return options_; }
  // Replaces the token sent with later calls.
  void set_token(std::string token) { options_.token = std::move(token); }
  Stub& stub() { return *stub_; }

  // Prepares `ctx` for a call: the token metadata and, unless `streaming`,
  // the deadline.
  void PrepareContext(grpc::ClientContext* ctx, bool streaming = false) const;

  // Runs a unary RPC with a fresh prepared context:
  //   client.Call(&Client::Stub::GetExperiment, req, &resp)
  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx);
    return (stub_.get()->*method)(&ctx, request, response);
  }

  // The text det-cli prints after "det-cli: error: " for a failed call:
  // FormatRpcError with whether the channel is connected.
  std::string ErrorMessage(const grpc::Status& status) const;

 private:
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
};

// True when gRPC's message for a failed connection says the far end spoke
// HTTP/1.x (e.g. the master's REST port).
bool LooksLikeHttp1Server(const std::string& grpc_message);

// The one-line text of a failed call to `master`: "<message> (<CODE_NAME>)"
// when the master answered (`connected`, or a code other than UNAVAILABLE or
// DEADLINE_EXCEEDED); otherwise one that names the fix: the gRPC port when
// the far end spoke HTTP/1 (the REST port), else "no master answered at
// MASTER ...: start one (deploy/cluster.sh start) or ... -m / DET_MASTER".
std::string FormatRpcError(const std::string& master, const grpc::Status& status, bool connected);

// "NOT_FOUND", "INVALID_ARGUMENT", ... for a gRPC status code.
const char* StatusCodeName(grpc::StatusCode code);

}  // namespace det::cli

#endif  // DET_CLI_CLIENT_H_
