// A gRPC server interceptor that times every call for the master's /metrics
// (det_grpc_request_duration_seconds{method,code}) and counts open
// server-streaming and bidirectional calls (det_stream_subscribers{stream}).
#ifndef DET_MASTER_SERVICE_METRICS_INTERCEPTOR_H_
#define DET_MASTER_SERVICE_METRICS_INTERCEPTOR_H_

#include <memory>

#include <grpcpp/support/server_interceptor.h>

#include "master/core/master_metrics.h"

namespace det::master {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators, after
// ParseErrorInterceptorFactory (so it sees the status that one sends).
// `metrics` (not owned) must outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MetricsInterceptorFactory(
    MasterMetrics* metrics);

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_METRICS_INTERCEPTOR_H_
