#include "lattice/train/bpe.h"

#include <map>
#include <queue>
#include <unordered_map>

#include "lattice/engine/gguf/vocab_gen.h"

namespace lattice::train {

Result<engine::Tokenizer> BpeVocab::tokenizer() const {
  engine::TokenizerSpec spec;
  spec.model = "gpt2";
  spec.pre = pre;
  spec.tokens = tokens;
  spec.merges = merges;
  spec.token_types.assign(tokens.size(), static_cast<int32_t>(engine::TokenKind::kNormal));
  spec.token_types[eos_id] = static_cast<int32_t>(engine::TokenKind::kControl);
  spec.bos_id = eos_id;
  spec.eos_id = eos_id;
  spec.add_bos = false;
  spec.add_eos = false;
  return engine::Tokenizer::create(std::move(spec));
}

namespace {

using Pair = std::pair<int32_t, int32_t>;

struct PairHash {
  size_t operator()(const Pair& p) const { return std::hash<uint64_t>{}((uint64_t(uint32_t(p.first)) << 32) | uint32_t(p.second)); }
};

struct Word {
  std::vector<int32_t> syms;
  uint64_t count = 0;
};

}  // namespace

Result<BpeVocab> train_bpe(std::string_view corpus, uint32_t vocab_size, std::string pre) {
  if (vocab_size < 257) return InvalidArgument("vocab size " + std::to_string(vocab_size) + " is below 257 (the bytes and <|endoftext|>)");
  LATTICE_ASSIGN_OR_RETURN(engine::PreTokenizer pt, engine::pre_tokenizer_from_name(pre));
  BpeVocab out;
  out.pre = pre;
  for (int b = 0; b < 256; ++b) {
    out.tokens.push_back(engine::gpt2_byte_symbol(static_cast<uint8_t>(b)));
  }
  // Count words; a std::map keeps the word order (and so the result) independent of hashing.
  std::map<std::string, uint64_t> counts;
  for (std::string& w : engine::pre_tokenize(pt, corpus)) ++counts[std::move(w)];
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [w, n] : counts) {
    Word word;
    word.count = n;
    for (char ch : w) word.syms.push_back(static_cast<uint8_t>(ch));
    words.push_back(std::move(word));
  }
  std::unordered_map<Pair, int64_t, PairHash> pair_count;
  std::unordered_map<Pair, std::vector<uint32_t>, PairHash> where;  // words that had the pair (may be stale)
  for (uint32_t wi = 0; wi < words.size(); ++wi) {
    const Word& w = words[wi];
    for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
      const Pair p{w.syms[i], w.syms[i + 1]};
      pair_count[p] += static_cast<int64_t>(w.count);
      auto& list = where[p];
      if (list.empty() || list.back() != wi) list.push_back(wi);
    }
  }
  // Max-heap of (count, -first, -second) with lazy deletion: an entry is current only if its
  // count is the pair's count now.
  using Entry = std::tuple<int64_t, int32_t, int32_t>;
  std::priority_queue<Entry> heap;
  for (const auto& [p, n] : pair_count) heap.push({n, -p.first, -p.second});
  // Two merges can spell the same string ("ab c" and "a bc"): the second maps to the first's
  // token (llama.cpp looks merge results up by text), so tokens stay unique.
  std::unordered_map<std::string, int32_t> id_of;
  for (int32_t b = 0; b < 256; ++b) id_of[out.tokens[b]] = b;
  while (out.tokens.size() + 1 < vocab_size && !heap.empty()) {
    const auto [n, na, nb] = heap.top();
    heap.pop();
    const Pair p{-na, -nb};
    auto it = pair_count.find(p);
    if (it == pair_count.end() || it->second != n) continue;
    if (n < 2) break;
    const std::string spelled = out.tokens[p.first] + out.tokens[p.second];
    out.merges.push_back(out.tokens[p.first] + " " + out.tokens[p.second]);
    auto [known, fresh] = id_of.try_emplace(spelled, static_cast<int32_t>(out.tokens.size()));
    if (fresh) out.tokens.push_back(spelled);
    const int32_t id = known->second;
    std::unordered_map<Pair, int64_t, PairHash> delta;
    const std::vector<uint32_t> list = std::move(where[p]);
    where.erase(p);
    for (uint32_t wi : list) {
      Word& w = words[wi];
      const auto c = static_cast<int64_t>(w.count);
      bool has = false;
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) has |= w.syms[i] == p.first && w.syms[i + 1] == p.second;
      if (!has) continue;
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) delta[{w.syms[i], w.syms[i + 1]}] -= c;
      std::vector<int32_t> merged;
      merged.reserve(w.syms.size());
      for (size_t i = 0; i < w.syms.size(); ++i) {
        if (i + 1 < w.syms.size() && w.syms[i] == p.first && w.syms[i + 1] == p.second) {
          merged.push_back(id);
          ++i;
        } else {
          merged.push_back(w.syms[i]);
        }
      }
      w.syms = std::move(merged);
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
        const Pair q{w.syms[i], w.syms[i + 1]};
        delta[q] += c;
        auto& l = where[q];
        if (l.empty() || l.back() != wi) l.push_back(wi);
      }
    }
    for (const auto& [q, d] : delta) {
      if (d == 0) continue;
      int64_t& cur = pair_count[q];
      cur += d;
      if (cur <= 0) {
        pair_count.erase(q);
      } else {
        heap.push({cur, -q.first, -q.second});
      }
    }
  }
  out.eos_id = static_cast<uint32_t>(out.tokens.size());
  out.tokens.push_back("<|endoftext|>");
  return out;
}

}  // namespace lattice::train
