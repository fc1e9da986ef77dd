// format: tokens on real files written here: windows and their next-token
// targets, stride, shards by list and by pattern (sorted), uint32, the
// checks (odd size, a token out of the vocabulary, no sample, a vanished
// shard), and the samplers over it.
#include "data/data_test_support.h"

#include <bagua/data_files.h>

#include <cstdint>
#include <vector>

namespace bagua::testing {
namespace {

void write_tokens(const std::string& path, const std::vector<uint32_t>& ids, int width) {
  std::string bytes;
  for (uint32_t id : ids)
    for (int b = 0; b < width; ++b) bytes.push_back(static_cast<char>((id >> (8 * b)) & 0xff));
  write_file(path, bytes);
}

std::vector<uint32_t> range(uint32_t from, uint32_t n) {
  std::vector<uint32_t> v;
  for (uint32_t i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

DataSource tokens(std::vector<std::string> shards, int64_t context, int64_t stride = 0, int64_t width = 2) {
  DataSource s;
  s.format = DataFormat::kTokens;
  s.shards = std::move(shards);
  s.context = context;
  s.stride = stride > 0 ? stride : context;
  s.token_bytes = width;
  return s;
}

std::vector<int64_t> row(const at::Tensor& t, int64_t r) {
  at::Tensor x = t[r].contiguous();
  return std::vector<int64_t>(x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + x.numel());
}

TEST(Tokens, SampleIIsTheWindowAtIStrideWithTheNextTokenAsTarget) {
  TempDir dir;
  write_tokens(dir.file("a.bin"), range(100, 10), 2);  // 100..109
  auto data = load_dataset(tokens({dir.file("a.bin")}, 4), TargetKind::kClassIndex);
  // 10 tokens, windows of 5 from 0, 4: two samples (a third would need token 13).
  ASSERT_EQ(data->size(), 2);
  Batch b = data->get_batch({1, 0});
  EXPECT_EQ(b.input.scalar_type(), at::kLong);
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(row(b.input, 0), (std::vector<int64_t>{104, 105, 106, 107}));
  EXPECT_EQ(row(b.target, 0), (std::vector<int64_t>{105, 106, 107, 108}));
  EXPECT_EQ(row(b.input, 1), (std::vector<int64_t>{100, 101, 102, 103}));
  EXPECT_EQ(row(b.target, 1), (std::vector<int64_t>{101, 102, 103, 104}));
  EXPECT_TRUE(data->streamed());
  EXPECT_EQ(data->memory_bytes(), 0);
  EXPECT_NE(data->describe().find("2 samples of 4 tokens"), std::string::npos) << data->describe();
}

TEST(Tokens, StrideOverlapsWindowsAndUint32ReadsFourBytes) {
  TempDir dir;
  write_tokens(dir.file("a.bin"), {70000, 1, 70002, 3, 70004, 5}, 4);
  auto data = load_dataset(tokens({dir.file("a.bin")}, 2, /*stride=*/1, /*width=*/4), TargetKind::kClassIndex);
  ASSERT_EQ(data->size(), 4);  // windows of 3 from 0, 1, 2, 3
  Batch b = data->get_batch({2, 3});
  EXPECT_EQ(row(b.input, 0), (std::vector<int64_t>{70002, 3}));
  EXPECT_EQ(row(b.target, 1), (std::vector<int64_t>{70004, 5}));
}

TEST(Tokens, ShardsComeInListOrderPatternsSortedAndNoWindowCrossesAFile) {
  TempDir dir;
  write_tokens(dir.file("s2.bin"), range(200, 5), 2);
  write_tokens(dir.file("s10.bin"), range(1000, 5), 2);
  write_tokens(dir.file("s1.bin"), range(100, 6), 2);
  write_tokens(dir.file("first.bin"), range(0, 3), 2);
  // "first.bin" first (the list), then s1, s10, s2 (bytes order).
  auto data = load_dataset(tokens({dir.file("first.bin"), dir.file("s*.bin")}, 2), TargetKind::kClassIndex);
  // first: 3 tokens -> 1 window of 3; s1: 6 -> 2 (0, 2); s10: 5 -> 2; s2: 5 -> 2.
  ASSERT_EQ(data->size(), 7);
  std::vector<int64_t> starts;
  Batch b = data->get_batch({0, 1, 2, 3, 4, 5, 6});
  for (int64_t i = 0; i < 7; ++i) starts.push_back(row(b.input, i)[0]);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 100, 102, 1000, 1002, 200, 202}));
  EXPECT_EQ(row(b.target, 2), (std::vector<int64_t>{103, 104}));  // s1's last window ends inside s1
}

TEST(Tokens, AFileOfOddSizeIsAnErrorNamingItAndTheDtype) {
  TempDir dir;
  write_file(dir.file("odd.bin"), std::string(7, '\1'));
  try {
    load_dataset(tokens({dir.file("odd.bin")}, 2), TargetKind::kClassIndex);
    FAIL() << "accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("odd.bin") + ": 7 bytes is not a whole number of uint16"),
              std::string::npos)
        << e.what();
  }
}

TEST(Tokens, ATokenOutsideTheVocabularyNamesTheFileAndItsByteOffset) {
  TempDir dir;
  std::vector<uint32_t> ids = range(0, 20);
  ids[13] = 300;
  write_tokens(dir.file("v.bin"), ids, 2);
  DataSource s = tokens({dir.file("v.bin")}, 4);
  s.vocab_size = 256;
  auto data = load_dataset(s, TargetKind::kClassIndex);
  EXPECT_NO_THROW(data->get_batch({0, 1}));  // tokens 0..8
  try {
    data->get_batch({3});  // tokens 12..16
    FAIL() << "accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("v.bin") + ": token id 300 at byte offset 26 is not below vocab_size 256"),
              std::string::npos)
        << e.what();
  }
  // check_dataset() reads the first sample: a bad id there fails before any worker starts.
  ids[1] = 999;
  write_tokens(dir.file("w.bin"), ids, 2);
  DataSource w = tokens({dir.file("w.bin")}, 4);
  w.vocab_size = 256;
  EXPECT_THROW(check_dataset(w, TargetKind::kClassIndex), DataError);
}

TEST(Tokens, NoSampleAMissingShardAndAnUnmatchedPatternAreErrorsNamingThePath) {
  TempDir dir;
  write_tokens(dir.file("short.bin"), range(0, 4), 2);
  auto message = [](const DataSource& s) {
    try {
      load_dataset(s, TargetKind::kClassIndex);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(tokens({dir.file("short.bin")}, 4)).find("no file holds context + 1 = 5 tokens"), std::string::npos);
  EXPECT_NE(message(tokens({dir.file("gone.bin")}, 2)).find(dir.file("gone.bin") + ": cannot open"), std::string::npos);
  EXPECT_NE(message(tokens({dir.file("none-*.bin")}, 2)).find(dir.file("none-*.bin") + ": no file matches"),
            std::string::npos);
}

TEST(Tokens, EverySampleOfAnEpochIsSharedOutOnceAcrossRanks) {
  TempDir dir;
  write_tokens(dir.file("a.bin"), range(0, 8 * 50 + 1), 2);
  auto data = load_dataset(tokens({dir.file("a.bin")}, 8), TargetKind::kClassIndex);
  ASSERT_EQ(data->size(), 50);
  DataSpec spec;
  spec.train = tokens({dir.file("a.bin")}, 8);
  spec.batch_size = 5;
  spec.sampler.drop_last = true;
  auto sampler = make_sampler(spec, *data, 3);
  std::vector<int> seen(50, 0);
  for (int r = 0; r < 3; ++r)
    for (const auto& batch : sampler->batches(1, r)) {
      Batch b = data->get_batch(batch);
      for (int64_t i = 0; i < b.input.size(0); ++i) ++seen[static_cast<size_t>(row(b.input, i)[0] / 8)];
    }
  int once = 0;
  for (int c : seen) once += c == 1;
  EXPECT_EQ(once, 48);  // 50 samples, 3 ranks, drop_last: 16 each
}

// The shuffle of an epoch above kMaterializedOrderLimit samples: a keyed
// bijection computed per position, no order held in memory.
TEST(KeyedPermutation, IsABijectionForEverySizeAndDiffersByKey) {
  for (int64_t n : {1, 2, 3, 5, 16, 17, 1000, 65537}) {
    SCOPED_TRACE(n);
    std::vector<int> hit(static_cast<size_t>(n), 0);
    std::vector<int64_t> order;
    for (int64_t p = 0; p < n; ++p) {
      const int64_t x = keyed_permutation(n, 42, p);
      ASSERT_GE(x, 0);
      ASSERT_LT(x, n);
      ++hit[static_cast<size_t>(x)];
      order.push_back(x);
    }
    for (int h : hit) ASSERT_EQ(h, 1);
    if (n >= 16) {
      std::vector<int64_t> other;
      int fixed = 0;
      for (int64_t p = 0; p < n; ++p) {
        other.push_back(keyed_permutation(n, 43, p));
        fixed += order[static_cast<size_t>(p)] == p;
      }
      EXPECT_NE(order, other) << "another key (epoch) must give another order";
      EXPECT_LT(fixed, n / 4 + 2) << "hardly shuffled";
    }
  }
  EXPECT_THROW(keyed_permutation(5, 1, 5), InvalidArgument);
}

// A token file of more samples than the sampler materialises an order for
// (context 1: one sample a token): every rank's batches, made as they are
// asked for, share the epoch out once, in a shuffled order that changes
// with the epoch; a resume at another world size mid-epoch covers the rest
// once.
TEST(Tokens, AnEpochAboveTheMaterialisedLimitIsSharedOutOnceWithoutAnOrderInMemory) {
  TempDir dir;
  const int64_t n = kMaterializedOrderLimit + 1000;
  write_file(dir.file("big.bin"), std::string(static_cast<size_t>(2 * (n + 1)), '\0'));
  auto data = load_dataset(tokens({dir.file("big.bin")}, 1), TargetKind::kClassIndex);
  ASSERT_EQ(data->size(), n);
  DataSpec spec;
  spec.train = tokens({dir.file("big.bin")}, 1);
  spec.batch_size = 4096;
  spec.sampler.shuffle = true;
  spec.sampler.seed = 3;
  auto two = make_sampler(spec, *data, 2);
  std::vector<uint8_t> seen(static_cast<size_t>(n), 0);
  int64_t in_place = 0;
  const auto r0 = two->batch_list(0, 0), r1 = two->batch_list(0, 1);
  ASSERT_EQ(r0->size(), two->num_batches(0));
  const int64_t stop_after = 300;  // batches per rank before the "resume"
  for (int64_t b = 0; b < stop_after; ++b)
    for (const auto& list : {r0, r1})
      for (int64_t i : list->at(b)) {
        ++seen[static_cast<size_t>(i)];
        in_place += i == b;  // (a rough sign of an unshuffled order)
      }
  EXPECT_LT(in_place, 10);
  EXPECT_NE(two->batch_list(1, 0)->at(0), r0->at(0)) << "the next epoch's order must differ";
  // Resumed on 3 workers from the position the 2 reached.
  auto three = make_sampler(spec, *data, 3);
  three->start_epoch_at(0, *two->position(0, stop_after));
  for (int r = 0; r < 3; ++r) {
    const auto list = three->batch_list(0, r);
    for (int64_t b = 0; b < list->size(); ++b)
      for (int64_t i : list->at(b)) ++seen[static_cast<size_t>(i)];
  }
  int64_t once = 0, twice = 0;
  for (uint8_t c : seen) {
    once += c == 1;
    twice += c == 2;
  }
  // Every sample once, but for the last step's padding (at most 2 repeats).
  EXPECT_GE(once, n - 2);
  EXPECT_LE(twice, 2);
}

TEST(Tokens, APatternListsOnlyRegularFilesInSortedOrder) {
  TempDir dir;
  write_file(dir.file("b.bin"), "xx");
  write_file(dir.file("a.bin"), "xx");
  std::filesystem::create_directory(dir.file("c.bin"));
  std::vector<std::string> unmatched;
  EXPECT_EQ(expand_file_patterns({dir.file("*.bin"), dir.file("z*")}, &unmatched),
            (std::vector<std::string>{dir.file("a.bin"), dir.file("b.bin")}));
  EXPECT_EQ(unmatched, (std::vector<std::string>{dir.file("z*")}));
}

}  // namespace
}  // namespace bagua::testing
