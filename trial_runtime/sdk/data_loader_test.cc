#include "det/data_loader.h"

#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace det {
namespace {

// Example i is the scalar tensor i.
class RangeDataset final : public Dataset {
 public:
  explicit RangeDataset(size_t n) : n_(n) {}
  size_t size() const override { return n_; }
  Batch get(size_t i) override {
    if (i == 13 && fail_at_13) throw std::runtime_error("bad record 13");
    return Batch(torch::tensor(static_cast<int64_t>(i)));
  }
  bool fail_at_13 = false;

 private:
  size_t n_;
};

std::vector<int64_t> Values(const Batch& b) {
  auto t = b.tensor();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

TEST(EpochPermutationTest, IsADeterministicPermutationPerEpoch) {
  auto a = EpochPermutation(100, 7, 0);
  EXPECT_EQ(a, EpochPermutation(100, 7, 0));
  EXPECT_NE(a, EpochPermutation(100, 7, 1));
  EXPECT_NE(a, EpochPermutation(100, 8, 0));
  EXPECT_EQ(std::set<size_t>(a.begin(), a.end()).size(), 100u);
}

TEST(DataLoaderTest, ShardsOfRanksFormTheOneRankGlobalBatch) {
  auto ds = std::make_shared<RangeDataset>(103);
  DataLoader one(ds, DataLoaderOptions(8).shuffle(true));
  one.Configure(0, 1, 42);
  DataLoader r0(ds, DataLoaderOptions(4).shuffle(true));
  DataLoader r1(ds, DataLoaderOptions(4).shuffle(true));
  r0.Configure(0, 2, 42);
  r1.Configure(1, 2, 42);
  ASSERT_EQ(one.batches_per_epoch(), 13);
  ASSERT_EQ(r0.batches_per_epoch(), 13);
  for (int64_t k = 0; k < 30; ++k) {
    auto whole = one.BatchIndices(k);
    auto a = r0.BatchIndices(k);
    auto b = r1.BatchIndices(k);
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_EQ(a, whole) << "batch " << k;
  }
}

TEST(DataLoaderTest, EveryRecordOncePerEpoch) {
  auto ds = std::make_shared<RangeDataset>(50);
  DataLoader l(ds, DataLoaderOptions(7).shuffle(true));
  l.Configure(0, 1, 3);
  std::multiset<size_t> seen;
  for (int64_t k = 0; k < l.batches_per_epoch(); ++k) {
    for (size_t i : l.BatchIndices(k)) seen.insert(i);
  }
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_EQ(std::set<size_t>(seen.begin(), seen.end()).size(), 50u);
}

TEST(DataLoaderTest, DropLastDropsThePartialBatch) {
  auto ds = std::make_shared<RangeDataset>(50);
  DataLoader l(ds, DataLoaderOptions(7).drop_last(true));
  EXPECT_EQ(l.batches_per_epoch(), 7);
  EXPECT_EQ(Values(l.LoadBatch(7)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));  // next epoch
}

TEST(DataLoaderTest, StreamsAreTheSameWithAnyWorkersAndFromAnyStart) {
  auto ds = std::make_shared<RangeDataset>(40);
  DataLoader sync(ds, DataLoaderOptions(3).shuffle(true));
  DataLoader threaded(ds, DataLoaderOptions(3).shuffle(true).workers(3).prefetch(2));
  sync.Configure(0, 1, 9);
  threaded.Configure(0, 1, 9);
  auto s = sync.Stream(0, 40);
  std::vector<std::vector<int64_t>> all;
  while (auto b = s->Next()) all.push_back(Values(*b));
  ASSERT_EQ(all.size(), 40u);
  auto t = threaded.Stream(0, 40);
  for (size_t k = 0; k < 40; ++k) EXPECT_EQ(Values(*t->Next()), all[k]) << k;
  EXPECT_FALSE(t->Next().has_value());
  auto resumed = threaded.Stream(17, 40);
  for (size_t k = 17; k < 40; ++k) EXPECT_EQ(Values(*resumed->Next()), all[k]) << k;
}

TEST(DataLoaderTest, DatasetErrorsReachTheConsumer) {
  auto ds = std::make_shared<RangeDataset>(40);
  ds->fail_at_13 = true;
  DataLoader l(ds, DataLoaderOptions(4).workers(2));
  auto s = l.Stream(0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->Next().has_value());
  EXPECT_THROW(s->Next(), std::runtime_error);  // batch 3 holds record 13
}

TEST(DataLoaderTest, AdaptsLibTorchDatasets) {
  auto data = torch::arange(20).reshape({10, 2});
  DataLoader l(torch::data::datasets::TensorDataset(data), DataLoaderOptions(4));
  auto b = l.LoadBatch(0);
  ASSERT_TRUE(b.is_tensor());
  EXPECT_EQ(b.tensor().sizes(), (std::vector<int64_t>{4, 2}));
}

TEST(BatchTest, AccessorsNameTheMismatch) {
  Batch b({torch::zeros({2, 3}), torch::ones({2})});
  EXPECT_EQ(b.size(), 2);
  EXPECT_EQ(b.num_tensors(), 2u);
  try {
    b["x"];
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "batch holds a tensor list, not a tensor map");
  }
  Batch m(Batch::TensorMap{{"x", torch::zeros({5})}});
  EXPECT_EQ(m["x"].size(0), 5);
  auto c = Batch::Collate({m, m});
  EXPECT_EQ(c["x"].sizes(), (std::vector<int64_t>{2, 5}));
}

}  // namespace
}  // namespace det
