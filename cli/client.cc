#include "cli/client.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

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

std::shared_ptr<grpc::ChannelCredentials> Credentials(const std::string& tls_ca) {
  if (tls_ca.empty()) return grpc::InsecureChannelCredentials();
  std::ifstream in(tls_ca, std::ios::binary);
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::SslCredentials(ssl);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, const std::string& tls_ca) {
  grpc::ChannelArguments args;
  // Trial libraries travel inline in CreateExperiment (the master bounds the
  // size); long listings and log batches may exceed the 4 MiB default.
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(target, Credentials(tls_ca), args);
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
  std::string code = StatusCodeName(status.error_code());
  bool transport = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                   status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  if (transport && channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    return "cannot reach master at " + options_.master + " (" + code + ": " + status.error_message() + ")";
  }
  return status.error_message() + " (" + code + ")";
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
