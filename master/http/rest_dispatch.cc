#include "master/http/rest_dispatch.h"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/proto_json.h"
#include "master/http/health.h"
#include "master/http/rest_reply.h"
#include "master/http/rest_stream.h"
#include "master/service/method_access.h"
#include "master/service/request_auth.h"

namespace det::master {
namespace {

namespace pb = google::protobuf;

constexpr char kGenericPrefix[] = "/api/v1/";
constexpr char kRoutesPath[] = "/api/v1/routes";
// Paths that call no RPC need what every RPC but the public ones needs: a
// user token. GetMe needs exactly that.
constexpr char kAnyUserRpc[] = "GetMe";

std::unique_ptr<pb::Message> NewMessage(const pb::Descriptor* type) {
  return std::unique_ptr<pb::Message>(pb::MessageFactory::generated_factory()->GetPrototype(type)->New());
}

// <Name> of /api/v1/<Name> when it can name an RPC (an upper-case letter,
// then letters and digits); "" otherwise.
absl::string_view GenericName(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, kGenericPrefix)) return "";
  if (path.empty() || !absl::ascii_isupper(path[0])) return "";
  for (char c : path) {
    if (!absl::ascii_isalnum(c)) return "";
  }
  return path;
}

// HEAD is served by the GET routes.
absl::string_view RouteMethod(absl::string_view method) { return method == "HEAD" ? "GET" : method; }

absl::Status RouteError(const RestRoute& route, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("REST route ", route.method, " ", route.path, ": ", problem));
}

bool Streams(const pb::MethodDescriptor* m) { return m->server_streaming() && !m->client_streaming(); }

// CompiledRestRoute::caps applied to `request`.
void ApplyCaps(const std::vector<std::pair<const pb::FieldDescriptor*, int64_t>>& caps, pb::Message* request) {
  const pb::Reflection* r = request->GetReflection();
  for (const auto& [f, max] : caps) {
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT32) {
      const int32_t v = r->GetInt32(*request, f);
      if (v <= 0 || v > max) r->SetInt32(request, f, static_cast<int32_t>(max));
    } else {
      const int64_t v = r->GetInt64(*request, f);
      if (v <= 0 || v > max) r->SetInt64(request, f, max);
    }
  }
}

}  // namespace

std::vector<RestRoute> AllRestRoutes() {
  std::vector<RestRoute> all;
  for (auto group : {AuthRoutes, ExperimentRoutes, TrialRoutes, ClusterRoutes}) {
    std::vector<RestRoute> routes = group();
    all.insert(all.end(), routes.begin(), routes.end());
  }
  return all;
}

absl::StatusOr<CompiledRestRoute> CompileRestRoute(const RestRoute& route) {
  CompiledRestRoute c;
  c.route = route;
  const absl::string_view method = route.method;
  if (method != "GET" && method != "POST" && method != "PATCH" && method != "PUT" && method != "DELETE") {
    return RouteError(route, "unknown HTTP method");
  }
  auto path = CompilePathTemplate(route.path);
  if (!path.ok()) return RouteError(route, path.status().message());
  c.path = std::move(*path);
  c.method = ApiHandlers::Service()->FindMethodByName(route.rpc);
  if (c.method == nullptr) return RouteError(route, absl::StrCat("no RPC ", route.rpc));
  if (c.method->client_streaming()) return RouteError(route, "a client-streaming RPC is gRPC only");
  const pb::Descriptor* input = c.method->input_type();
  for (const std::string& param : c.path.params) {
    const pb::FieldDescriptor* f = input->FindFieldByName(param);
    if (f == nullptr || f->is_repeated() || !IsTextSettable(f)) {
      return RouteError(route, absl::StrCat("{", param, "} is no singular scalar field of ", input->full_name()));
    }
    c.path_fields.push_back(f);
  }
  c.fixed = ParseFixedPairs(route.fixed);
  // A declared streaming route answers once its call ends: it must not follow.
  const bool fixes_follow = c.fixed.count("follow") == 1 && c.fixed.find("follow")->second == "false";
  if (Streams(c.method) && input->FindFieldByName("follow") != nullptr && !fixes_follow && !route.ndjson) {
    return RouteError(route, "a declared route of a streaming RPC must fix follow=false");
  }
  for (const auto& [name, value] : ParseFixedPairs(route.caps)) {
    const pb::FieldDescriptor* f = FindFieldByAnyName(input, name);
    int64_t max = 0;
    if (f == nullptr || f->is_repeated() ||
        (f->cpp_type() != pb::FieldDescriptor::CPPTYPE_INT32 && f->cpp_type() != pb::FieldDescriptor::CPPTYPE_INT64) ||
        !absl::SimpleAtoi(value, &max) || max <= 0 ||
        (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT32 && max > std::numeric_limits<int32_t>::max())) {
      return RouteError(route, absl::StrCat("cap ", name, "=", value, " is no positive cap of an integer field of ",
                                            input->full_name()));
    }
    c.caps.emplace_back(f, max);
  }
  std::unique_ptr<pb::Message> scratch = NewMessage(input);
  for (const auto& [name, value] : c.fixed) {
    const pb::FieldDescriptor* f = FindFieldByAnyName(input, name);
    if (f == nullptr) return RouteError(route, absl::StrCat("fixed ", name, " is no field of ", input->full_name()));
    absl::Status st = SetFieldFromText(scratch.get(), f, value);
    if (!st.ok()) return RouteError(route, st.message());
  }
  return c;
}

RestDispatcher::RestDispatcher(const ApiHandlers* handlers, const std::vector<RestRoute>& routes)
    : handlers_(handlers) {
  for (const RestRoute& route : routes) {
    auto compiled = CompileRestRoute(route);
    if (!compiled.ok()) {
      std::fprintf(stderr, "%s\n", std::string(compiled.status().message()).c_str());
      std::abort();
    }
    declared_.push_back(std::move(*compiled));
    infos_.push_back(
        {route.method, route.path, route.rpc, !IsUnauthenticatedMethod(route.rpc), false, route.ndjson});
  }
  infos_.push_back({"GET", kRoutesPath, "", true, false, false});
  infos_.push_back({"GET", kHealthPath, "", false, false, false});  // served by RestServer (health.h)
  const pb::ServiceDescriptor* service = ApiHandlers::Service();
  for (int i = 0; i < service->method_count(); ++i) {
    const pb::MethodDescriptor* m = service->method(i);
    if (m->client_streaming()) continue;  // gRPC only
    infos_.push_back({"POST", absl::StrCat(kGenericPrefix, m->name()), m->name(), !IsUnauthenticatedMethod(m->name()),
                      true, Streams(m)});
  }
}

RestDispatcher::Target RestDispatcher::Resolve(absl::string_view method, const std::string& path) const {
  Target t;
  method = RouteMethod(method);
  for (const CompiledRestRoute& d : declared_) {
    if (method == d.route.method && MatchPathTemplate(d.path, path, &t.values)) {
      t.declared = &d;
      return t;
    }
  }
  if (method == "GET" && path == kRoutesPath) {
    t.list_routes = true;
    return t;
  }
  absl::string_view name = method == "POST" ? GenericName(path) : "";
  if (name.empty()) return t;
  t.generic = ApiHandlers::Service()->FindMethodByName(std::string(name));
  if (t.generic == nullptr) t.unknown_rpc = std::string(name);
  return t;
}

std::string RestDispatcher::RpcOf(absl::string_view method, const std::string& path) const {
  Target t = Resolve(method, path);
  if (t.declared != nullptr) return t.declared->route.rpc;
  if (t.generic != nullptr) return t.generic->name();
  return "";
}

std::string RestDispatcher::RouteLabel(absl::string_view method, const std::string& path) const {
  Target t = Resolve(method, path);
  if (t.declared != nullptr) return absl::StrCat(t.declared->route.method, " ", t.declared->route.path);
  if (t.generic != nullptr) return absl::StrCat("POST ", kGenericPrefix, t.generic->name());
  if (t.list_routes) return absl::StrCat("GET ", kRoutesPath);
  return "";
}

absl::StatusOr<ApiCaller> RestDispatcher::Caller(const std::string& rpc, const httplib::Request& req) const {
  auto caller = handlers_->Authenticate(rpc.empty() ? kAnyUserRpc : rpc, req.get_header_value("Authorization"),
                                        req.get_header_value("Cookie"));
  if (caller.ok()) caller->peer_address = req.remote_addr;
  return caller;
}

absl::Status RestDispatcher::Authenticate(const httplib::Request& req) const {
  return Caller(RpcOf(req.method, req.path), req).status();
}

void RestDispatcher::Serve(const httplib::Request& req, httplib::Response& res, bool in_memory) const {
  Target t = Resolve(req.method, req.path);
  if (t.declared != nullptr) return ServeDeclared(*t.declared, t.values, req, res, in_memory);
  if (t.generic != nullptr) return ServeGeneric(t.generic, req, res, in_memory);
  if (t.list_routes) return SendRoutes(res);
  if (!t.unknown_rpc.empty()) {
    return SendError(res, absl::NotFoundError(absl::StrCat("no RPC ", ApiHandlers::Service()->full_name(), "/",
                                                           t.unknown_rpc)));
  }
  SendError(res, absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path)));
}

void RestDispatcher::ServeDeclared(const CompiledRestRoute& d, const std::vector<std::string>& values,
                                   const httplib::Request& req, httplib::Response& res, bool in_memory) const {
  auto caller = Caller(d.route.rpc, req);
  if (!caller.ok()) return SendError(res, caller.status());
  std::unique_ptr<pb::Message> request = NewMessage(d.method->input_type());
  absl::Status st = d.route.body == RestBody::kJson ? JsonToMessage(req.body.empty() ? "{}" : req.body, request.get())
                                                    : SetFieldsFromPairs(req.params, request.get());
  for (size_t i = 0; st.ok() && i < d.path_fields.size(); ++i) {
    request->GetReflection()->ClearField(request.get(), d.path_fields[i]);
    st = SetFieldFromText(request.get(), d.path_fields[i], values[i]);
  }
  if (st.ok()) st = SetFieldsFromPairs(d.fixed, request.get());
  if (!st.ok()) return SendError(res, st);
  ApplyCaps(d.caps, request.get());
  if (d.route.ndjson && Streams(d.method)) {
    return ServeNdjson(*handlers_, d.method, *std::move(caller), std::move(request),
                       in_memory ? NdjsonMode::kBuffered : NdjsonMode::kChunked, res, metrics_);
  }
  if (d.route.streamer != nullptr) return d.route.streamer(*handlers_, d.method, *caller, std::move(request), res);
  std::unique_ptr<pb::Message> response = NewMessage(d.method->output_type());
  if (Streams(d.method)) {
    // One answer: every streamed message merged in order.
    st = handlers_->CallServerStreaming(
        d.route.rpc, *caller, *request,
        [&](const pb::Message& m) {
          response->MergeFrom(m);
          return true;
        },
        [] { return false; });
  } else {
    st = handlers_->CallUnary(d.route.rpc, *caller, *request, response.get());
  }
  if (!st.ok()) return SendError(res, st);
  if (d.route.hook != nullptr) {
    RestHeaders headers;
    d.route.hook(*response, &headers);
    for (const auto& [name, value] : headers) res.set_header(name, value);
  }
  SendMessage(res, *response);
}

void RestDispatcher::ServeGeneric(const pb::MethodDescriptor* method, const httplib::Request& req,
                                  httplib::Response& res, bool in_memory) const {
  auto caller = Caller(method->name(), req);
  if (!caller.ok()) return SendError(res, caller.status());
  if (method->client_streaming()) {
    return SendError(res, absl::InvalidArgumentError(absl::StrCat(
                              method->name(), " is a client-streaming RPC: gRPC only (see det/api/v1/api.proto)")));
  }
  std::unique_ptr<pb::Message> request = NewMessage(method->input_type());
  absl::Status st = JsonToMessage(req.body.empty() ? "{}" : req.body, request.get());
  if (!st.ok()) return SendError(res, st);
  if (Streams(method)) {
    return ServeNdjson(*handlers_, method, *std::move(caller), std::move(request),
                       in_memory ? NdjsonMode::kBuffered : NdjsonMode::kChunked, res, metrics_);
  }
  std::unique_ptr<pb::Message> response = NewMessage(method->output_type());
  st = handlers_->CallUnary(method->name(), *caller, *request, response.get());
  if (!st.ok()) return SendError(res, st);
  SendMessage(res, *response);
}

void RestDispatcher::SendRoutes(httplib::Response& res) const {
  nlohmann::json out = nlohmann::json::array();
  for (const RestRouteInfo& r : infos_) {
    out.push_back({{"method", r.method},
                   {"pattern", r.pattern},
                   {"rpc", r.rpc},
                   {"authenticated", r.authenticated},
                   {"admin_only", AccessOf(r.rpc).access == Access::kAdmin},
                   {"generic", r.generic},
                   {"streaming", r.streaming}});
  }
  res.status = 200;
  res.set_content(nlohmann::json{{"routes", out}}.dump(), "application/json");
}

}  // namespace det::master
