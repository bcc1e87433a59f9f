// Corrupt, truncated and unsupported GGUF files: each gives the right error naming the key or
// tensor and the reason, never a crash. Files are built field by field (gguf_testlib.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "gguf_testlib.h"
#include "lattice/engine/gguf/gguf.h"

namespace lattice::engine {
namespace {

using testing::GgufBytes;

struct Case {
  const char* name;
  std::function<std::vector<std::byte>()> make;
  ErrorCode code;
  std::vector<std::string> in_message;  // substrings the message must contain
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// A header with one F32 tensor [8] named "w" at `offset`, preceded by the given metadata.
std::vector<std::byte> one_tensor(std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data_bytes) {
  GgufBytes g;
  g.header(3, 1, 0).tensor_info("w", ne, type, offset).pad(32).fill(data_bytes, 0x5a);
  return g.b;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"TooShortForMagic", [] { return GgufBytes().u8('G').u8('G').b; }, ErrorCode::kCorrupt, {"too short"}});
  c.push_back({"BadMagic", [] { auto b = testing::small_valid_file(); b[0] = std::byte{'X'}; return b; },
               ErrorCode::kCorrupt, {"bad magic", "not a GGUF file"}});
  c.push_back({"NoVersion", [] { return GgufBytes().u32(0x46554747).b; }, ErrorCode::kCorrupt, {"version"}});
  c.push_back({"Version1", [] { return GgufBytes().header(1, 0, 0).b; }, ErrorCode::kUnavailable, {"version 1"}});
  c.push_back({"Version4", [] { return GgufBytes().header(4, 0, 0).b; }, ErrorCode::kUnavailable, {"version 4"}});
  c.push_back({"BigEndian", [] { return GgufBytes().header(0x03000000, 0, 0).b; }, ErrorCode::kUnavailable,
               {"big-endian"}});
  c.push_back({"HugeTensorCount", [] { return GgufBytes().header(3, uint64_t{1} << 60, 0).fill(64, 0).b; },
               ErrorCode::kCorrupt, {"tensor count"}});
  c.push_back({"HugeMetadataCount", [] { return GgufBytes().header(3, 0, ~uint64_t{0}).fill(64, 0).b; },
               ErrorCode::kCorrupt, {"metadata count"}});
  c.push_back({"MetadataCountPastEnd", [] { return GgufBytes().header(3, 0, 2).kv_u32("a.b", 1).b; },
               ErrorCode::kCorrupt, {"metadata count 2 is impossible"}});
  c.push_back({"KeyLengthPastEnd", [] { return GgufBytes().header(3, 0, 1).u64(1000).fill(20, 'k').b; },
               ErrorCode::kCorrupt, {"metadata entry 0: key", "past the end"}});
  c.push_back({"KeyTooLong", [] { return GgufBytes().header(3, 0, 1).u64(70000).fill(70010, 'k').b; },
               ErrorCode::kCorrupt, {"metadata entry 0: key length 70000"}});
  c.push_back({"EmptyKey", [] { return GgufBytes().header(3, 0, 1).str("").u32(4).u32(1).b; }, ErrorCode::kCorrupt,
               {"empty key"}});
  c.push_back({"StringValuePastEnd",
               [] { return GgufBytes().header(3, 0, 1).str("general.name").u32(8).u64(1u << 20).fill(30, 'x').b; },
               ErrorCode::kCorrupt, {"key 'general.name'", "string", "past the end"}});
  c.push_back({"ScalarValuePastEnd", [] { return GgufBytes().header(3, 0, 1).str("x.y").u32(10).u32(7).b; },
               ErrorCode::kCorrupt, {"key 'x.y'", "past the end"}});
  c.push_back({"UnknownValueType", [] { return GgufBytes().header(3, 0, 1).str("general.name").u32(99).u64(0).b; },
               ErrorCode::kCorrupt, {"key 'general.name'", "unknown value type id 99"}});
  c.push_back({"UnknownArrayElementType",
               [] { return GgufBytes().header(3, 0, 1).str("x.arr").u32(9).u32(13).u64(0).b; }, ErrorCode::kCorrupt,
               {"key 'x.arr'", "unknown array element type id 13"}});
  c.push_back({"NestedArray", [] { return GgufBytes().header(3, 0, 1).str("x.arr").u32(9).u32(9).u64(0).b; },
               ErrorCode::kUnavailable, {"key 'x.arr'", "nested arrays"}});
  c.push_back({"HugeArray",
               [] { return GgufBytes().header(3, 0, 1).str("tokenizer.ggml.scores").u32(9).u32(6).u64(uint64_t{1} << 61).fill(64, 0).b; },
               ErrorCode::kCorrupt, {"key 'tokenizer.ggml.scores'", "array of 2305843009213693952 elements exceeds"}});
  c.push_back({"ArrayPastEnd",
               [] { return GgufBytes().header(3, 0, 1).str("tokenizer.ggml.scores").u32(9).u32(6).u64(1000).fill(64, 0).b; },
               ErrorCode::kCorrupt, {"key 'tokenizer.ggml.scores'", "array of 1000 f32 elements runs past the end"}});
  c.push_back({"ManyEmptyStringsPastEnd",
               [] { return GgufBytes().header(3, 0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(100).fill(8 * 99, 0).u64(50).u8('x').b; },
               ErrorCode::kCorrupt, {"key 'tokenizer.ggml.tokens'", "element 99"}});
  c.push_back({"ArrayStringPastEnd",
               [] {
                 return GgufBytes().header(3, 0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("ok")
                     .u64(1000).fill(10, 'z').b;
               },
               ErrorCode::kCorrupt, {"key 'tokenizer.ggml.tokens'", "element 1", "past the end"}});
  c.push_back({"DuplicateKey", [] { return GgufBytes().header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2).b; },
               ErrorCode::kCorrupt, {"key 'a.b'", "duplicate"}});
  c.push_back({"AlignmentNotPowerOfTwo", [] { return GgufBytes().header(3, 0, 1).kv_u32("general.alignment", 48).b; },
               ErrorCode::kCorrupt, {"key 'general.alignment'", "power of two"}});
  c.push_back({"AlignmentZero", [] { return GgufBytes().header(3, 0, 1).kv_u32("general.alignment", 0).b; },
               ErrorCode::kCorrupt, {"key 'general.alignment'"}});
  c.push_back({"AlignmentWrongType", [] { return GgufBytes().header(3, 0, 1).kv_str("general.alignment", "32").b; },
               ErrorCode::kCorrupt, {"key 'general.alignment'", "expected u32"}});
  c.push_back({"TensorNamePastEnd", [] { return GgufBytes().header(3, 1, 0).u64(1000).fill(40, 'n').b; },
               ErrorCode::kCorrupt, {"tensor 0: name", "past the end"}});
  c.push_back({"TensorNameTooLong",
               [] { return GgufBytes().header(3, 1, 0).tensor_info(std::string(64, 'n'), {8}, 0, 0).pad(32).fill(32, 0).b; },
               ErrorCode::kCorrupt, {"name longer than 63"}});
  c.push_back({"TensorEmptyName",
               [] { return GgufBytes().header(3, 1, 0).tensor_info("", {8}, 0, 0).pad(32).fill(32, 0).b; },
               ErrorCode::kCorrupt, {"tensor 0: empty name"}});
  c.push_back({"UnknownTensorType", [] { return one_tensor({8}, 99, 0, 32); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "unknown tensor type id 99"}});
  c.push_back({"UnknownTensorTypeInGap", [] { return one_tensor({8}, 4, 0, 32); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "unknown tensor type id 4"}});
  c.push_back({"UnsupportedTensorType", [] { return one_tensor({32}, 9, 0, 64); }, ErrorCode::kUnavailable,
               {"tensor 'w'", "Q8_1", "not supported"}});
  c.push_back({"FiveDims", [] { return one_tensor({1, 1, 1, 1, 8}, 0, 0, 32); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "5 dimensions"}});
  c.push_back({"ZeroDims", [] { return one_tensor({}, 0, 0, 32); }, ErrorCode::kCorrupt, {"tensor 'w'", "0 dimensions"}});
  c.push_back({"ZeroDimension", [] { return one_tensor({8, 0}, 0, 0, 32); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "dimension 1 is zero"}});
  c.push_back({"DimsProductOverflow", [] { return one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 32); },
               ErrorCode::kCorrupt, {"tensor 'w'", "overflows"}});
  c.push_back({"DimsNotMultipleOfBlock", [] { return one_tensor({33, 2}, 8, 0, 128); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "ne[0] = 33", "Q8_0 block size 32"}});
  c.push_back({"KQuantRowNotMultipleOf256", [] { return one_tensor({128}, 12, 0, 128); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "Q4_K block size 256"}});
  c.push_back({"MisalignedOffset", [] { return one_tensor({8}, 0, 4, 64); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "offset 4", "alignment 32"}});
  c.push_back({"OffsetPastEnd", [] { return one_tensor({8}, 0, 64, 64); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "past the end"}});
  c.push_back({"HugeOffset", [] { return one_tensor({8}, 0, ~uint64_t{31}, 64); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "past the end"}});
  c.push_back({"DataTruncated", [] { return one_tensor({8}, 0, 0, 31); }, ErrorCode::kCorrupt,
               {"tensor 'w'", "32 bytes", "past the end"}});
  c.push_back({"NoDataSection", [] { return GgufBytes().header(3, 1, 0).tensor_info("w", {8}, 0, 0).b; },
               ErrorCode::kCorrupt, {"tensor 'w'", "past the end"}});
  c.push_back({"OverlappingTensors",
               [] {
                 return GgufBytes().header(3, 2, 0).tensor_info("a", {16}, 0, 0).tensor_info("b", {8}, 0, 32).pad(32)
                     .fill(64, 1).b;
               },
               ErrorCode::kCorrupt, {"tensor 'b'", "overlaps tensor 'a'"}});
  c.push_back({"DuplicateTensorName",
               [] {
                 return GgufBytes().header(3, 2, 0).tensor_info("a", {8}, 0, 0).tensor_info("a", {8}, 0, 32).pad(32)
                     .fill(64, 1).b;
               },
               ErrorCode::kCorrupt, {"tensor 'a'", "duplicate tensor name"}});
  return c;
}

class GgufCorrupt : public ::testing::TestWithParam<Case> {};

TEST_P(GgufCorrupt, GivesTheRightError) {
  const Case& c = GetParam();
  const std::vector<std::byte> bytes = c.make();
  auto f = GgufFile::parse(bytes, "bad.gguf");
  ASSERT_FALSE(f.ok()) << c.name;
  EXPECT_EQ(f.status().code(), c.code) << f.status().to_string();
  for (const auto& s : c.in_message) EXPECT_NE(f.status().message().find(s), std::string::npos) << f.status().to_string();
  EXPECT_EQ(f.status().message().rfind("bad.gguf: ", 0), 0u) << f.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Table, GgufCorrupt, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(GgufCorruptMisc, ValidBaselineAndOptions) {
  auto ok = GgufFile::parse(testing::small_valid_file());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)->tensors().size(), 2u);
  // A type the engine has no kernels for is accepted when asked (inspection tools).
  auto q41 = one_tensor({32}, 3, 0, 32);
  OpenOptions o;
  o.allow_unsupported_types = true;
  auto f = GgufFile::parse(q41, "q41", o);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->tensors()[0].n_bytes, 20u);
  // Zero tensors and no data section is a valid file.
  auto empty = GgufBytes().header(2, 0, 0).b;
  EXPECT_TRUE(GgufFile::parse(empty).ok());
}

TEST(GgufCorruptMisc, OpenErrorsNameTheFile) {
  const std::string dir = testing::make_temp_dir("open");
  auto missing = GgufFile::open(dir + "/nope.gguf");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.gguf"), std::string::npos);
  testing::write_file(dir + "/empty.gguf", {});
  auto empty = GgufFile::open(dir + "/empty.gguf");
  EXPECT_EQ(empty.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  auto d = GgufFile::open(dir);
  EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
  auto bad = testing::small_valid_file();
  bad.resize(40);
  testing::write_file(dir + "/trunc.gguf", bad);
  auto t = GgufFile::open(dir + "/trunc.gguf");
  EXPECT_EQ(t.status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(t.status().message().rfind(dir + "/trunc.gguf: ", 0), 0u) << t.status().message();
  std::filesystem::remove_all(dir);
}

// Every truncation: an error until all tensor data is present, then (inside the final
// padding) a valid file.
TEST(GgufCorruptMisc, TruncatedAtEveryOffset) {
  GgufWriter w;
  w.metadata().set("general.architecture", "llama");
  w.metadata().set("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "a", "bc"});
  w.metadata().set("tokenizer.ggml.scores", std::vector<float>{0, -1, -2});
  w.metadata().set("x.flag", true);
  ASSERT_TRUE(w.add_tensor("t0", TensorType::kF16, {5}, std::vector<std::byte>(10, std::byte{7})).ok());
  ASSERT_TRUE(w.add_tensor("t1", TensorType::kQ8_0, {32, 2}, std::vector<std::byte>(68, std::byte{9})).ok());
  auto full = w.write_to_memory();
  ASSERT_TRUE(full.ok());
  auto parsed = GgufFile::parse(*full);
  ASSERT_TRUE(parsed.ok());
  const TensorInfo* last = (*parsed)->find_tensor("t1");
  const size_t data_end = last->file_offset + last->n_bytes;
  ASSERT_LT(data_end, full->size());  // the writer pads the end too
  for (size_t n = 0; n < full->size(); ++n) {
    std::vector<std::byte> cut(full->begin(), full->begin() + static_cast<ptrdiff_t>(n));
    auto f = GgufFile::parse(cut, "cut");
    if (n < data_end) {
      ASSERT_FALSE(f.ok()) << "truncated to " << n << " bytes";
      EXPECT_EQ(f.status().code(), ErrorCode::kCorrupt) << n << ": " << f.status().to_string();
      EXPECT_FALSE(f.status().message().empty());
    } else {
      EXPECT_TRUE(f.ok()) << n << ": " << f.status().to_string();
    }
  }
}

// Random byte flips of a small valid file: never a crash, either ok or a described error.
// Deterministic seed, bounded iterations.
TEST(GgufCorruptMisc, RandomByteFlipsNeverCrash) {
  GgufWriter w;
  w.metadata().set("general.architecture", "qwen2");
  w.metadata().set("qwen2.block_count", uint32_t{1});
  w.metadata().set("tokenizer.ggml.merges", std::vector<std::string>{"a b", "ab c"});
  w.metadata().set("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1, 3});
  ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight", TensorType::kQ4_0, {64, 2}, std::vector<std::byte>(72)).ok());
  ASSERT_TRUE(w.add_tensor("blk.0.attn_q.bias", TensorType::kF32, {2}, std::vector<std::byte>(8)).ok());
  auto full = w.write_to_memory();
  ASSERT_TRUE(full.ok());
  std::mt19937_64 rng(1234);
  int n_ok = 0, n_err = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<std::byte> b = *full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = rng() % b.size();
      switch (rng() % 3) {
        case 0: b[pos] ^= std::byte(1u << (rng() % 8)); break;
        case 1: b[pos] = std::byte(static_cast<uint8_t>(rng())); break;
        default: b[pos] = std::byte{0xff}; break;
      }
    }
    if (rng() % 8 == 0) b.resize(rng() % b.size());
    auto f = GgufFile::parse(b, "fuzz");
    if (f.ok()) {
      ++n_ok;
      // Whatever was accepted must be self-consistent: every tensor inside the image.
      for (const auto& t : (*f)->tensors()) {
        ASSERT_LE(t.file_offset + t.n_bytes, b.size());
        ASSERT_EQ(t.data, b.data() + t.file_offset);
      }
    } else {
      ++n_err;
      EXPECT_FALSE(f.status().message().empty());
      EXPECT_NE(f.status().code(), ErrorCode::kInternal);
    }
  }
  EXPECT_GT(n_err, 0);
  EXPECT_GT(n_ok, 0);  // flips inside tensor data or padding keep the file valid
}

// Split sets: every file is checked and belongs to the set.
class GgufSplitErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("splits");
    w_.metadata().set("general.architecture", "llama");
    for (int i = 0; i < 4; ++i)
      ASSERT_TRUE(w_.add_tensor("t" + std::to_string(i), TensorType::kF32, {4}, std::vector<std::byte>(16)).ok());
    WriteOptions o;
    o.max_tensors_per_file = 2;
    auto p = w_.write(dir_ + "/m.gguf", {}, o);
    ASSERT_TRUE(p.ok());
    paths_ = *p;
    ASSERT_EQ(paths_.size(), 2u);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  GgufWriter w_;
  std::vector<std::string> paths_;
};

TEST_F(GgufSplitErrors, LaterFileHoldsOnlySplitKeys) {
  std::ifstream in(paths_[1], std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto f = GgufFile::parse(std::as_bytes(std::span(raw)), "part2");
  ASSERT_TRUE(f.ok());
  std::vector<std::string> keys;
  for (const auto& e : (*f)->metadata().entries()) keys.push_back(e.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"split.no", "split.count", "split.tensors.count"}));
  EXPECT_EQ((*f)->metadata().find("split.no")->type(), ValueType::kU16);
  EXPECT_EQ((*f)->metadata().find("split.count")->type(), ValueType::kU16);
  EXPECT_EQ((*f)->metadata().find("split.tensors.count")->type(), ValueType::kI32);
}

TEST_F(GgufSplitErrors, MissingPartNamesThePath) {
  std::filesystem::remove(paths_[1]);
  auto f = GgufFile::open(paths_[0]);
  EXPECT_EQ(f.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(f.status().message().find("m-00002-of-00002.gguf"), std::string::npos) << f.status().message();
}

TEST_F(GgufSplitErrors, RenamedFirstFileIsRefused) {
  std::filesystem::rename(paths_[0], dir_ + "/renamed.gguf");
  auto f = GgufFile::open(dir_ + "/renamed.gguf");
  EXPECT_EQ(f.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("-00001-of-00002.gguf"), std::string::npos) << f.status().message();
}

TEST_F(GgufSplitErrors, WrongPartIsCorrupt) {
  // The second file replaced by one that says it is part 3 of 3.
  WriteOptions o;
  o.max_tensors_per_file = 1;
  GgufWriter three;
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(three.add_tensor("z" + std::to_string(i), TensorType::kF32, {4}, std::vector<std::byte>(16)).ok());
  auto p = three.write(dir_ + "/x.gguf", {}, o);
  ASSERT_TRUE(p.ok());
  std::filesystem::copy_file((*p)[2], paths_[1], std::filesystem::copy_options::overwrite_existing);
  auto f = GgufFile::open(paths_[0]);
  EXPECT_EQ(f.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(f.status().message().find("key 'split.no'"), std::string::npos) << f.status().message();
}

TEST_F(GgufSplitErrors, DuplicateTensorAcrossFiles) {
  // A second part from another set whose tensors are named like the first part's.
  GgufWriter dup;
  for (const char* n : {"u0", "u1", "t0", "t9"})
    ASSERT_TRUE(dup.add_tensor(n, TensorType::kF32, {4}, std::vector<std::byte>(16)).ok());
  WriteOptions o;
  o.max_tensors_per_file = 2;
  auto p = dup.write(dir_ + "/d.gguf", {}, o);
  ASSERT_TRUE(p.ok());
  std::filesystem::copy_file((*p)[1], paths_[1], std::filesystem::copy_options::overwrite_existing);
  auto f = GgufFile::open(paths_[0]);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(f.status().message().find("tensor 't0': duplicate tensor name"), std::string::npos) << f.status().message();
}

TEST_F(GgufSplitErrors, TensorCountMismatch) {
  // Patch split.tensors.count in the first file from 4 to 5.
  std::vector<char> raw;
  {
    std::ifstream in(paths_[0], std::ios::binary);
    raw.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string key = "split.tensors.count";
  auto it = std::search(raw.begin(), raw.end(), key.begin(), key.end());
  ASSERT_NE(it, raw.end());
  const size_t at = static_cast<size_t>(it - raw.begin()) + key.size() + 4;  // past the type id
  int32_t v = 0;
  std::memcpy(&v, raw.data() + at, 4);
  ASSERT_EQ(v, 4);
  v = 5;
  std::memcpy(raw.data() + at, &v, 4);
  testing::write_file(paths_[0], std::vector<std::byte>(reinterpret_cast<std::byte*>(raw.data()),
                                                        reinterpret_cast<std::byte*>(raw.data()) + raw.size()));
  auto f = GgufFile::open(paths_[0]);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(f.status().message().find("key 'split.tensors.count': 5 but the set holds 4"), std::string::npos)
      << f.status().message();
}

}  // namespace
}  // namespace lattice::engine
