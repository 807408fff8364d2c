#include "det/batch.h"

#include <stdexcept>

namespace det {
namespace {
const char* KindName(bool t, bool l) { return t ? "a tensor" : (l ? "a tensor list" : "a tensor map"); }
}  // namespace

const torch::Tensor& Batch::tensor() const {
  if (!is_tensor()) throw std::invalid_argument(std::string("batch holds ") + KindName(false, is_list()) + ", not a tensor");
  return std::get<torch::Tensor>(value_);
}

const Batch::TensorList& Batch::list() const {
  if (!is_list()) throw std::invalid_argument(std::string("batch holds ") + KindName(is_tensor(), false) + ", not a tensor list");
  return std::get<TensorList>(value_);
}

const Batch::TensorMap& Batch::map() const {
  if (!is_map()) throw std::invalid_argument(std::string("batch holds ") + KindName(is_tensor(), is_list()) + ", not a tensor map");
  return std::get<TensorMap>(value_);
}

const torch::Tensor& Batch::operator[](size_t index) const {
  const auto& l = list();
  if (index >= l.size()) {
    throw std::invalid_argument("batch index " + std::to_string(index) + " out of range: batch has " +
                                std::to_string(l.size()) + " tensors");
  }
  return l[index];
}

const torch::Tensor& Batch::operator[](const std::string& key) const {
  const auto& m = map();
  auto it = m.find(key);
  if (it == m.end()) throw std::invalid_argument("batch has no tensor named '" + key + "'");
  return it->second;
}

size_t Batch::num_tensors() const {
  if (is_tensor()) return std::get<torch::Tensor>(value_).defined() ? 1 : 0;
  if (is_list()) return std::get<TensorList>(value_).size();
  return std::get<TensorMap>(value_).size();
}

int64_t Batch::size() const {
  const torch::Tensor* first = nullptr;
  if (is_tensor()) {
    first = &std::get<torch::Tensor>(value_);
  } else if (is_list() && !list().empty()) {
    first = &list().front();
  } else if (is_map() && !map().empty()) {
    first = &map().begin()->second;
  }
  if (first == nullptr || !first->defined() || first->dim() == 0) return 0;
  return first->size(0);
}

Batch Batch::to(torch::Device device, bool non_blocking) const {
  auto move = [&](const torch::Tensor& t) { return t.defined() ? t.to(device, non_blocking) : t; };
  if (is_tensor()) return Batch(move(tensor()));
  if (is_list()) {
    TensorList out;
    out.reserve(list().size());
    for (const auto& t : list()) out.push_back(move(t));
    return Batch(std::move(out));
  }
  TensorMap out;
  for (const auto& [k, t] : map()) out.emplace(k, move(t));
  return Batch(std::move(out));
}

Batch Batch::Collate(const std::vector<Batch>& examples) {
  if (examples.empty()) throw std::invalid_argument("cannot collate an empty list of examples");
  const Batch& first = examples.front();
  if (first.is_tensor()) {
    std::vector<torch::Tensor> ts;
    ts.reserve(examples.size());
    for (const auto& e : examples) ts.push_back(e.tensor());
    return Batch(torch::stack(ts));
  }
  if (first.is_list()) {
    TensorList out;
    for (size_t i = 0; i < first.list().size(); ++i) {
      std::vector<torch::Tensor> ts;
      ts.reserve(examples.size());
      for (const auto& e : examples) ts.push_back(e[i]);
      out.push_back(torch::stack(ts));
    }
    return Batch(std::move(out));
  }
  TensorMap out;
  for (const auto& [key, unused] : first.map()) {
    std::vector<torch::Tensor> ts;
    ts.reserve(examples.size());
    for (const auto& e : examples) ts.push_back(e[key]);
    out.emplace(key, torch::stack(ts));
  }
  return Batch(std::move(out));
}

}  // namespace det
