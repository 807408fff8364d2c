// The Python side of the Fashion-MNIST benches that compare with PyTorch:
// the example's CNN as a torch.nn.Module and the training set read from the
// uncompressed idx files (examples/fashion_mnist/fashion_mnist_data.h), for
// scripts that import os, numpy as np, torch, torch.nn as nn and
// torch.nn.functional as F first.
#ifndef DET_BENCH_FASHION_MNIST_PY_H_
#define DET_BENCH_FASHION_MNIST_PY_H_

namespace det::bench {

inline constexpr char kPythonCnnAndData[] = R"PY(
class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.drop = nn.Dropout(0.25)
        self.fc2 = nn.Linear(128, 10)
    def forward(self, x):
        x = (x - 0.2860) / 0.3530
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(self.drop(x))

def load(cache):
    with open(os.path.join(cache, "train-images-idx3-ubyte"), "rb") as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with open(os.path.join(cache, "train-labels-idx1-ubyte"), "rb") as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    return torch.from_numpy(images.astype(np.float32) / 255.0), torch.from_numpy(labels.astype(np.int64))
)PY";

}  // namespace det::bench

#endif  // DET_BENCH_FASHION_MNIST_PY_H_
