#include "master/core/chart_cache.h"

namespace det::master {

size_t ChartCache::Bytes(const Store::MetricScan& scan) {
  size_t n = scan.ids.capacity() * sizeof(int64_t) + scan.batches.capacity() * sizeof(int64_t) +
             scan.group_of.capacity() * sizeof(int32_t) + scan.offsets.capacity() * sizeof(uint32_t) +
             scan.values.capacity() * sizeof(scan.values[0]);
  for (const std::string& s : scan.groups) n += sizeof(s) + s.capacity();
  for (const std::string& s : scan.names) n += sizeof(s) + s.capacity();
  return n;
}

void ChartCache::Erase(std::map<Key, Slot>::iterator it) {
  bytes_ -= it->second.bytes;
  uses_.erase(it->second.use);
  slots_.erase(it);
}

std::optional<ChartCache::Entry> ChartCache::Take(int64_t trial_id, const std::string& group) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = slots_.find(Key(trial_id, group));
  if (it == slots_.end()) return std::nullopt;
  Entry entry = std::move(it->second.entry);
  Erase(it);
  return entry;
}

void ChartCache::Put(int64_t trial_id, const std::string& group, Entry entry) {
  const size_t bytes = Bytes(entry.scan);
  std::lock_guard<std::mutex> l(mu_);
  Key key(trial_id, group);
  if (auto it = slots_.find(key); it != slots_.end()) Erase(it);
  if (bytes > max_bytes_) return;
  uses_.push_front(key);
  slots_[key] = Slot{std::move(entry), bytes, uses_.begin()};
  bytes_ += bytes;
  while (bytes_ > max_bytes_) Erase(slots_.find(uses_.back()));
}

size_t ChartCache::bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_;
}

}  // namespace det::master
