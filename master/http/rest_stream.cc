#include "master/http/rest_stream.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "master/core/master_metrics.h"
#include "master/http/rest_reply.h"

namespace det::master {
namespace {

constexpr size_t kMaxQueuedLines = 64;
constexpr auto kFirstMessageWait = std::chrono::seconds(1);
constexpr auto kIdlePoll = std::chrono::milliseconds(200);
constexpr auto kBufferedLimit = std::chrono::seconds(5);

std::string Line(const google::protobuf::Message& m) {
  absl::StatusOr<std::string> json = MessageJson(m);
  return json.ok() ? *json + "\n" : absl::StrCat("{\"error\":", ErrorJson(json.status()), "}\n");
}

// One subscriber of det_stream_subscribers{stream} for its lifetime.
class SubscriberCount {
 public:
  SubscriberCount(MasterMetrics* metrics, const google::protobuf::MethodDescriptor* method)
      : metrics_(metrics), method_(absl::StrCat("/", method->service()->full_name(), "/", method->name())) {
    if (metrics_ != nullptr) metrics_->StreamOpened(method_);
  }
  ~SubscriberCount() {
    if (metrics_ != nullptr) metrics_->StreamClosed(method_);
  }
  SubscriberCount(const SubscriberCount&) = delete;
  SubscriberCount& operator=(const SubscriberCount&) = delete;

 private:
  MasterMetrics* const metrics_;
  const std::string method_;  // "/det.api.v1.Service/Method", as gRPC names it
};

// One streaming call, shared by its thread, the handler and the chunked
// content provider (which run one after the other on the connection's
// thread) and the provider's releaser.
struct NdjsonCall {
  NdjsonCall(MasterMetrics* metrics, const google::protobuf::MethodDescriptor* method) : subscriber(metrics, method) {}
  ~NdjsonCall() { Join(); }

  SubscriberCount subscriber;  // until the call is destroyed, after its thread is joined
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> lines ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::atomic<bool> gone{false};  // the client went away: cancel the call
  std::thread worker;

  // The call's writer: queues one line, waiting while the queue is full;
  // false once the client has gone.
  bool Write(const google::protobuf::Message& m) {
    std::string line = Line(m);
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return lines.size() < kMaxQueuedLines || gone; });
    if (gone) return false;
    lines.push_back(std::move(line));
    cv.notify_all();
    return true;
  }
  void Finish(absl::Status st) {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    status = std::move(st);
    cv.notify_all();
  }
  void Cancel() {
    gone = true;
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_all();
  }
  void Join() {
    Cancel();
    if (worker.joinable()) worker.join();
  }

  // One step of the chunked content provider: writes the next line, or the
  // end; false when the client has gone.
  bool Provide(httplib::DataSink& sink) {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      if (!lines.empty()) {
        std::string line = std::move(lines.front());
        lines.pop_front();
        cv.notify_all();
        lock.unlock();
        if (sink.write(line.data(), line.size())) return true;
        Cancel();
        return false;
      }
      if (done) {
        std::string last = status.ok() ? "" : absl::StrCat("{\"error\":", ErrorJson(status), "}\n");
        lock.unlock();
        if (!last.empty() && !sink.write(last.data(), last.size())) return false;
        sink.done();
        return true;
      }
      if (cv.wait_for(lock, kIdlePoll) == std::cv_status::timeout) {
        lock.unlock();
        if (!sink.is_writable()) {
          Cancel();
          return false;
        }
        lock.lock();
      }
    }
  }
};

void ServeBuffered(const ApiHandlers& handlers, const google::protobuf::MethodDescriptor* method,
                   const ApiCaller& caller, const google::protobuf::Message& request, httplib::Response& res,
                   MasterMetrics* metrics) {
  SubscriberCount subscriber(metrics, method);
  const auto deadline = std::chrono::steady_clock::now() + kBufferedLimit;
  std::string body;
  int lines = 0;
  absl::Status st = handlers.CallServerStreaming(
      method->name(), caller, request,
      [&](const google::protobuf::Message& m) {
        body += Line(m);
        ++lines;
        return true;
      },
      [&] { return std::chrono::steady_clock::now() > deadline; });
  if (!st.ok() && lines == 0) return SendError(res, st);
  if (!st.ok()) absl::StrAppend(&body, "{\"error\":", ErrorJson(st), "}\n");
  res.status = 200;
  res.set_content(body, "application/x-ndjson");
}

}  // namespace

void ServeNdjson(const ApiHandlers& handlers, const google::protobuf::MethodDescriptor* method, ApiCaller caller,
                 std::unique_ptr<google::protobuf::Message> request, NdjsonMode mode, httplib::Response& res,
                 MasterMetrics* metrics) {
  if (mode == NdjsonMode::kBuffered) return ServeBuffered(handlers, method, caller, *request, res, metrics);
  auto call = std::make_shared<NdjsonCall>(metrics, method);
  // The thread holds no reference: whoever drops the last one (this handler
  // or the provider's releaser) joins it first.
  NdjsonCall* c = call.get();
  c->worker = std::thread([c, &handlers, name = method->name(), caller = std::move(caller),
                           request = std::move(request)] {
    absl::Status st = handlers.CallServerStreaming(
        name, caller, *request, [c](const google::protobuf::Message& m) { return c->Write(m); },
        [c] { return c->gone.load(); });
    c->Finish(std::move(st));
  });
  absl::Status failed;
  {
    std::unique_lock<std::mutex> lock(call->mu);
    call->cv.wait_for(lock, kFirstMessageWait, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(call->mu) {
      return !call->lines.empty() || call->done;
    });
    if (call->done && call->lines.empty() && !call->status.ok()) failed = call->status;
  }
  if (!failed.ok()) {
    call->Join();
    return SendError(res, failed);
  }
  res.status = 200;
  res.set_chunked_content_provider(
      "application/x-ndjson", [call](size_t, httplib::DataSink& sink) { return call->Provide(sink); },
      [call](bool) { call->Join(); });
}

}  // namespace det::master
