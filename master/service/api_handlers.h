// ApiHandlers: every det.api.v1.Determined RPC bound once to the core that
// answers it (MasterCore or AuthCore), by method name, over generic protobuf
// messages. The gRPC service (grpc_services.cc) and the REST server
// (master/http/) both authenticate through Authenticate() and then call the
// same handler, so the two transports can never disagree: a new RPC is one
// Bind line in api_handlers.cc.
//
// A method of the service that has no handler answers UNIMPLEMENTED (after
// authentication) on both transports. Thread-safe after construction.
#ifndef DET_MASTER_SERVICE_API_HANDLERS_H_
#define DET_MASTER_SERVICE_API_HANDLERS_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "det/api/v1/user.pb.h"
#include "master/core/auth.h"
#include "master/core/master_core.h"
#include "master/service/method_access.h"

namespace det::master {

// Who makes a call.
struct ApiCaller {
  apiv1::User user;   // empty for the methods that need no token
  std::string token;  // the user token the call carried ("" when none)
  // The client's IP address ("" when unknown), for login throttling.
  std::string peer_address;
};

class ApiHandlers {
 public:
  using Message = google::protobuf::Message;
  // Answers `request` into `response`; both are of the method's own
  // generated types (InvalidArgument otherwise).
  using Unary = std::function<absl::Status(const ApiCaller&, const Message& request, Message* response)>;
  // Sends one response message; false when the client has gone (stop then).
  using Writer = std::function<bool(const Message&)>;
  // Writes the responses of a server-streaming call in order; returns the
  // call's final status. Blocks while it follows (it checks `cancelled`
  // between waits of at most 200 ms).
  using ServerStreaming = std::function<absl::Status(const ApiCaller&, const Message& request, const Writer& write,
                                                     const std::function<bool()>& cancelled)>;

  // Neither pointer is owned; both must outlive the handlers.
  ApiHandlers(MasterCore* core, AuthCore* auth);

  // The det.api.v1.Determined service descriptor (from the generated pool).
  static const google::protobuf::ServiceDescriptor* Service();

  // The caller of `method` (a method name of the service, e.g.
  // "GetExperiments") with these credentials: a user token from
  // `authorization` ("Bearer <token>") or the det_token cookie of `cookie`.
  // The methods that need no token (request_auth.h) get an empty caller;
  // every other one needs a valid token: Unauthenticated otherwise.
  absl::StatusOr<ApiCaller> Authenticate(absl::string_view method, absl::string_view authorization,
                                         absl::string_view cookie) const;

  // Whether `caller` may make this call of `method` (method_access.h): Ok,
  // or PermissionDenied naming the method and the rule (NotFound when the
  // experiment it names does not exist). CallUnary and CallServerStreaming
  // check it first; a client-streaming RPC's handler calls it itself.
  absl::Status Authorize(absl::string_view method, const ApiCaller& caller, const Message& request) const;

  // Runs unary `method` after Authorize. NotFound for a name the service
  // does not have, InvalidArgument when it is not unary, Unimplemented when
  // no handler is bound. `request` and `response` must be of the method's
  // types.
  absl::Status CallUnary(absl::string_view method, const ApiCaller& caller, const Message& request,
                         Message* response) const;
  // Runs server-streaming `method` (see ServerStreaming); errors as CallUnary.
  absl::Status CallServerStreaming(absl::string_view method, const ApiCaller& caller, const Message& request,
                                   const Writer& write, const std::function<bool()>& cancelled) const;

 private:
  template <typename Req, typename Resp>
  void Bind(const char* name, std::function<absl::StatusOr<Resp>(const ApiCaller&, const Req&)> fn);
  template <typename Req, typename Resp>
  void BindCore(const char* name, absl::StatusOr<Resp> (MasterCore::*fn)(const Req&));
  // The same for a core method that also takes the calling user.
  template <typename Req, typename Resp>
  void BindCore(const char* name, absl::StatusOr<Resp> (MasterCore::*fn)(const Req&, const apiv1::User&));
  template <typename Req, typename Resp>
  void BindStreaming(const char* name,
                     std::function<absl::Status(const ApiCaller&, const Req&, const std::function<bool(const Resp&)>&,
                                                const std::function<bool()>&)>
                         fn);
  // Binds the admins' server-streaming RPCs (MasterLogs, BackupDatabase).
  void BindAdminStreams();
  // The experiments a kExperimentOwner request names (ids <= 0 are left to
  // the handler's own validation).
  absl::StatusOr<std::vector<int64_t>> OwnedExperiments(const MethodAccess& access, const Message& request) const;
  // Looks `method` up in Service(): NotFound for an unknown name.
  static absl::StatusOr<const google::protobuf::MethodDescriptor*> FindMethod(absl::string_view method);

  MasterCore* const core_;
  AuthCore* const auth_;
  std::map<std::string, Unary, std::less<>> unary_;
  std::map<std::string, ServerStreaming, std::less<>> streaming_;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_API_HANDLERS_H_
