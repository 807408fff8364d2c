// Fashion-MNIST as a det::Dataset, read from Debian's gzipped idx files
// (gunzipped once into a cache directory).
#ifndef DET_EXAMPLES_FASHION_MNIST_FASHION_MNIST_DATA_H_
#define DET_EXAMPLES_FASHION_MNIST_FASHION_MNIST_DATA_H_

#include <string>

#include <torch/types.h>

#include "det/data_loader.h"

namespace fashion_mnist {

inline constexpr char kDefaultSourceDir[] = "/usr/share/datasets/fashion-mnist";

// Ensures cache_dir holds the four uncompressed idx files, gunzipping them
// from source_dir if needed (atomic per file, safe with concurrent ranks).
// Throws std::runtime_error naming the missing file.
void EnsureUncompressed(const std::string& source_dir, const std::string& cache_dir);

// The default cache directory ($XDG_CACHE_HOME or ~/.cache)/det-cpp/fashion-mnist.
std::string DefaultCacheDir();

// DefaultCacheDir(), filled from kDefaultSourceDir by EnsureUncompressed:
// the data of a program that takes no data config (the benches). Throws as
// EnsureUncompressed.
std::string EnsureDefaultCache();

// The images ([N,1,28,28] float in [0,1]) and labels ([N] int64) of a split:
// all of them, or the first `limit` when limit > 0 (only those are read).
// Throws std::runtime_error naming the file that is missing or malformed.
class FashionMnist final : public det::Dataset {
 public:
  FashionMnist(const std::string& cache_dir, bool train, int64_t limit = 0);
  size_t size() const override { return static_cast<size_t>(images_.size(0)); }
  det::Batch get(size_t index) override;
  det::Batch get_batch(const std::vector<size_t>& indices) override;
  const torch::Tensor& images() const { return images_; }
  const torch::Tensor& targets() const { return targets_; }

 private:
  torch::Tensor images_, targets_;
};

}  // namespace fashion_mnist

#endif  // DET_EXAMPLES_FASHION_MNIST_FASHION_MNIST_DATA_H_
