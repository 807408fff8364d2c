// The REST API's declared routes: each is one line of a table that maps an
// HTTP method and path template onto a det.api.v1.Determined RPC, which
// ApiHandlers (master/service/api_handlers.h) answers exactly as over gRPC.
//
// How a declared route builds the RPC's request (a message of the method's
// input type), in this order, later steps overriding earlier ones:
//   1. body == RestBody::kJson: the request body as protobuf JSON (empty: {});
//      RestBody::kNone: the query parameters, each naming a field of the
//      request (proto or JSON name; repeated fields: repeat the parameter;
//      enums by value name, short name or number: sort_by=searcher_metric,
//      see SetFieldFromText). Unknown parameters are ignored; a
//      malformed value for a known field is INVALID_ARGUMENT naming it, e.g.
//      "limit: not an integer: 'abc'".
//   2. the path parameters: "{experiment_id}" fills the field of that name.
//   3. `fixed`: "field=value&..." set last, whatever the client sent (e.g.
//      "follow=false").
//   4. `caps`: "field=max&...": an integer field the client left at 0 or set
//      above max (or below 0) becomes max (e.g. "limit=1000": pages).
// The response is the RPC's response as protobuf JSON. A declared route of a
// server-streaming RPC answers one message: every streamed response merged in
// order (MergeFrom), so repeated fields are concatenated; it must fix
// follow=false when its request has `follow`. `hook` may add
// response headers after a successful call (Login's cookie).
//
// Every RPC is also served generically as POST /api/v1/<RpcName> (see
// rest_dispatch.h); a declared route is for the resource-style paths the
// dashboard and scripts use. To add one: one line in the right routes_*.cc.
#ifndef DET_MASTER_HTTP_REST_ROUTES_H_
#define DET_MASTER_HTTP_REST_ROUTES_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

namespace httplib {
struct Response;
}  // namespace httplib

namespace det::master {

class ApiHandlers;
struct ApiCaller;

enum class RestBody {
  kNone,  // the request comes from the query and the path
  kJson,  // the body is the request (JSON); the path overrides its fields
};

// Response headers to add ("Set-Cookie", ...).
using RestHeaders = std::vector<std::pair<std::string, std::string>>;
// Runs after a successful call with the RPC's response; adds headers.
using RestResponseHook = void (*)(const google::protobuf::Message& response, RestHeaders* headers);
// Answers a server-streaming RPC in a format of its own instead of JSON
// (e.g. ServeTar in rest_tar.h): gets the built request and the response.
using RestStreamer = void (*)(const ApiHandlers& handlers, const google::protobuf::MethodDescriptor* method,
                              const ApiCaller& caller, std::unique_ptr<google::protobuf::Message> request,
                              httplib::Response& res);

struct RestRoute {
  const char* method;  // "GET", "POST", "PATCH", "PUT" or "DELETE"
  const char* path;    // e.g. "/api/v1/experiments/{experiment_id}"
  const char* rpc;     // a method name of det.api.v1.Determined
  RestBody body = RestBody::kNone;
  const char* fixed = "";  // "field=value&..." (see above)
  RestResponseHook hook = nullptr;
  const char* caps = "";  // "field=max&..." (see above)
  // A server-streaming RPC's route that answers application/x-ndjson as the
  // call streams (one message per line, as POST /api/v1/<RpcName> does)
  // instead of one merged message; it may follow.
  bool ndjson = false;
  RestStreamer streamer = nullptr;  // set: answers in its own format
};

// One API route as GET /api/v1/routes lists it.
struct RestRouteInfo {
  std::string method;
  std::string pattern;  // a declared route's path template; /api/v1/<RpcName>
  std::string rpc;      // the RPC it calls ("" for GET /api/v1/routes)
  bool authenticated = true;
  bool generic = false;    // POST /api/v1/<RpcName>
  bool streaming = false;  // answers newline-delimited JSON
};

// The tables, one per resource group (routes_<group>.cc).
std::vector<RestRoute> AuthRoutes();        // login, logout, me, users
std::vector<RestRoute> ExperimentRoutes();  // experiments and their actions
std::vector<RestRoute> TrialRoutes();       // trials, metrics, logs, checkpoints
std::vector<RestRoute> ClusterRoutes();     // master, agents, slots

// Every declared route, in matching order (rest_dispatch.cc).
std::vector<RestRoute> AllRestRoutes();

}  // namespace det::master

#endif  // DET_MASTER_HTTP_REST_ROUTES_H_
