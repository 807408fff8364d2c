#include "examples/fashion_mnist/fashion_mnist_data.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include <torch/data/datasets/mnist.h>

namespace fashion_mnist {
namespace fs = std::filesystem;

namespace {

void Gunzip(const fs::path& src, const fs::path& dst) {
  gzFile in = gzopen(src.c_str(), "rb");
  if (in == nullptr) throw std::runtime_error("cannot open " + src.string() + " (install dataset-fashion-mnist)");
  fs::path tmp = dst.string() + ".tmp." + std::to_string(getpid());
  FILE* out = std::fopen(tmp.c_str(), "wb");
  if (out == nullptr) {
    gzclose(in);
    throw std::runtime_error("cannot write " + tmp.string());
  }
  char buf[1 << 16];
  int n;
  while ((n = gzread(in, buf, sizeof(buf))) > 0) std::fwrite(buf, 1, static_cast<size_t>(n), out);
  bool ok = n == 0;
  gzclose(in);
  ok = std::fclose(out) == 0 && ok;
  if (!ok) throw std::runtime_error("cannot decompress " + src.string());
  fs::rename(tmp, dst);
}

}  // namespace

std::string DefaultCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path base = xdg && *xdg ? fs::path(xdg) : (home && *home ? fs::path(home) / ".cache" : fs::temp_directory_path());
  return (base / "det-cpp" / "fashion-mnist").string();
}

void EnsureUncompressed(const std::string& source_dir, const std::string& cache_dir) {
  fs::create_directories(cache_dir);
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    fs::path dst = fs::path(cache_dir) / name;
    if (fs::exists(dst)) continue;
    fs::path plain = fs::path(source_dir) / name;
    if (fs::exists(plain)) {
      fs::copy_file(plain, dst, fs::copy_options::skip_existing);
    } else {
      Gunzip(fs::path(source_dir) / (std::string(name) + ".gz"), dst);
    }
  }
}

FashionMnist::FashionMnist(const std::string& cache_dir, bool train, int64_t limit) {
  torch::data::datasets::MNIST mnist(cache_dir, train ? torch::data::datasets::MNIST::Mode::kTrain
                                                      : torch::data::datasets::MNIST::Mode::kTest);
  images_ = mnist.images();
  targets_ = mnist.targets();
  if (limit > 0 && limit < images_.size(0)) {
    images_ = images_.narrow(0, 0, limit).contiguous();
    targets_ = targets_.narrow(0, 0, limit).contiguous();
  }
}

det::Batch FashionMnist::get(size_t index) {
  auto i = static_cast<int64_t>(index);
  return det::Batch({images_[i], targets_[i]});
}

det::Batch FashionMnist::get_batch(const std::vector<size_t>& indices) {
  std::vector<int64_t> idx(indices.begin(), indices.end());
  auto t = torch::from_blob(idx.data(), {static_cast<int64_t>(idx.size())}, torch::kLong).clone();
  return det::Batch({images_.index_select(0, t), targets_.index_select(0, t)});
}

}  // namespace fashion_mnist
