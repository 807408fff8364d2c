// The Fashion-MNIST CNN, shared by the trial and bench/harness_overhead.
#ifndef DET_EXAMPLES_FASHION_MNIST_FASHION_MNIST_MODEL_H_
#define DET_EXAMPLES_FASHION_MNIST_FASHION_MNIST_MODEL_H_

#include <torch/nn.h>

namespace fashion_mnist {

struct CnnImpl : torch::nn::Module {
  CnnImpl(int64_t filters1, int64_t filters2, int64_t hidden, double dropout)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, filters1, 3).padding(1)))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(filters1, filters2, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(filters2 * 7 * 7, hidden))),
        drop(register_module("drop", torch::nn::Dropout(dropout))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = (x - 0.2860) / 0.3530;  // dataset mean and std
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(drop(x));
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Cnn);

}  // namespace fashion_mnist

#endif  // DET_EXAMPLES_FASHION_MNIST_FASHION_MNIST_MODEL_H_
