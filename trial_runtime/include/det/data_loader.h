// det::DataLoader: deterministic, rank-sharded, resumable batching over a
// map-style dataset.
//
// Order contract: for loader epoch e (one pass over the dataset), the sample
// order is identity, or a permutation fully determined by (seed, e) when
// shuffle is on. Global batch b of epoch e is the slice [b*G, (b+1)*G) of that
// order with G = batch_size * world_size; rank r gets the r-th sub-slice of
// batch_size samples. Batch k of the infinite training stream is batch
// k % batches_per_epoch() of epoch k / batches_per_epoch(). So any batch can be
// computed without reading those before it (resume), and a run on N ranks sees
// exactly the samples of a 1-rank run with the same global batch size.
#ifndef DET_DATA_LOADER_H_
#define DET_DATA_LOADER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include <torch/arg.h>
#include <torch/data/datasets/base.h>
#include <torch/data/example.h>
#include <torch/data/datasets/tensor.h>

#include "det/batch.h"

namespace det {

// A map-style dataset of `size()` examples. get() must be safe to call from
// several loader worker threads at once.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  // One example; batches are formed with Batch::Collate.
  virtual Batch get(size_t index) = 0;
  // A whole batch at once; override for a faster path (e.g. index_select).
  virtual Batch get_batch(const std::vector<size_t>& indices);
};

// Adapts a LibTorch map-style dataset (torch::data::datasets::Dataset<Self,
// Example<Data, Target>> such as torch::data::datasets::MNIST) to det::Dataset.
// Examples become a two-tensor Batch {data, target}.
template <typename TorchDataset>
class TorchDatasetAdapter final : public Dataset {
 public:
  explicit TorchDatasetAdapter(TorchDataset dataset) : dataset_(std::move(dataset)) {
    auto n = dataset_.size();
    if (!n.has_value()) throw std::invalid_argument("det::DataLoader needs a dataset with a known size");
    size_ = *n;
  }
  size_t size() const override { return size_; }
  Batch get(size_t index) override {
    return ToBatch(dataset_.get(index));
  }

 private:
  template <typename D, typename T>
  static Batch ToBatch(torch::data::Example<D, T> example) {
    return Batch(Batch::TensorList{std::move(example.data), std::move(example.target)});
  }
  static Batch ToBatch(torch::data::TensorExample example) { return Batch(std::move(example.data)); }
  static Batch ToBatch(torch::Tensor t) { return Batch(std::move(t)); }

  TorchDataset dataset_;
  size_t size_ = 0;
};

struct DataLoaderOptions {
  // batch_size is per slot (rank): usually context.get_per_slot_batch_size().
  DataLoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}  // NOLINT
  TORCH_ARG(int64_t, batch_size);
  // Shuffle with a permutation derived from (seed, epoch).
  TORCH_ARG(bool, shuffle) = false;
  // Drop the last partial batch of each epoch.
  TORCH_ARG(bool, drop_last) = false;
  // Background threads that prepare batches ahead (0: in the caller's thread).
  TORCH_ARG(int64_t, workers) = 0;
  // Batches each worker may prepare ahead.
  TORCH_ARG(int64_t, prefetch) = 2;
  // Shuffle seed; when unset the runtime uses the trial seed.
  TORCH_ARG(std::optional<uint64_t>, seed) = std::nullopt;
};

class BatchStream;

// Copyable handle (copies share the dataset). Not thread-safe: one user.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options);

  // Any LibTorch map-style dataset (taken by value, like torch's loaders).
  template <typename TorchDataset,
            typename = std::enable_if_t<!std::is_convertible<TorchDataset, std::shared_ptr<Dataset>>::value>>
  DataLoader(TorchDataset dataset, DataLoaderOptions options)
      : DataLoader(std::make_shared<TorchDatasetAdapter<TorchDataset>>(std::move(dataset)), std::move(options)) {}

  const DataLoaderOptions& options() const { return options_; }
  size_t dataset_size() const;
  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }

  // Runtime use: sets this process's rank and world size, and the seed used
  // when options().seed() is unset. Requires 0 <= rank < world_size.
  void Configure(int rank, int world_size, uint64_t default_seed);
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  uint64_t seed() const;

  // Batches in one pass over the dataset (same on every rank).
  int64_t batches_per_epoch() const;
  // Sample indices of this rank's part of batch k of the infinite stream.
  std::vector<size_t> BatchIndices(int64_t k) const;
  // Loads batch k (BatchIndices(k) through the dataset).
  Batch LoadBatch(int64_t k) const;

  // Streams batches first_batch, first_batch+1, ... (up to end_batch,
  // exclusive, when given) with options().workers() background threads.
  std::unique_ptr<BatchStream> Stream(int64_t first_batch,
                                      std::optional<int64_t> end_batch = std::nullopt) const;

 private:
  // The permutation of one epoch, computed once and shared by copies and
  // worker threads.
  std::shared_ptr<const std::vector<size_t>> Permutation(int64_t epoch) const;

  struct PermutationCache;
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<PermutationCache> cache_;
  int rank_ = 0;
  int world_size_ = 1;
  uint64_t default_seed_ = 0;
};

// An ordered stream of batches; destroying it stops its workers.
class BatchStream {
 public:
  virtual ~BatchStream() = default;
  // The next batch, or nullopt past end_batch. Rethrows a dataset's exception.
  virtual std::optional<Batch> Next() = 0;
  // Index of the batch Next() returns next.
  virtual int64_t position() const = 0;
};

// The sample permutation of one epoch (exposed for tests).
std::vector<size_t> EpochPermutation(size_t n, uint64_t seed, int64_t epoch);

}  // namespace det

#endif  // DET_DATA_LOADER_H_
