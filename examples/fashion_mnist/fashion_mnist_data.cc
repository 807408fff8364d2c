#include "examples/fashion_mnist/fashion_mnist_data.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <torch/types.h>

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

// The idx format (big-endian): magic, one count per dimension, then the
// bytes. Images are 0x803 (count, rows, columns), labels 0x801 (count).
constexpr uint32_t kImagesMagic = 0x803;
constexpr uint32_t kLabelsMagic = 0x801;

// Reads the first `limit` items (all when limit <= 0) of an idx file as a
// uint8 tensor [items, dims...]: only those bytes are read, so a small
// data.train_limit starts a trial faster (ASHA's short trials).
torch::Tensor ReadIdx(const std::string& path, uint32_t magic, int64_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  auto read_u32 = [&] {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) throw std::runtime_error(path + ": truncated idx header");
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  };
  const uint32_t found = read_u32();
  if (found != magic) {
    throw std::runtime_error(path + ": not an idx file of this kind (magic " + std::to_string(found) +
                             ", expected " + std::to_string(magic) + ")");
  }
  std::vector<int64_t> shape(magic & 0xff);
  for (auto& d : shape) d = read_u32();
  if (limit > 0 && limit < shape[0]) shape[0] = limit;
  torch::Tensor t = torch::empty(shape, torch::kUInt8);
  if (!in.read(reinterpret_cast<char*>(t.data_ptr<uint8_t>()), t.numel())) {
    throw std::runtime_error(path + ": truncated (expected " + std::to_string(t.numel()) + " bytes of data)");
  }
  return t;
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

std::string EnsureDefaultCache() {
  std::string cache = DefaultCacheDir();
  EnsureUncompressed(kDefaultSourceDir, cache);
  return cache;
}

FashionMnist::FashionMnist(const std::string& cache_dir, bool train, int64_t limit) {
  const fs::path dir(cache_dir);
  const std::string prefix = train ? "train" : "t10k";
  images_ = ReadIdx((dir / (prefix + "-images-idx3-ubyte")).string(), kImagesMagic, limit)
                .unsqueeze(1)
                .to(torch::kFloat32)
                .div_(255);
  targets_ = ReadIdx((dir / (prefix + "-labels-idx1-ubyte")).string(), kLabelsMagic, limit).to(torch::kInt64);
  if (images_.size(0) != targets_.size(0)) {
    throw std::runtime_error("Fashion-MNIST " + prefix + " split in " + cache_dir + " has " +
                             std::to_string(images_.size(0)) + " images but " + std::to_string(targets_.size(0)) +
                             " labels");
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
