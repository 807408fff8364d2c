#include "master/core/s3_delete_retries.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace det::master {

void S3DeleteRetries::Add(const CheckpointRow& row, const CheckpointStorageConfig& storage,
                          const std::string& workspace, int64_t now_mono_ms) {
  S3DeleteRetry entry;
  entry.row.uuid = row.uuid;
  entry.row.experiment_id = row.experiment_id;
  entry.row.trial_id = row.trial_id;
  entry.row.storage_path = row.storage_path;
  entry.storage = storage;
  entry.workspace = workspace;
  entry.backoff_ms = kFirstBackoffMs;
  entry.due_mono_ms = now_mono_ms + kFirstBackoffMs;
  std::lock_guard<std::mutex> l(mu_);
  if (uuids_.count(row.uuid)) return;
  PushLocked(std::move(entry));
}

void S3DeleteRetries::PushLocked(S3DeleteRetry entry) {
  while (!entries_.empty() && entries_.size() >= capacity_) {
    spdlog::warn("S3 delete retries: {} entries (the most): no longer retrying the delete of {}", capacity_,
                 entries_.front().row.storage_path);
    uuids_.erase(entries_.front().row.uuid);
    entries_.pop_front();
  }
  if (capacity_ == 0) return;
  uuids_.insert(entry.row.uuid);
  entries_.push_back(std::move(entry));
}

std::vector<S3DeleteRetry> S3DeleteRetries::TakeDue(int64_t now_mono_ms, int max) {
  std::vector<S3DeleteRetry> due;
  std::lock_guard<std::mutex> l(mu_);
  if (now_mono_ms < paused_until_ms_) return due;
  for (auto it = entries_.begin(); it != entries_.end() && static_cast<int>(due.size()) < max;) {
    if (it->due_mono_ms > now_mono_ms) {
      ++it;
      continue;
    }
    uuids_.erase(it->row.uuid);
    due.push_back(std::move(*it));
    it = entries_.erase(it);
  }
  return due;
}

int64_t S3DeleteRetries::Again(S3DeleteRetry entry, int64_t now_mono_ms) {
  entry.backoff_ms = std::min(kMaxBackoffMs, std::max(kFirstBackoffMs, entry.backoff_ms * 2));
  entry.due_mono_ms = now_mono_ms + entry.backoff_ms;
  const int64_t backoff = entry.backoff_ms;
  std::lock_guard<std::mutex> l(mu_);
  pause_ms_ = std::min(kMaxBackoffMs, std::max(kFirstBackoffMs, pause_ms_ * 2));
  paused_until_ms_ = now_mono_ms + pause_ms_;
  if (!uuids_.count(entry.row.uuid)) PushLocked(std::move(entry));
  return backoff;
}

void S3DeleteRetries::Succeeded() {
  std::lock_guard<std::mutex> l(mu_);
  pause_ms_ = 0;
}

void S3DeleteRetries::Restore(S3DeleteRetry entry) {
  std::lock_guard<std::mutex> l(mu_);
  if (!uuids_.count(entry.row.uuid)) PushLocked(std::move(entry));
}

size_t S3DeleteRetries::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.size();
}

}  // namespace det::master
