// The REST API's dispatcher: serves every /api/ request from the declared
// route table (rest_routes.h) and the generic routes, through ApiHandlers.
//
// Generic routes (api.proto's REST contract): every RPC of
// det.api.v1.Determined is POST /api/v1/<RpcName> with the request as the JSON
// body (empty: {}; the query is ignored) and the response as JSON; a
// server-streaming RPC answers application/x-ndjson, one response message
// per line (rest_stream.h). Client-streaming RPCs (UploadArtifact) are gRPC
// only: their path answers 400 and is not listed. GET /api/v1/routes lists
// the declared and generic routes (RestRouteInfo).
//
// Authentication: every /api/ path needs a user token except the routes of
// the methods that need none (request_auth.h: GetMaster, Login); a path no
// RPC serves needs a token like any other. Thread-safe after construction.
#ifndef DET_MASTER_HTTP_REST_DISPATCH_H_
#define DET_MASTER_HTTP_REST_DISPATCH_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <httplib.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "master/http/rest_request.h"
#include "master/http/rest_routes.h"
#include "master/service/api_handlers.h"

namespace det::master {

class MasterMetrics;

// A declared route ready to serve.
struct CompiledRestRoute {
  RestRoute route;
  PathTemplate path;
  const google::protobuf::MethodDescriptor* method = nullptr;
  std::vector<const google::protobuf::FieldDescriptor*> path_fields;  // in template order
  std::multimap<std::string, std::string> fixed;
  // route.caps: each an integer field of the request and its largest value.
  std::vector<std::pair<const google::protobuf::FieldDescriptor*, int64_t>> caps;
};

// Compiles `route`: a known HTTP method, a well-formed template, an RPC of
// the service that is not client-streaming, path parameters naming singular
// scalar fields of its request, `fixed` naming settable fields with valid
// values. InvalidArgument naming the route and the problem otherwise.
absl::StatusOr<CompiledRestRoute> CompileRestRoute(const RestRoute& route);

class RestDispatcher {
 public:
  // Compiles `routes` (in matching order) and adds the generic routes.
  // A route that CompileRestRoute refuses is a bug: aborts, naming it.
  // `handlers` is not owned and must outlive the dispatcher.
  RestDispatcher(const ApiHandlers* handlers, const std::vector<RestRoute>& routes);

  // Every route, as GET /api/v1/routes lists them: the declared ones, GET
  // /api/v1/routes, GET /api/v1/health (public; RestServer serves it, see
  // health.h), then one generic route per RPC in service order.
  const std::vector<RestRouteInfo>& routes() const { return infos_; }

  // The RPC that `method` `path` calls: a declared route's, or <Name> of a
  // POST /api/v1/<Name> the service has; "" when none.
  std::string RpcOf(absl::string_view method, const std::string& path) const;

  // The route label of `method` `path` for /metrics: "<METHOD> <pattern>"
  // of the route serving it (a declared route's template, never the raw
  // path with its ids; POST /api/v1/<RpcName>; GET /api/v1/routes); ""
  // when no route serves it.
  std::string RouteLabel(absl::string_view method, const std::string& path) const;

  // Checks the credentials of an /api/ request for the RPC it calls (see
  // above). Unauthenticated when they do not suffice.
  absl::Status Authenticate(const httplib::Request& req) const;

  // Serves one /api/ request (authenticating it again, for its caller);
  // NotFound (404) for a path no route serves. `in_memory`: the request has
  // no connection (ServeRawForTesting): streams are buffered (rest_stream.h).
  void Serve(const httplib::Request& req, httplib::Response& res, bool in_memory = false) const;

  // NDJSON streams count in `metrics`' det_stream_subscribers (null: not
  // counted; not owned). Set before serving.
  void set_metrics(MasterMetrics* metrics) { metrics_ = metrics; }

 private:
  // What a request resolves to: at most one of these is set.
  struct Target {
    const CompiledRestRoute* declared = nullptr;
    std::vector<std::string> values;  // the declared route's path parameters
    const google::protobuf::MethodDescriptor* generic = nullptr;
    std::string unknown_rpc;  // POST /api/v1/<Name> that the service lacks
    bool list_routes = false;
  };

  Target Resolve(absl::string_view method, const std::string& path) const;
  absl::StatusOr<ApiCaller> Caller(const std::string& rpc, const httplib::Request& req) const;
  void ServeDeclared(const CompiledRestRoute& d, const std::vector<std::string>& values, const httplib::Request& req,
                     httplib::Response& res, bool in_memory) const;
  void ServeGeneric(const google::protobuf::MethodDescriptor* method, const httplib::Request& req,
                    httplib::Response& res, bool in_memory) const;
  void SendRoutes(httplib::Response& res) const;

  const ApiHandlers* handlers_;
  MasterMetrics* metrics_ = nullptr;
  std::vector<CompiledRestRoute> declared_;
  std::vector<RestRouteInfo> infos_;
};

}  // namespace det::master

#endif  // DET_MASTER_HTTP_REST_DISPATCH_H_
