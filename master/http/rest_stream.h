// A server-streaming RPC over REST: newline-delimited JSON
// (application/x-ndjson), one response message per line, sent as it comes
// (chunked), so that a following TrialLogs streams.
//
// The call runs on a thread of its own. The HTTP status is chosen once the
// call has sent its first message, ended, or run for 1 s: a call that fails
// before sending anything answers the usual error JSON with its status
// (e.g. 404 for an unknown trial); an error after that ends the 200 stream
// with one last line {"error": {"code", "error", "message"}}. The call is
// cancelled (its `cancelled` turns true) when the client goes away: a write
// fails or the connection is no longer writable (checked every 200 ms while
// the call is quiet). At most 64 lines wait for a slow client; the call
// blocks meanwhile.
//
// While the call runs (from its start until its thread is joined), it counts
// as a subscriber of det_stream_subscribers{stream="<RPC short name>"}, as
// a gRPC stream of the same RPC does (`metrics` non-null).
//
// A request served in memory (RestServer::ServeRawForTesting) has no
// connection to stream over: kBuffered runs the call to its end (cancelled
// after 5 s) and answers every line in one body, with the same statuses.
#ifndef DET_MASTER_HTTP_REST_STREAM_H_
#define DET_MASTER_HTTP_REST_STREAM_H_

#include <memory>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <httplib.h>

#include "master/service/api_handlers.h"

namespace det::master {

class MasterMetrics;

enum class NdjsonMode { kChunked, kBuffered };

// Answers server-streaming `method` with `request` (of its input type) for
// `caller` into `res`. `handlers` and `metrics` (null: not counted) must
// outlive the response (the server joins its connections before it is
// destroyed).
void ServeNdjson(const ApiHandlers& handlers, const google::protobuf::MethodDescriptor* method, ApiCaller caller,
                 std::unique_ptr<google::protobuf::Message> request, NdjsonMode mode, httplib::Response& res,
                 MasterMetrics* metrics = nullptr);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_REST_STREAM_H_
