// A clear error for a gRPC request the master cannot parse.
//
// gRPC's callback server answers a request message that fails to parse
// with UNIMPLEMENTED and no message: what a client sent a proto3 string
// holding bytes that are not UTF-8 (a Latin-1 config_yaml, a trial's raw
// bytes) saw as "det-cli: error:  (UNIMPLEMENTED)". This server interceptor
// turns that answer, for a method the master does implement, into
// INVALID_ARGUMENT saying what to fix. Every other status passes unchanged
// (the master's own UNIMPLEMENTED errors always carry a message; an unknown
// method stays UNIMPLEMENTED).
#ifndef DET_MASTER_SERVICE_PARSE_ERROR_INTERCEPTOR_H_
#define DET_MASTER_SERVICE_PARSE_ERROR_INTERCEPTOR_H_

#include <memory>
#include <string>

#include <grpcpp/support/server_interceptor.h>

namespace det::master {

// The error a request of `method` ("/det.api.v1.Determined/CreateExperiment")
// that could not be parsed gets.
std::string UnparsableRequestMessage(const std::string& method);

// For grpc::ServerBuilder::experimental().SetInterceptorCreators.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> ParseErrorInterceptorFactory();

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_PARSE_ERROR_INTERCEPTOR_H_
