#include "det/data_loader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace det {

Batch Dataset::get_batch(const std::vector<size_t>& indices) {
  std::vector<Batch> examples;
  examples.reserve(indices.size());
  for (size_t i : indices) examples.push_back(get(i));
  return Batch::Collate(examples);
}

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform integer in [0, bound) without implementation-defined distributions,
// so the order is the same with every standard library.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t r;
  do {
    r = rng();
  } while (r >= limit);
  return r % bound;
}

}  // namespace

std::vector<size_t> EpochPermutation(size_t n, uint64_t seed, int64_t epoch) {
  std::vector<size_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = i;
  std::mt19937_64 rng(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(epoch) + 0x5851f42d4c957f2dULL)));
  for (size_t i = n; i > 1; --i) {
    size_t j = UniformBelow(rng, i);
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

struct DataLoader::PermutationCache {
  std::mutex mu;
  uint64_t seed = 0;   // guarded by mu
  int64_t epoch = -1;  // guarded by mu
  std::shared_ptr<const std::vector<size_t>> order;  // guarded by mu
};

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)), cache_(std::make_shared<PermutationCache>()) {
  if (!dataset_) throw std::invalid_argument("det::DataLoader: dataset is null");
  if (options_.batch_size() <= 0) {
    throw std::invalid_argument("det::DataLoader: batch_size must be positive, got " +
                                std::to_string(options_.batch_size()));
  }
  if (options_.workers() < 0) throw std::invalid_argument("det::DataLoader: workers must be >= 0");
  if (options_.prefetch() < 1) throw std::invalid_argument("det::DataLoader: prefetch must be >= 1");
}

size_t DataLoader::dataset_size() const { return dataset_->size(); }

void DataLoader::Configure(int rank, int world_size, uint64_t default_seed) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument("det::DataLoader: bad rank " + std::to_string(rank) + " of " +
                                std::to_string(world_size));
  }
  rank_ = rank;
  world_size_ = world_size;
  default_seed_ = default_seed;
}

uint64_t DataLoader::seed() const { return options_.seed().value_or(default_seed_); }

int64_t DataLoader::batches_per_epoch() const {
  int64_t n = static_cast<int64_t>(dataset_->size());
  int64_t g = options_.batch_size() * world_size_;
  return options_.drop_last() ? n / g : (n + g - 1) / g;
}

std::vector<size_t> DataLoader::BatchIndices(int64_t k) const {
  int64_t per_epoch = batches_per_epoch();
  if (per_epoch <= 0) {
    throw std::invalid_argument("det::DataLoader: dataset of " + std::to_string(dataset_->size()) +
                                " samples has no full batch of " +
                                std::to_string(options_.batch_size() * world_size_));
  }
  if (k < 0) throw std::invalid_argument("det::DataLoader: negative batch index");
  int64_t epoch = k / per_epoch;
  int64_t b = k % per_epoch;
  size_t n = dataset_->size();
  std::shared_ptr<const std::vector<size_t>> perm;
  if (options_.shuffle()) perm = Permutation(epoch);
  const std::vector<size_t>* order = perm.get();

  int64_t g = options_.batch_size() * world_size_;
  int64_t begin = b * g;
  int64_t end = std::min<int64_t>(begin + g, static_cast<int64_t>(n));
  int64_t count = end - begin;
  // A full global batch splits into equal parts; a last partial one into
  // near-equal parts (earlier ranks take one more).
  int64_t base = count / world_size_;
  int64_t extra = count % world_size_;
  int64_t my_begin = begin + rank_ * base + std::min<int64_t>(rank_, extra);
  int64_t my_count = base + (rank_ < extra ? 1 : 0);
  std::vector<size_t> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(my_count, 1)));
  for (int64_t i = 0; i < my_count; ++i) {
    size_t pos = static_cast<size_t>(my_begin + i);
    out.push_back(order == nullptr ? pos : (*order)[pos]);
  }
  if (out.empty()) {
    // Fewer samples than ranks in the last batch: wrap around so every rank
    // has a non-empty batch.
    size_t pos = static_cast<size_t>(rank_) % n;
    out.push_back(order == nullptr ? pos : (*order)[pos]);
  }
  return out;
}

std::shared_ptr<const std::vector<size_t>> DataLoader::Permutation(int64_t epoch) const {
  const uint64_t s = seed();
  {
    std::lock_guard<std::mutex> l(cache_->mu);
    if (cache_->order && cache_->epoch == epoch && cache_->seed == s) return cache_->order;
  }
  auto order = std::make_shared<const std::vector<size_t>>(EpochPermutation(dataset_->size(), s, epoch));
  std::lock_guard<std::mutex> l(cache_->mu);
  cache_->seed = s;
  cache_->epoch = epoch;
  cache_->order = order;
  return order;
}

Batch DataLoader::LoadBatch(int64_t k) const { return dataset_->get_batch(BatchIndices(k)); }

namespace {

class SyncStream final : public BatchStream {
 public:
  SyncStream(DataLoader loader, int64_t first, std::optional<int64_t> end)
      : loader_(std::move(loader)), pos_(first), end_(end) {}
  std::optional<Batch> Next() override {
    if (end_ && pos_ >= *end_) return std::nullopt;
    Batch b = loader_.LoadBatch(pos_);
    ++pos_;
    return b;
  }
  int64_t position() const override { return pos_; }

 private:
  DataLoader loader_;
  int64_t pos_;
  std::optional<int64_t> end_;
};

// Worker w prepares batches first+w, first+w+W, ...; Next() takes them in
// order, so the output does not depend on the number of workers.
class ThreadedStream final : public BatchStream {
 public:
  ThreadedStream(DataLoader loader, int64_t first, std::optional<int64_t> end)
      : loader_(std::move(loader)), first_(first), pos_(first), end_(end) {
    int64_t w = loader_.options().workers();
    queues_.resize(static_cast<size_t>(w));
    for (int64_t i = 0; i < w; ++i) threads_.emplace_back([this, i] { Work(i); });
  }
  ~ThreadedStream() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  std::optional<Batch> Next() override {
    if (end_ && pos_ >= *end_) return std::nullopt;
    size_t w = static_cast<size_t>((pos_ - first_) % static_cast<int64_t>(queues_.size()));
    Item item;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return !queues_[w].empty(); });
      item = std::move(queues_[w].front());
      queues_[w].pop_front();
    }
    cv_.notify_all();
    ++pos_;
    if (item.error) std::rethrow_exception(item.error);
    return std::move(item.batch);
  }
  int64_t position() const override { return pos_; }

 private:
  struct Item {
    Batch batch;
    std::exception_ptr error;
  };
  void Work(int64_t w) {
    const int64_t stride = static_cast<int64_t>(queues_.size());
    const size_t cap = static_cast<size_t>(loader_.options().prefetch());
    for (int64_t k = first_ + w; !end_ || k < *end_; k += stride) {
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || queues_[w].size() < cap; });
        if (stop_) return;
      }
      Item item;
      try {
        item.batch = loader_.LoadBatch(k);
      } catch (...) {
        item.error = std::current_exception();
      }
      bool failed = item.error != nullptr;
      {
        std::lock_guard<std::mutex> l(mu_);
        queues_[w].push_back(std::move(item));
      }
      cv_.notify_all();
      if (failed) return;
    }
  }

  DataLoader loader_;
  const int64_t first_;
  int64_t pos_;
  const std::optional<int64_t> end_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::vector<std::deque<Item>> queues_;  // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<BatchStream> DataLoader::Stream(int64_t first_batch, std::optional<int64_t> end_batch) const {
  if (options_.workers() == 0) return std::make_unique<SyncStream>(*this, first_batch, end_batch);
  return std::make_unique<ThreadedStream>(*this, first_batch, end_batch);
}

}  // namespace det
