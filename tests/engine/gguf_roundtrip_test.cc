// GGUF writer -> reader round trips, the writer's bytes against an independent builder,
// v2 files, split sets, metadata getters, and the reader's paging helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "gguf_testlib.h"
#include "lattice/engine/gguf/gguf.h"

namespace lattice::engine {
namespace {

using testing::GgufBytes;

std::vector<std::byte> pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(seed + i * 7));
  return v;
}

// One tensor of every supported type, odd shapes, a 3-D and a 4-D one.
void add_all_types(GgufWriter& w) {
  struct T {
    const char* name;
    TensorType type;
    std::vector<uint64_t> ne;
  };
  const T ts[] = {
      {"f32", TensorType::kF32, {3}},          {"f16", TensorType::kF16, {5, 3}},
      {"bf16", TensorType::kBF16, {7, 2, 3}},  {"q8_0", TensorType::kQ8_0, {64, 3}},
      {"q4_0", TensorType::kQ4_0, {32, 1, 2, 2}}, {"q4_k", TensorType::kQ4_K, {256, 2}},
      {"q5_k", TensorType::kQ5_K, {512, 1}},   {"q6_k", TensorType::kQ6_K, {256, 3}},
  };
  uint8_t seed = 1;
  for (const T& t : ts) {
    uint64_t n = 1;
    for (auto d : t.ne) n *= d;
    auto traits = type_traits(static_cast<uint32_t>(t.type));
    ASSERT_TRUE(w.add_tensor(t.name, t.type, t.ne, pattern(n / traits->block_elems * traits->block_bytes, seed++)).ok());
  }
}

void set_all_values(Metadata& md) {
  md.set("general.architecture", "llama");
  md.set("t.u8", uint8_t{200});
  md.set("t.i8", int8_t{-100});
  md.set("t.u16", uint16_t{60000});
  md.set("t.i16", int16_t{-30000});
  md.set("t.u32", uint32_t{4000000000u});
  md.set("t.i32", int32_t{-2000000000});
  md.set("t.f32", 1.5f);
  md.set("t.bool", true);
  md.set("t.str", std::string("h\xc3\xa9llo"));
  md.set("t.empty_str", std::string());
  md.set("t.u64", uint64_t{1} << 60);
  md.set("t.i64", int64_t{-(int64_t{1} << 60)});
  md.set("t.f64", 2.25);
  md.set("t.arr_u8", std::vector<uint8_t>{1, 2, 3});
  md.set("t.arr_i32", std::vector<int32_t>{-1, 0, 1});
  md.set("t.arr_f32", std::vector<float>{0.5f, -0.25f});
  md.set("t.arr_bool", std::vector<bool>{true, false, true});
  md.set("t.arr_str", std::vector<std::string>{"a", "", "\xe2\x96\x81the"});
  md.set("t.arr_u64", std::vector<uint64_t>{});
  md.set("t.arr_f64", std::vector<double>{1e300});
  md.set("t.arr_i16", std::vector<int16_t>{-5});
  md.set("t.arr_u16", std::vector<uint16_t>{5});
  md.set("t.arr_i8", std::vector<int8_t>{-8});
  md.set("t.arr_u32", std::vector<uint32_t>{7});
  md.set("t.arr_i64", std::vector<int64_t>{-9});
}

void expect_same(const GgufWriter& w, const GgufFile& f, bool check_metadata = true) {
  if (check_metadata) {
    ASSERT_EQ(f.metadata().size(), w.metadata().size());
  }
  for (size_t i = 0; check_metadata && i < w.metadata().size(); ++i) {
    EXPECT_EQ(f.metadata().entries()[i].key, w.metadata().entries()[i].key);
    EXPECT_TRUE(f.metadata().entries()[i].value == w.metadata().entries()[i].value) << w.metadata().entries()[i].key;
  }
  ASSERT_EQ(f.tensors().size(), w.tensors().size());
  for (size_t i = 0; i < w.tensors().size(); ++i) {
    const TensorSpec& s = w.tensors()[i];
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, s.name);
    EXPECT_EQ(t.type, s.type);
    EXPECT_EQ(t.n_dims, s.ne.size());
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < s.ne.size() ? s.ne[d] : 1u) << s.name;
    EXPECT_EQ(t.n_bytes, s.data.size());
    EXPECT_EQ(t.file_offset % f.alignment(), 0u);
    if (f.path(0) != "<memory>") {  // a mapping starts on a page: data pointers are aligned too
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % f.alignment(), 0u);
    }
    ASSERT_EQ(std::memcmp(t.data, s.data.data(), s.data.size()), 0) << s.name;
    EXPECT_EQ(f.find_tensor(s.name), &t);
  }
}

TEST(GgufRoundTrip, EveryValueTypeAndTensorTypeInMemory) {
  GgufWriter w;
  set_all_values(w.metadata());
  add_all_types(w);
  auto bytes = w.write_to_memory();
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto f = GgufFile::parse(*bytes);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->alignment(), 32u);
  expect_same(w, **f);
}

TEST(GgufRoundTrip, FileOnDiskV2AndV3AndCustomAlignment) {
  const std::string dir = testing::make_temp_dir("rt");
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t alignment : {32u, 64u, 1u}) {
      GgufWriter w;
      set_all_values(w.metadata());
      if (alignment != 32) w.metadata().set("general.alignment", alignment);
      add_all_types(w);
      const std::string path = dir + "/m" + std::to_string(version) + "_" + std::to_string(alignment) + ".gguf";
      WriteOptions o;
      o.version = version;
      auto paths = w.write(path, {}, o);
      ASSERT_TRUE(paths.ok()) << paths.status().to_string();
      ASSERT_EQ(paths->size(), 1u);
      EXPECT_EQ((*paths)[0], path);
      EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
      auto f = GgufFile::open(path);
      ASSERT_TRUE(f.ok()) << f.status().to_string();
      EXPECT_EQ((*f)->version(), version);
      EXPECT_EQ((*f)->alignment(), alignment);
      EXPECT_EQ((*f)->n_files(), 1u);
      expect_same(w, **f);
    }
  }
  std::filesystem::remove_all(dir);
}

// The writer's bytes equal what the format description says, built field by field.
TEST(GgufRoundTrip, WriterBytesMatchIndependentBuilder) {
  GgufWriter w;
  w.metadata().set("general.name", "small");
  w.metadata().set("test.values", std::vector<uint32_t>{1, 2, 3});
  ASSERT_TRUE(w.add_tensor("a", TensorType::kF32, {8}, std::vector<std::byte>(32, std::byte{0x11})).ok());
  ASSERT_TRUE(w.add_tensor("b", TensorType::kF32, {4, 2}, std::vector<std::byte>(32, std::byte{0x22})).ok());
  auto bytes = w.write_to_memory();
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, testing::small_valid_file());

  // Tensor sizes that need padding: each tensor starts at the running aligned offset.
  GgufWriter w2;
  ASSERT_TRUE(w2.add_tensor("x", TensorType::kF16, {3}, std::vector<std::byte>(6, std::byte{1})).ok());
  ASSERT_TRUE(w2.add_tensor("y", TensorType::kQ8_0, {32}, std::vector<std::byte>(34, std::byte{2})).ok());
  GgufBytes g;
  g.header(3, 2, 0).tensor_info("x", {3}, 1, 0).tensor_info("y", {32}, 8, 32).pad(32);
  g.fill(6, 1).fill(26, 0).fill(34, 2).fill(30, 0);
  auto b2 = w2.write_to_memory();
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(*b2, g.b);
}

TEST(GgufRoundTrip, FillCallbackStreamsTensors) {
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor("t0", TensorType::kF32, {100}).ok());
  ASSERT_TRUE(w.add_tensor("t1", TensorType::kQ4_0, {64, 3}).ok());
  std::vector<size_t> calls;
  auto fill = [&](size_t i, const TensorSpec& s, std::span<std::byte> out) -> Status {
    calls.push_back(i);
    EXPECT_EQ(out.size(), s.n_bytes);
    for (size_t k = 0; k < out.size(); ++k) out[k] = std::byte(static_cast<uint8_t>(i * 31 + k));
    return Status::Ok();
  };
  auto bytes = w.write_to_memory(fill);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(calls, (std::vector<size_t>{0, 1}));
  auto f = GgufFile::parse(*bytes);
  ASSERT_TRUE(f.ok());
  const TensorInfo* t1 = (*f)->find_tensor("t1");
  ASSERT_NE(t1, nullptr);
  EXPECT_EQ(t1->n_bytes, 3u * 2 * 18);
  EXPECT_EQ(t1->n_rows(), 3u);
  EXPECT_EQ(t1->row_bytes(), 36u);
  EXPECT_EQ(t1->shape_string(), "[64, 3]");
  for (size_t k = 0; k < t1->n_bytes; ++k) ASSERT_EQ(t1->data[k], std::byte(static_cast<uint8_t>(31 + k)));

  // A failing fill aborts the write with its error and leaves no file behind.
  const std::string dir = testing::make_temp_dir("fill");
  auto bad = w.write(dir + "/bad.gguf", [](size_t, const TensorSpec&, std::span<std::byte>) {
    return Status(ErrorCode::kIoError, "disk on fire");
  });
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "disk on fire");
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST(GgufRoundTrip, WriterRejectsBadTensors) {
  GgufWriter w;
  EXPECT_EQ(w.add_tensor("", TensorType::kF32, {1}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor(std::string(64, 'x'), TensorType::kF32, {1}).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(w.add_tensor(std::string(63, 'x'), TensorType::kF32, {1}).ok());
  EXPECT_EQ(w.add_tensor(std::string(63, 'x'), TensorType::kF32, {1}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("d", TensorType::kF32, {}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("d", TensorType::kF32, {1, 1, 1, 1, 1}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("d", TensorType::kF32, {0}).code(), ErrorCode::kInvalidArgument);
  Status s = w.add_tensor("q", TensorType::kQ4_0, {33});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'q'"), std::string::npos) << s.message();
  EXPECT_EQ(w.add_tensor("e", TensorType::kF32, {4}, std::vector<std::byte>(15)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("o", TensorType::kF32, {uint64_t{1} << 40, uint64_t{1} << 40}).code(),
            ErrorCode::kInvalidArgument);
  // A tensor without data and no fill function.
  auto r = w.write_to_memory();
  EXPECT_FALSE(r.ok());
  GgufWriter w2;
  w2.metadata().set("general.alignment", uint32_t{48});
  EXPECT_EQ(w2.write_to_memory().status().code(), ErrorCode::kInvalidArgument);
}

TEST(GgufRoundTrip, SplitSetByTensorCountAndBytes) {
  const std::string dir = testing::make_temp_dir("split");
  GgufWriter w;
  set_all_values(w.metadata());
  add_all_types(w);  // 8 tensors
  WriteOptions o;
  o.max_tensors_per_file = 3;
  auto paths = w.write(dir + "/model.gguf", {}, o);
  ASSERT_TRUE(paths.ok()) << paths.status().to_string();
  ASSERT_EQ(paths->size(), 3u);
  EXPECT_EQ((*paths)[0], dir + "/model-00001-of-00003.gguf");
  EXPECT_EQ((*paths)[2], dir + "/model-00003-of-00003.gguf");
  auto f = GgufFile::open((*paths)[0]);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->n_files(), 3u);
  ASSERT_EQ((*f)->tensors().size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    const TensorInfo& t = (*f)->tensors()[i];
    EXPECT_EQ(t.name, w.tensors()[i].name);
    EXPECT_EQ(t.file_index, i / 3);
    ASSERT_EQ(std::memcmp(t.data, w.tensors()[i].data.data(), t.n_bytes), 0);
  }
  const Metadata& md = (*f)->metadata();
  EXPECT_EQ(md.get_u16("split.no").value_or(99), 0);
  EXPECT_EQ(md.get_u16("split.count").value_or(0), 3);
  EXPECT_EQ(md.get_i32("split.tensors.count").value_or(0), 8);
  EXPECT_EQ(md.get_string("t.str").value_or(""), "h\xc3\xa9llo");
  expect_same(w, **f, /*check_metadata=*/false);
  {
    auto p2 = GgufFile::open((*paths)[1]);  // opening a later file is refused with advice
    ASSERT_FALSE(p2.ok());
    EXPECT_EQ(p2.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(p2.status().message().find("open the first file"), std::string::npos);
  }

  // By bytes: every file but the last carries at least one tensor and stays under the cap
  // unless a single tensor is bigger.
  WriteOptions ob;
  ob.max_bytes_per_file = 600;
  auto pb = w.write(dir + "/bytes.gguf", {}, ob);
  ASSERT_TRUE(pb.ok());
  auto fb = GgufFile::open((*pb)[0]);
  ASSERT_TRUE(fb.ok()) << fb.status().to_string();
  EXPECT_EQ((*fb)->n_files(), pb->size());
  EXPECT_GT(pb->size(), 2u);
  std::vector<uint64_t> per_file((*fb)->n_files());
  for (const auto& t : (*fb)->tensors()) per_file[t.file_index] += (t.n_bytes + 31) / 32 * 32;
  for (uint64_t b : per_file) EXPECT_GT(b, 0u);
  expect_same(w, **fb, /*check_metadata=*/false);
  std::filesystem::remove_all(dir);
}

TEST(GgufRoundTrip, MetadataGettersNameTheKey) {
  GgufWriter w;
  set_all_values(w.metadata());
  auto bytes = w.write_to_memory();
  ASSERT_TRUE(bytes.ok());
  auto f = GgufFile::parse(*bytes);
  ASSERT_TRUE(f.ok());
  const Metadata& md = (*f)->metadata();
  EXPECT_EQ(*md.get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(*md.get_u64("t.u8"), 200u);  // widening across integer types
  EXPECT_EQ(*md.get_i32("t.i16"), -30000);
  EXPECT_EQ(*md.get_i64("t.i64"), -(int64_t{1} << 60));
  EXPECT_EQ(*md.get_u16("t.u16"), 60000);
  EXPECT_EQ(*md.get_f32("t.f32"), 1.5f);
  EXPECT_EQ(*md.get_f64("t.f64"), 2.25);
  EXPECT_EQ(*md.get_f32("t.f64"), 2.25f);
  EXPECT_TRUE(*md.get_bool("t.bool"));
  EXPECT_EQ(*md.get_string("general.architecture"), "llama");
  EXPECT_EQ(*md.get_u32_or("nope", 7), 7u);
  EXPECT_EQ(*md.get_string_or("nope", "x"), "x");
  EXPECT_EQ(**md.get_array<std::string>("t.arr_str"), (std::vector<std::string>{"a", "", "\xe2\x96\x81the"}));
  EXPECT_EQ(**md.get_array<bool>("t.arr_bool"), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE((*md.get_array<uint64_t>("t.arr_u64"))->empty());

  auto missing = md.get_u32("llama.block_count");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "key 'llama.block_count': missing");
  auto mistyped = md.get_u32("t.str");
  EXPECT_EQ(mistyped.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(mistyped.status().message().find("key 't.str'"), std::string::npos);
  EXPECT_EQ(md.get_u8("t.u16").status().code(), ErrorCode::kCorrupt);      // out of range
  EXPECT_EQ(md.get_u32("t.i8").status().code(), ErrorCode::kCorrupt);      // negative
  EXPECT_EQ(md.get_i32("t.u32").status().code(), ErrorCode::kCorrupt);     // too big
  EXPECT_EQ(md.get_u32_or("t.str", 1).status().code(), ErrorCode::kCorrupt);  // present but mistyped
  EXPECT_EQ(md.get_bool("t.u8").status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(md.get_f32("t.u8").status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(md.get_array<int32_t>("t.arr_f32").status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(md.get_array<int32_t>("t.arr_f32").status().message().find("array of f32"), std::string::npos);
  EXPECT_EQ(md.find("t.arr_i32")->array_size(), 3u);
  EXPECT_EQ(md.find("t.arr_i32")->elem_type(), ValueType::kI32);
  EXPECT_EQ(md.find("t.arr_i32")->type(), ValueType::kArray);
  EXPECT_EQ(md.find("t.arr_str")->to_display(), "[string x 3]");

  auto t = (*f)->tensor("blk.0.attn_q.weight");
  EXPECT_EQ(t.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(t.status().message().find("blk.0.attn_q.weight"), std::string::npos);

  Metadata m;
  m.set("a", 1u);
  m.set("b", 2u);
  m.set("a", 3u);  // replaces in place
  EXPECT_EQ(m.entries()[0].key, "a");
  EXPECT_EQ(*m.get_u32("a"), 3u);
  EXPECT_TRUE(m.erase("a"));
  EXPECT_FALSE(m.contains("a"));
  EXPECT_EQ(*m.get_u32("b"), 2u);
}

TEST(GgufRoundTrip, PagingHintsOnAMappedFile) {
  const std::string dir = testing::make_temp_dir("advise");
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor("big", TensorType::kF32, {1 << 16}, pattern(4 << 16, 3)).ok());
  ASSERT_TRUE(w.add_tensor("small", TensorType::kF32, {5}, pattern(20, 4)).ok());
  auto paths = w.write(dir + "/p.gguf");
  ASSERT_TRUE(paths.ok());
  auto f = GgufFile::open((*paths)[0]);
  ASSERT_TRUE(f.ok());
  const TensorInfo* big = (*f)->find_tensor("big");
  ASSERT_NE(big, nullptr);
  for (Access a : {Access::kSequential, Access::kRandom, Access::kNormal, Access::kWillNeed, Access::kDontNeed})
    EXPECT_TRUE((*f)->advise(*big, a).ok());
  const TensorInfo* both[] = {big, (*f)->find_tensor("small")};
  EXPECT_TRUE((*f)->prefetch(both).ok());
  // After touching every page the whole tensor is resident, and the bytes are intact after
  // kDontNeed dropped them (they come back from the file).
  uint64_t sum = 0;
  for (uint64_t i = 0; i < big->n_bytes; ++i) sum += static_cast<uint8_t>(big->data[i]);
  EXPECT_GT(sum, 0u);
  auto res = (*f)->resident_bytes(*big);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(*res, big->n_bytes);
  EXPECT_EQ(std::memcmp(big->data, w.tensors()[0].data.data(), big->n_bytes), 0);
  EXPECT_EQ((*f)->total_tensor_bytes(), (4u << 16) + 20u);
  EXPECT_EQ((*f)->path(0), (*paths)[0]);

  // The weights are not copied: the data pointer lies in a read-only mapping of the file.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool found = false;
  const auto addr = reinterpret_cast<uintptr_t>(big->data);
  while (std::getline(maps, line)) {
    if (line.find((*paths)[0]) == std::string::npos) continue;
    uintptr_t lo = 0, hi = 0;
    char perms[5] = {};
    ASSERT_EQ(std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms), 3);
    if (addr >= lo && addr + big->n_bytes <= hi) {
      found = true;
      EXPECT_EQ(perms[0], 'r');
      EXPECT_EQ(perms[1], '-') << "mapping must be read-only";
    }
  }
  EXPECT_TRUE(found) << "tensor data not inside a mapping of " << (*paths)[0];
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lattice::engine
