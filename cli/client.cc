#include "cli/client.h"

#include <cstdlib>
#include <utility>

#include "common/master_channel.h"

namespace det::cli {

ClientOptions ClientOptionsFromEnv(const std::string& flag_master) {
  ClientOptions options;
  if (!flag_master.empty()) {
    options.master = flag_master;
  } else if (const char* env = std::getenv("DET_MASTER"); env != nullptr && *env != '\0') {
    options.master = env;
  }
  if (const char* token = std::getenv("DET_USER_TOKEN"); token != nullptr) options.token = token;
  if (const char* ca = std::getenv("DET_MASTER_CERT_FILE"); ca != nullptr) options.tls_ca = ca;
  return options;
}

namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, const std::string& tls_ca) {
  grpc::ChannelArguments args;
  // Trial libraries travel inline in CreateExperiment (the master bounds the
  // size); long listings and log batches may exceed the 4 MiB default.
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(target, TlsOrInsecureCredentials(tls_ca), args);
}

}  // namespace

Client::Client(ClientOptions options) : Client(options, MakeChannel(options.master, options.tls_ca)) {}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(det::api::v1::Determined::NewStub(channel_)) {}

void Client::PrepareContext(grpc::ClientContext* ctx, bool streaming) const {
  if (!options_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.token);
  if (!streaming) ctx->set_deadline(std::chrono::system_clock::now() + options_.deadline);
}

std::string Client::ErrorMessage(const grpc::Status& status) const {
  return FormatRpcError(options_.master, status, channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY);
}

bool LooksLikeHttp1Server(const std::string& grpc_message) {
  // gRPC's words when the far end answers HTTP/1.x: a real master's REST
  // port gives "Trying to connect an http1.x server", other HTTP/1 servers
  // "Failed parsing HTTP/2" (or a version/preface complaint).
  for (const char* sign : {"http1.x server", "Failed parsing HTTP/2", "HTTP/1."}) {
    if (grpc_message.find(sign) != std::string::npos) return true;
  }
  return false;
}

std::string FormatRpcError(const std::string& master, const grpc::Status& status, bool connected) {
  const std::string code = StatusCodeName(status.error_code());
  const bool transport = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  if (!transport || connected) return status.error_message() + " (" + code + ")";
  const std::string why = " (" + code + ": " + status.error_message() + ")";
  if (LooksLikeHttp1Server(status.error_message())) {
    return "cannot talk to a master at " + master + why +
           ": this looks like the master's REST port; det-cli speaks gRPC: use the gRPC port (8090 by default), "
           "with -m HOST:PORT or DET_MASTER";
  }
  return "no master answered at " + master + why +
         ": start one (deploy/cluster.sh start) or point det-cli at yours with -m HOST:PORT or DET_MASTER";
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN_CODE";
  }
}

}  // namespace det::cli
