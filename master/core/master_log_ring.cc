#include "master/core/master_log_ring.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "master/core/proto_convert.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;

constexpr size_t kMaxMessageBytes = 64 << 10;

bool Selected(const apiv1::MasterLogsRequest& req, const apiv1::MasterLogEntry& e) {
  if (req.levels_size() > 0 && std::find(req.levels().begin(), req.levels().end(), e.level()) == req.levels().end()) {
    return false;
  }
  return req.search_text().empty() || e.message().find(req.search_text()) != std::string::npos;
}

apiv1::LogLevel LevelOf(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace: return apiv1::LOG_LEVEL_TRACE;
    case spdlog::level::debug: return apiv1::LOG_LEVEL_DEBUG;
    case spdlog::level::info: return apiv1::LOG_LEVEL_INFO;
    case spdlog::level::warn: return apiv1::LOG_LEVEL_WARNING;
    case spdlog::level::err: return apiv1::LOG_LEVEL_ERROR;
    case spdlog::level::critical: return apiv1::LOG_LEVEL_CRITICAL;
    default: return apiv1::LOG_LEVEL_UNSPECIFIED;
  }
}

class RingSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const int64_t ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
    MasterLogRing::Global().Append(ms, LevelOf(msg.level), std::string(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}
};

}  // namespace

MasterLogRing& MasterLogRing::Global() {
  static MasterLogRing* ring = new MasterLogRing();  // never destroyed: loggers may run at exit
  return *ring;
}

void MasterLogRing::Append(int64_t time_ms, apiv1::LogLevel level, const std::string& message) {
  apiv1::MasterLogEntry e;
  SetTime(e.mutable_timestamp(), time_ms);
  e.set_level(level);
  e.set_message(message.size() > kMaxMessageBytes ? message.substr(0, kMaxMessageBytes) : message);
  std::lock_guard<std::mutex> l(mu_);
  e.set_id(next_id_++);
  bytes_ += e.message().size();
  lines_.push_back(std::move(e));
  while (!lines_.empty() && (lines_.size() > max_lines_ || bytes_ > max_bytes_)) {
    bytes_ -= lines_.front().message().size();
    lines_.pop_front();
  }
}

std::vector<apiv1::MasterLogEntry> MasterLogRing::Read(const apiv1::MasterLogsRequest& req, int64_t after_id,
                                                       size_t max_lines) const {
  std::vector<apiv1::MasterLogEntry> out;
  std::lock_guard<std::mutex> l(mu_);
  // Ids are consecutive: start at the first line after after_id.
  size_t i = 0;
  if (!lines_.empty() && after_id >= lines_.front().id()) {
    i = static_cast<size_t>(std::min<int64_t>(after_id - lines_.front().id() + 1, lines_.size()));
  }
  for (; i < lines_.size() && out.size() < max_lines; ++i) {
    if (Selected(req, lines_[i])) out.push_back(lines_[i]);
  }
  return out;
}

int64_t MasterLogRing::TailStart(const apiv1::MasterLogsRequest& req, int64_t tail) const {
  std::lock_guard<std::mutex> l(mu_);
  int64_t seen = 0;
  for (auto it = lines_.rbegin(); it != lines_.rend(); ++it) {
    if (Selected(req, *it) && ++seen == tail) return it->id() - 1;
  }
  return 0;
}

void InstallMasterLogSink() { spdlog::default_logger()->sinks().push_back(std::make_shared<RingSink>()); }

}  // namespace det::master
