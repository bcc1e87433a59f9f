// make-model: the files it writes have the keys, tensors, types, weight scales and tokenizer
// data llama.cpp expects, deterministically.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_set>

#include "gguf_testlib.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/gguf/vocab_gen.h"
#include "lattice/engine/quant/quantize.h"

namespace lattice::engine {
namespace {

struct Made {
  std::vector<std::byte> bytes;
  std::unique_ptr<GgufFile> file;
};

Made make(const MakeModelOptions& o) {
  Made m;
  auto plan = plan_model(o);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (!plan.ok()) return m;
  WriteOptions wo;
  wo.version = o.version;
  auto bytes = plan->writer.write_to_memory(plan->fill, wo);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  if (!bytes.ok()) return m;
  m.bytes = std::move(*bytes);
  auto f = GgufFile::parse(m.bytes, "made.gguf");
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (f.ok()) m.file = std::move(*f);
  return m;
}

MakeModelOptions small(std::string arch, std::string type = "f32") {
  MakeModelOptions o;
  o.arch = std::move(arch);
  o.dim = 64;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 96;
  o.vocab = 400;
  o.type = std::move(type);
  o.seed = 7;
  o.threads = 2;
  return o;
}

std::vector<float> dequant(const TensorInfo& t) {
  std::vector<float> out(t.n_elems);
  const size_t rb = t.row_bytes();
  for (uint64_t r = 0; r < t.n_rows(); ++r) {
    Status s = dequantize_row(t.type, t.data + r * rb, out.data() + r * t.ne[0], t.ne[0]);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  return out;
}

void mean_std(const std::vector<float>& v, double& mean, double& std) {
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += double(x) * x;
  }
  mean = s / v.size();
  std = std::sqrt(std::max(0.0, s2 / v.size() - mean * mean));
}

TEST(GgufMakeModel, HyperparametersAndTensorTablePerArch) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    SCOPED_TRACE(arch);
    MakeModelOptions o = small(arch);
    if (std::string(arch) == "qwen3") o.head_dim = 32;  // qwen3 may decouple head_dim from dim/heads
    Made m = make(o);
    ASSERT_TRUE(m.file);
    const Metadata& md = m.file->metadata();
    const std::string a = arch;
    const uint32_t hd = o.head_dim ? o.head_dim : o.dim / o.heads;
    EXPECT_EQ(*md.get_string("general.architecture"), a);
    EXPECT_EQ(*md.get_u32(a + ".block_count"), 2u);
    EXPECT_EQ(*md.get_u32(a + ".embedding_length"), 64u);
    EXPECT_EQ(*md.get_u32(a + ".feed_forward_length"), 96u);
    EXPECT_EQ(*md.get_u32(a + ".attention.head_count"), 4u);
    EXPECT_EQ(*md.get_u32(a + ".attention.head_count_kv"), 2u);
    EXPECT_EQ(*md.get_u32(a + ".context_length"), 2048u);
    EXPECT_EQ(*md.get_u32(a + ".rope.dimension_count"), hd);
    EXPECT_EQ(md.find(a + ".block_count")->type(), ValueType::kU32);
    EXPECT_EQ(md.find(a + ".attention.layer_norm_rms_epsilon")->type(), ValueType::kF32);
    EXPECT_EQ(md.find(a + ".rope.freq_base")->type(), ValueType::kF32);
    EXPECT_EQ(*md.get_f32(a + ".rope.freq_base"), a == "llama" ? 10000.0f : 1e6f);
    if (a == "qwen3") {
      EXPECT_EQ(*md.get_u32("qwen3.attention.key_length"), 32u);
      EXPECT_EQ(*md.get_u32("qwen3.attention.value_length"), 32u);
    }
    EXPECT_EQ(*md.get_u32("general.file_type"), 0u);
    EXPECT_FALSE(md.contains(a + ".rope.scaling.type"));

    // The exact tensor table, in ggml order (ne[0] = n_in).
    std::map<std::string, std::vector<uint64_t>> want = {
        {"token_embd.weight", {64, 400}}, {"output_norm.weight", {64}}, {"output.weight", {64, 400}}};
    const uint64_t q = 4 * hd, kv = 2 * hd;
    for (int l = 0; l < 2; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      want[b + "attn_norm.weight"] = {64};
      want[b + "attn_q.weight"] = {64, q};
      want[b + "attn_k.weight"] = {64, kv};
      want[b + "attn_v.weight"] = {64, kv};
      want[b + "attn_output.weight"] = {q, 64};
      want[b + "ffn_norm.weight"] = {64};
      want[b + "ffn_gate.weight"] = {64, 96};
      want[b + "ffn_up.weight"] = {64, 96};
      want[b + "ffn_down.weight"] = {96, 64};
      if (a == "qwen2") {
        want[b + "attn_q.bias"] = {q};
        want[b + "attn_k.bias"] = {kv};
        want[b + "attn_v.bias"] = {kv};
      }
      if (a == "qwen3") {
        want[b + "attn_q_norm.weight"] = {hd};
        want[b + "attn_k_norm.weight"] = {hd};
      }
    }
    std::map<std::string, std::vector<uint64_t>> got;
    for (const auto& t : m.file->tensors()) {
      got[t.name] = std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims);
      EXPECT_EQ(t.type, TensorType::kF32) << t.name;
    }
    EXPECT_EQ(got, want);
  }
}

// llama.cpp's habits: norms and biases F32, the output Q6_K, Q4_K_M's attn_v/ffn_down Q6_K
// in the layers use_more_bits picks, and a fallback when a row is not a whole K block.
TEST(GgufMakeModel, WeightTypesFollowLlamaCppMixing) {
  MakeModelOptions o = small("qwen2", "q4_k_m");
  o.dim = 256;
  o.heads = 4;
  o.kv_heads = 4;
  o.ffn = 512;
  o.layers = 8;
  Made m = make(o);
  ASSERT_TRUE(m.file);
  EXPECT_EQ(*m.file->metadata().get_u32("general.file_type"), 15u);
  const std::set<int> more_bits = {0, 3, 6, 7};  // n/8 = 1: layer 0, layers >= 7, (l - 1) % 3 == 2
  for (const auto& t : m.file->tensors()) {
    SCOPED_TRACE(t.name);
    if (t.n_dims == 1) {
      EXPECT_EQ(t.type, TensorType::kF32);
      continue;
    }
    if (t.name == "output.weight") {
      EXPECT_EQ(t.type, TensorType::kQ6_K);
    } else if (t.name.ends_with("attn_v.weight") || t.name.ends_with("ffn_down.weight")) {
      const int layer = std::stoi(t.name.substr(4));
      EXPECT_EQ(t.type, more_bits.count(layer) ? TensorType::kQ6_K : TensorType::kQ4_K);
    } else {
      EXPECT_EQ(t.type, TensorType::kQ4_K);
    }
  }

  // --pure: every matrix in the one type; tied: the embedding takes the output's Q6_K.
  o.type = "q4_0";
  o.pure = true;
  Made p = make(o);
  ASSERT_TRUE(p.file);
  for (const auto& t : p.file->tensors()) {
    if (t.n_dims == 2) {
      EXPECT_EQ(t.type, TensorType::kQ4_0) << t.name;
    }
  }
  o.pure = false;
  o.tied = true;
  Made tied = make(o);
  ASSERT_TRUE(tied.file);
  EXPECT_EQ(tied.file->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(tied.file->find_tensor("token_embd.weight")->type, TensorType::kQ6_K);
  EXPECT_EQ(tied.file->find_tensor("blk.0.attn_q.weight")->type, TensorType::kQ4_0);

  // Rows of 64 are no whole Q4_K block: Q8_0 instead; rows of 48 not even a Q8_0 block: F16.
  MakeModelOptions f = small("llama", "q4_k");
  f.ffn = 48;
  Made fb = make(f);
  ASSERT_TRUE(fb.file);
  EXPECT_EQ(fb.file->find_tensor("blk.0.attn_q.weight")->type, TensorType::kQ8_0);
  EXPECT_EQ(fb.file->find_tensor("blk.0.ffn_down.weight")->type, TensorType::kF16);
}

TEST(GgufMakeModel, EveryTypeRoundTripsWithSensibleScale) {
  for (const char* type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"}) {
    SCOPED_TRACE(type);
    MakeModelOptions o = small("llama", type);
    o.dim = 256;
    o.ffn = 512;
    o.pure = true;
    Made m = make(o);
    ASSERT_TRUE(m.file);
    const auto want = parse_type_name(type);
    ASSERT_TRUE(want);
    EXPECT_EQ(m.file->find_tensor("blk.1.ffn_up.weight")->type, *want);
    double mean, std;
    // Projections: mean 0, std 1/sqrt(fan_in) (quantization error is well under 10%).
    mean_std(dequant(*m.file->find_tensor("blk.1.ffn_up.weight")), mean, std);
    EXPECT_NEAR(mean, 0.0, 0.01);
    EXPECT_NEAR(std, 1.0 / 16, 0.1 / 16);
    mean_std(dequant(*m.file->find_tensor("blk.0.ffn_down.weight")), mean, std);
    EXPECT_NEAR(std, 1.0 / std::sqrt(512.0), 0.1 / std::sqrt(512.0));
    mean_std(dequant(*m.file->find_tensor("token_embd.weight")), mean, std);
    EXPECT_NEAR(std, 1.0 / 16, 0.1 / 16);
    // Norms near 1.
    const auto norm = dequant(*m.file->find_tensor("blk.0.attn_norm.weight"));
    for (float x : norm) EXPECT_TRUE(x > 0.5f && x < 1.5f) << x;
    for (const auto& t : m.file->tensors())
      for (float x : dequant(t)) ASSERT_TRUE(std::isfinite(x)) << t.name;
  }
}

TEST(GgufMakeModel, DeterministicBySeedNotByThreads) {
  MakeModelOptions o = small("qwen3", "q4_0");
  o.dim = 128;
  o.threads = 1;
  Made a = make(o);
  o.threads = 3;
  Made b = make(o);
  EXPECT_EQ(a.bytes, b.bytes);
  o.seed = 8;
  Made c = make(o);
  ASSERT_EQ(a.bytes.size(), c.bytes.size());
  EXPECT_NE(a.bytes, c.bytes);
  // Distinct tensors get distinct values (no reused streams).
  const TensorInfo* q = a.file->find_tensor("blk.0.attn_q.weight");
  const TensorInfo* k = a.file->find_tensor("blk.1.attn_q.weight");
  EXPECT_NE(std::memcmp(q->data, k->data, q->n_bytes), 0);
}

TEST(GgufMakeModel, SentencePieceVocab) {
  for (uint32_t n : {300u, 1000u, 4000u}) {
    auto v = generate_vocab("llama", ChatStyle::kLlama2, n);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    ASSERT_EQ(v->tokens.size(), n);
    ASSERT_EQ(v->scores.size(), n);
    ASSERT_EQ(v->token_types.size(), n);
    EXPECT_EQ(v->tokens[0], "<unk>");
    EXPECT_EQ(v->tokens[1], "<s>");
    EXPECT_EQ(v->tokens[2], "</s>");
    EXPECT_EQ(v->token_types[0], 2);
    EXPECT_EQ(v->token_types[1], 3);
    EXPECT_EQ(v->tokens[3 + 0x0A], "<0x0A>");
    EXPECT_EQ(v->tokens[3 + 0xFF], "<0xFF>");
    for (int b = 0; b < 256; ++b) EXPECT_EQ(v->token_types[3 + b], 6);
    std::unordered_set<std::string> uniq(v->tokens.begin(), v->tokens.end());
    EXPECT_EQ(uniq.size(), n);
    for (size_t i = 259; i < n; ++i) {
      EXPECT_EQ(v->token_types[i], 1);
      if (i > 259) {
        EXPECT_LT(v->scores[i], v->scores[i - 1]);  // strictly by rank
      }
      EXPECT_FALSE(v->tokens[i].empty());
    }
    EXPECT_EQ(v->bos_id, 1u);
    EXPECT_EQ(v->eos_id, 2u);
    EXPECT_EQ(v->unk_id, 0u);
    EXPECT_TRUE(v->add_bos);
    EXPECT_TRUE(v->merges.empty());
    EXPECT_NE(v->chat_template.find("[INST]"), std::string::npos);
  }
  auto v = generate_vocab("llama", ChatStyle::kLlama2, 1000);
  const std::set<std::string> toks(v->tokens.begin(), v->tokens.end());
  EXPECT_TRUE(toks.count("\xe2\x96\x81the")) << "a frequent word of the text is a piece";
  EXPECT_TRUE(toks.count("\xe2\x96\x81"));
  EXPECT_TRUE(toks.count("e"));
}

// Applies merges by rank to a word, as a byte-level BPE tokenizer does: the oracle that the
// merge list and the vocabulary agree.
std::vector<std::string> bpe(const std::vector<std::string>& merges, std::vector<std::string> syms) {
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t i = 0; i < merges.size(); ++i) {
    const size_t sp = merges[i].find(' ');
    rank.emplace(std::make_pair(merges[i].substr(0, sp), merges[i].substr(sp + 1)), i);
  }
  for (;;) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = rank.find({syms[i], syms[i + 1]});
      if (it != rank.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == SIZE_MAX) return syms;
    syms[at] += syms[at + 1];
    syms.erase(syms.begin() + static_cast<ptrdiff_t>(at) + 1);
  }
}

TEST(GgufMakeModel, ByteLevelBpeVocab) {
  for (ChatStyle style : {ChatStyle::kChatML, ChatStyle::kLlama3}) {
    for (uint32_t n : {300u, 2000u, 20000u}) {
      SCOPED_TRACE(n);
      auto v = generate_vocab("gpt2", style, n);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      ASSERT_EQ(v->tokens.size(), n);
      std::unordered_map<std::string, size_t> id;
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(id.emplace(v->tokens[i], i).second) << "duplicate " << v->tokens[i];
      // The 256 byte symbols first, in byte order; GPT-2's map: 'A' is itself, ' ' is U+0120, '\n' U+010A.
      EXPECT_EQ(v->tokens['A'], "A");
      EXPECT_EQ(v->tokens[' '], "\xc4\xa0");
      EXPECT_EQ(v->tokens['\n'], "\xc4\x8a");
      EXPECT_EQ(v->tokens[0xAD], "\xc5\x83");  // the last non-printable byte maps to U+0143
      // Every merge joins two tokens into a third; merges and normal tokens correspond one to one.
      EXPECT_EQ(v->merges.size(), n - 256 - (style == ChatStyle::kChatML ? 3 : 5));
      for (const auto& m : v->merges) {
        const size_t sp = m.find(' ');
        ASSERT_NE(sp, std::string::npos);
        ASSERT_EQ(m.find(' ', sp + 1), std::string::npos) << m;
        ASSERT_TRUE(id.count(m.substr(0, sp))) << m;
        ASSERT_TRUE(id.count(m.substr(sp + 1))) << m;
        ASSERT_TRUE(id.count(m.substr(0, sp) + m.substr(sp + 1))) << m;
      }
      const std::string eos = v->tokens[v->eos_id];
      EXPECT_EQ(eos, style == ChatStyle::kChatML ? "<|im_end|>" : "<|eot_id|>");
      EXPECT_EQ(v->token_types[v->eos_id], 3);
      EXPECT_EQ(v->pre, style == ChatStyle::kChatML ? "qwen2" : "llama-bpe");
      EXPECT_NE(v->chat_template.find(style == ChatStyle::kChatML ? "<|im_start|>" : "<|start_header_id|>"),
                std::string::npos);
      // Words of the training text end as single tokens once the vocab is big enough.
      std::vector<std::string> word;
      for (char c : std::string(" the")) word.push_back(gpt2_byte_symbol(static_cast<uint8_t>(c)));
      auto out = bpe(v->merges, word);
      for (const auto& s : out) EXPECT_TRUE(id.count(s)) << s;
      if (n >= 2000) {
        EXPECT_EQ(out.size(), 1u);
      }
    }
  }
}

TEST(GgufMakeModel, TokenizerKeysInTheFile) {
  Made q = make(small("qwen2"));
  ASSERT_TRUE(q.file);
  const Metadata& md = q.file->metadata();
  EXPECT_EQ(*md.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*md.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ((*md.get_array<std::string>("tokenizer.ggml.tokens"))->size(), 400u);
  EXPECT_EQ((*md.get_array<float>("tokenizer.ggml.scores"))->size(), 400u);
  EXPECT_EQ((*md.get_array<int32_t>("tokenizer.ggml.token_type"))->size(), 400u);
  EXPECT_TRUE(md.get_array<std::string>("tokenizer.ggml.merges").ok());
  EXPECT_EQ(md.find("tokenizer.ggml.bos_token_id")->type(), ValueType::kU32);
  EXPECT_EQ(md.find("tokenizer.ggml.eos_token_id")->type(), ValueType::kU32);
  EXPECT_EQ(md.find("tokenizer.ggml.add_bos_token")->type(), ValueType::kBool);
  EXPECT_FALSE(*md.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_NE(md.get_string("tokenizer.chat_template")->find("<|im_start|>"), std::string::npos);

  MakeModelOptions scaled = small("llama");
  scaled.rope_scale = 4;
  Made sc = make(scaled);
  ASSERT_TRUE(sc.file);
  EXPECT_EQ(*sc.file->metadata().get_string("llama.rope.scaling.type"), "linear");
  EXPECT_EQ(*sc.file->metadata().get_f32("llama.rope.scaling.factor"), 4.0f);

  Made l = make(small("llama"));
  ASSERT_TRUE(l.file);
  EXPECT_EQ(*l.file->metadata().get_string("tokenizer.ggml.model"), "llama");
  EXPECT_FALSE(l.file->metadata().contains("tokenizer.ggml.merges"));
  EXPECT_EQ(*l.file->metadata().get_u32("tokenizer.ggml.unknown_token_id"), 0u);
  MakeModelOptions o = small("llama");
  o.tokenizer = "gpt2";
  Made l3 = make(o);
  ASSERT_TRUE(l3.file);
  EXPECT_EQ(*l3.file->metadata().get_string("tokenizer.ggml.pre"), "llama-bpe");
}

TEST(GgufMakeModel, OptionErrorsNameTheFlag) {
  auto expect_bad = [](MakeModelOptions o, const std::string& flag) {
    auto p = plan_model(o);
    ASSERT_FALSE(p.ok()) << flag;
    EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(flag), std::string::npos) << p.status().message();
  };
  MakeModelOptions o = small("llama");
  o.arch = "gpt-j";
  expect_bad(o, "--arch");
  o = small("llama");
  o.kv_heads = 3;
  expect_bad(o, "--kv-heads");
  o = small("llama");
  o.heads = 5;
  expect_bad(o, "--heads");
  o = small("llama");
  o.type = "q3_k";
  expect_bad(o, "--type");
  o = small("llama");
  o.vocab = 100;
  expect_bad(o, "--vocab");
  o = small("qwen2");
  o.vocab = 258;
  expect_bad(o, "--vocab");
  o = small("llama");
  o.tokenizer = "wordpiece";
  expect_bad(o, "--tokenizer");
  o = small("llama");
  o.layers = 0;
  expect_bad(o, "--layers");
  o = small("llama");
  o.experts = 4, o.experts_used = 2, o.expert_ffn = 32;  // --ffn 96: two widths, one key
  expect_bad(o, "--expert-ffn");
}

// A llama (Mixtral) mixture of experts has one width key: --expert-ffn alone sets it, so the
// experts' tensors are as wide as the file says.
TEST(GgufMakeModel, MixtralExpertWidthIsTheFilesFeedForwardLength) {
  MakeModelOptions o = small("llama");
  o.ffn = 0;
  o.experts = 4, o.experts_used = 2, o.expert_ffn = 32;
  Made m = make(o);
  ASSERT_TRUE(m.file);
  EXPECT_EQ(*m.file->metadata().get_u32("llama.feed_forward_length"), 32u);
  const TensorInfo* gate = m.file->find_tensor("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->ne[0], 64u);
  EXPECT_EQ(gate->ne[1], 32u);
  EXPECT_EQ(gate->ne[2], 4u);
}

TEST(GgufMakeModel, WritesFilesV2AndSplitSets) {
  const std::string dir = testing::make_temp_dir("make");
  MakeModelOptions o = small("qwen2", "q8_0");
  o.version = 2;
  auto one = make_model(o, dir + "/one.gguf");
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto f = GgufFile::open(one->paths[0]);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->total_tensor_bytes(), one->n_bytes);
  auto layer1 = (*f)->tensors_with_prefix("blk.1.");
  ASSERT_EQ(layer1.size(), 12u);  // qwen2: 9 + 3 biases
  for (const TensorInfo* t : layer1) EXPECT_TRUE(t->name.starts_with("blk.1.")) << t->name;
  EXPECT_TRUE((*f)->prefetch(layer1).ok());

  o.version = 3;
  o.max_tensors_per_file = 7;
  auto split = make_model(o, dir + "/split.gguf");
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  EXPECT_EQ(split->paths.size(), 4u);  // 27 tensors
  auto s = GgufFile::open(split->paths[0]);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ((*s)->n_files(), 4u);
  ASSERT_EQ((*s)->tensors().size(), (*f)->tensors().size());
  for (size_t i = 0; i < (*f)->tensors().size(); ++i) {
    const TensorInfo& a = (*f)->tensors()[i];
    const TensorInfo* b = (*s)->find_tensor(a.name);
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(a.n_bytes, b->n_bytes);
    EXPECT_EQ(std::memcmp(a.data, b->data, a.n_bytes), 0) << a.name;  // same seed, same weights
  }

  o.max_tensors_per_file = 0;
  o.max_bytes_per_file = 16 << 10;
  auto by_size = make_model(o, dir + "/bysize.gguf");
  ASSERT_TRUE(by_size.ok()) << by_size.status().to_string();
  auto z = GgufFile::open(by_size->paths[0]);
  ASSERT_TRUE(z.ok()) << z.status().to_string();
  EXPECT_EQ((*z)->n_files(), by_size->paths.size());
  EXPECT_GT((*z)->n_files(), 2u);
  std::vector<uint64_t> per_file((*z)->n_files()), per_file_count((*z)->n_files());
  for (const auto& t : (*z)->tensors()) {
    per_file[t.file_index] += (t.n_bytes + 31) / 32 * 32;
    per_file_count[t.file_index]++;
  }
  for (size_t i = 0; i < per_file.size(); ++i)
    EXPECT_TRUE(per_file[i] <= (16u << 10) || per_file_count[i] == 1) << i << ": " << per_file[i];
  std::filesystem::remove_all(dir);
}

// The benchmark model's shape (TinyLlama 1.1B) planned without writing: the parameter count.
TEST(GgufMakeModel, BenchmarkShapeParameterCount) {
  MakeModelOptions o;
  o.arch = "llama";
  o.dim = 2048;
  o.layers = 22;
  o.heads = 32;
  o.kv_heads = 4;
  o.ffn = 5632;
  o.vocab = 32000;
  o.type = "q4_0";
  auto p = plan_model(o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const uint64_t per_layer = 2 * 2048 + 2048ull * 2048 * 2 + 2048ull * 256 * 2 + 3ull * 2048 * 5632;
  EXPECT_EQ(p->n_params, 2 * 32000ull * 2048 + 2048 + 22 * per_layer);
  EXPECT_EQ(p->writer.tensors().size(), 3u + 22 * 9);
}

}  // namespace
}  // namespace lattice::engine
