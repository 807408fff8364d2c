// det::Batch: what a data loader yields and train_batch/evaluate_batch get.
#ifndef DET_BATCH_H_
#define DET_BATCH_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <torch/types.h>

namespace det {

// A batch is one tensor, a list of tensors (e.g. {images, labels}) or a map of
// name to tensor. Copies share tensor storage (like torch::Tensor).
class Batch {
 public:
  using TensorList = std::vector<torch::Tensor>;
  using TensorMap = std::map<std::string, torch::Tensor>;

  Batch() = default;
  Batch(torch::Tensor tensor) : value_(std::move(tensor)) {}            // NOLINT
  Batch(TensorList tensors) : value_(std::move(tensors)) {}             // NOLINT
  Batch(std::initializer_list<torch::Tensor> t) : value_(TensorList(t)) {}
  Batch(TensorMap tensors) : value_(std::move(tensors)) {}              // NOLINT

  bool is_tensor() const { return std::holds_alternative<torch::Tensor>(value_); }
  bool is_list() const { return std::holds_alternative<TensorList>(value_); }
  bool is_map() const { return std::holds_alternative<TensorMap>(value_); }

  // Accessors. Each throws std::invalid_argument naming the mismatch when the
  // batch holds another kind or the index/key is absent.
  const torch::Tensor& tensor() const;
  const torch::Tensor& operator[](size_t index) const;
  const torch::Tensor& operator[](const std::string& key) const;
  const TensorList& list() const;
  const TensorMap& map() const;
  size_t num_tensors() const;

  // Number of records: size of dim 0 of the first tensor (0 when empty).
  int64_t size() const;

  // Returns a batch with every tensor moved to `device` (no copy when already
  // there). `non_blocking` as in torch::Tensor::to.
  Batch to(torch::Device device, bool non_blocking = false) const;

  // Stacks per-example batches of the same shape into one batch (dim 0).
  // Requires a non-empty vector whose elements all hold the same kind and keys.
  static Batch Collate(const std::vector<Batch>& examples);

 private:
  std::variant<torch::Tensor, TensorList, TensorMap> value_;
};

}  // namespace det

#endif  // DET_BATCH_H_
