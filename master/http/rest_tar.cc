#include "master/http/rest_tar.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "master/http/rest_reply.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;

constexpr size_t kBlock = 512;
constexpr size_t kMaxQueuedChunks = 8;  // ~8 MiB waiting for a slow client
constexpr auto kFirstChunkWait = std::chrono::seconds(10);
constexpr auto kIdlePoll = std::chrono::milliseconds(200);

void PutOctal(char* field, size_t width, uint64_t value) {
  // width-1 octal digits and a NUL.
  for (size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  field[width - 1] = '\0';
}

void PutSize(char* field, int64_t size) {
  if (size < 077777777777LL) return PutOctal(field, 12, static_cast<uint64_t>(size));
  // GNU base-256: high bit set, big-endian in the 12 bytes.
  std::memset(field, 0, 12);
  uint64_t v = static_cast<uint64_t>(size);
  for (int i = 11; i >= 4; --i) {
    field[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  field[0] = static_cast<char>(0x80);
}

std::string Block(const std::string& name, const std::string& prefix, int64_t size, char type) {
  std::string b(kBlock, '\0');
  std::memcpy(&b[0], name.data(), std::min<size_t>(name.size(), 100));
  PutOctal(&b[100], 8, 0644);
  PutOctal(&b[108], 8, 0);
  PutOctal(&b[116], 8, 0);
  PutSize(&b[124], size);
  PutOctal(&b[136], 12, 0);
  b[156] = type;
  std::memcpy(&b[257], "ustar", 6);
  std::memcpy(&b[263], "00", 2);
  std::memcpy(&b[345], prefix.data(), std::min<size_t>(prefix.size(), 155));
  std::memset(&b[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : b) sum += c;
  PutOctal(&b[148], 7, sum);
  b[155] = ' ';
  return b;
}

std::string Padding(int64_t size) { return std::string((kBlock - size % kBlock) % kBlock, '\0'); }

// A pax extended header holding `path=...`.
std::string PaxPath(const std::string& path) {
  const std::string body = " path=" + path + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) len = std::to_string(len).size() + body.size();
  const std::string record = std::to_string(len) + body;
  return Block("././@PaxHeader", "", static_cast<int64_t>(record.size()), 'x') + record +
         Padding(static_cast<int64_t>(record.size()));
}

}  // namespace

std::string TarEncoder::FileHeader(const std::string& path, int64_t size) {
  if (path.size() <= 100) return Block(path, "", size, '0');
  // Split at a '/' so that the prefix holds <= 155 bytes and the name <= 100.
  for (size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    if (slash <= 155 && path.size() - slash - 1 <= 100 && slash + 1 < path.size()) {
      return Block(path.substr(slash + 1), path.substr(0, slash), size, '0');
    }
  }
  return PaxPath(path) + Block(path.substr(path.size() - 100), "", size, '0');
}

absl::StatusOr<std::string> TarEncoder::Add(const apiv1::DownloadCheckpointResponse& chunk) {
  std::string out;
  if (!open_) {
    if (chunk.offset() != 0 || chunk.file_size() < 0 || chunk.path().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tar: chunk of ", chunk.path(), " does not start a file"));
    }
    path_ = chunk.path();
    size_ = chunk.file_size();
    done_ = 0;
    open_ = true;
    out = FileHeader(path_, size_);
  } else if (chunk.path() != path_ || chunk.offset() != done_ || chunk.file_size() != size_) {
    return absl::InvalidArgumentError(absl::StrCat("tar: chunk of ", chunk.path(), " out of order"));
  }
  if (static_cast<int64_t>(chunk.data().size()) > size_ - done_) {
    return absl::InvalidArgumentError(absl::StrCat("tar: more bytes than ", path_, "'s size"));
  }
  out += chunk.data();
  done_ += static_cast<int64_t>(chunk.data().size());
  if (done_ == size_) {
    out += Padding(size_);
    open_ = false;
  }
  return out;
}

absl::StatusOr<std::string> TarEncoder::Finish() const {
  if (open_) return absl::InvalidArgumentError(absl::StrCat("tar: ", path_, " unfinished"));
  return std::string(2 * kBlock, '\0');
}

namespace {

// One download, shared by its thread, the handler and the content provider
// (as NdjsonCall in rest_stream.cc, with tar bytes instead of lines).
struct TarCall {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> chunks ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::atomic<bool> gone{false};
  std::thread worker;
  TarEncoder encoder;  // the worker's only

  bool Write(const google::protobuf::Message& m) {
    auto bytes = encoder.Add(static_cast<const apiv1::DownloadCheckpointResponse&>(m));
    std::unique_lock<std::mutex> lock(mu);
    if (!bytes.ok()) {
      status = bytes.status();
      return false;
    }
    cv.wait(lock, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return chunks.size() < kMaxQueuedChunks || gone; });
    if (gone) return false;
    chunks.push_back(*std::move(bytes));
    cv.notify_all();
    return true;
  }
  void Finish(absl::Status st) {
    std::string end;
    if (st.ok()) {
      auto fin = encoder.Finish();
      if (fin.ok()) end = *std::move(fin);
      else st = fin.status();
    }
    std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) status = std::move(st);
    if (status.ok() && !end.empty()) chunks.push_back(std::move(end));
    done = true;
    cv.notify_all();
  }
  void Join() {
    gone = true;
    {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    }
    if (worker.joinable()) worker.join();
  }
  bool Provide(httplib::DataSink& sink) {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      if (!chunks.empty()) {
        std::string bytes = std::move(chunks.front());
        chunks.pop_front();
        cv.notify_all();
        lock.unlock();
        if (sink.write(bytes.data(), bytes.size())) return true;
        gone = true;
        return false;
      }
      if (done) {
        if (!status.ok()) return false;  // cut: no end-of-archive, no last chunk
        lock.unlock();
        sink.done();
        return true;
      }
      if (cv.wait_for(lock, kIdlePoll) == std::cv_status::timeout) {
        lock.unlock();
        if (!sink.is_writable()) {
          gone = true;
          return false;
        }
        lock.lock();
      }
    }
  }
};

}  // namespace

void ServeTar(const ApiHandlers& handlers, const google::protobuf::MethodDescriptor* method, const ApiCaller& caller,
              std::unique_ptr<google::protobuf::Message> request, httplib::Response& res) {
  auto call = std::make_shared<TarCall>();
  TarCall* c = call.get();
  std::string uuid = static_cast<const apiv1::DownloadCheckpointRequest&>(*request).checkpoint_uuid();
  c->worker = std::thread([c, &handlers, name = method->name(), caller, request = std::move(request)] {
    absl::Status st = handlers.CallServerStreaming(
        name, caller, *request, [c](const google::protobuf::Message& m) { return c->Write(m); },
        [c] { return c->gone.load(); });
    c->Finish(std::move(st));
  });
  absl::Status failed;
  {
    std::unique_lock<std::mutex> lock(call->mu);
    call->cv.wait_for(lock, kFirstChunkWait, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(call->mu) {
      return !call->chunks.empty() || call->done;
    });
    if (call->done && !call->status.ok()) failed = call->status;
  }
  if (!failed.ok()) {
    call->Join();
    return SendError(res, failed);
  }
  res.status = 200;
  // A validated UUID by now (or no file at all): safe in the header.
  res.set_header("Content-Disposition", absl::StrCat("attachment; filename=\"", uuid.substr(0, 36), ".tar\""));
  res.set_chunked_content_provider(
      "application/x-tar", [call](size_t, httplib::DataSink& sink) { return call->Provide(sink); },
      [call](bool) { call->Join(); });
}

}  // namespace det::master
