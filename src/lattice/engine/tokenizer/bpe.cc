// Byte-level BPE ("gpt2" vocabularies): pre-tokenize, map each word's bytes to the
// byte-level alphabet, then repeatedly merge the adjacent pair with the lowest merge rank
// (ties: the leftmost pair). A min-heap of candidate pairs keeps this O(n log n) per word;
// stale candidates are recognised by their recorded side lengths.
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lattice/engine/tokenizer/tokenizer.h"
#include "lattice/engine/tokenizer/unicode.h"

namespace lattice::engine {
namespace {

struct Symbol {
  int prev, next;
  size_t offset, n_bytes;  // n_bytes 0: merged into its left neighbour
};

struct Candidate {
  int left, right;
  int rank;
  size_t left_bytes, right_bytes;  // the sides as they were when the pair was found
};

struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    // priority_queue pops the "largest": lower rank first, then the smaller left index.
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

int Tokenizer::bpe_rank(std::string_view left, std::string_view right) const {
  thread_local std::string key;
  key.assign(left);
  key.push_back('\0');
  key.append(right);
  auto it = merge_rank_.find(key);
  return it == merge_rank_.end() ? -1 : it->second;
}

void Tokenizer::bpe_word(const std::string& word, std::vector<TokenId>& out) const {
  if (ignore_merges_) {
    if (TokenId id = find_token(word); id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  const std::string_view text = word;
  std::vector<Symbol> syms;
  syms.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(unicode::utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const int idx = static_cast<int>(syms.size());
    syms.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
    off += len;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> heap;
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = syms[left];
    const Symbol& r = syms[right];
    const int rank = bpe_rank(text.substr(l.offset, l.n_bytes), text.substr(r.offset, r.n_bytes));
    if (rank < 0) return;
    heap.push({left, right, rank, l.n_bytes, r.n_bytes});
  };
  for (int i = 1; i < static_cast<int>(syms.size()); ++i) consider(i - 1, i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = syms[c.left];
    Symbol& r = syms[c.right];
    if (l.n_bytes != c.left_bytes || r.n_bytes != c.right_bytes || r.n_bytes == 0) continue;  // stale
    l.n_bytes += r.n_bytes;
    r.n_bytes = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
    const std::string_view piece = text.substr(syms[i].offset, syms[i].n_bytes);
    if (TokenId id = find_token(piece); id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // A merge whose result is not in the vocabulary: llama.cpp then looks up each byte of
    // the piece on its own (only ASCII symbols can match); do the same to stay in step.
    for (char b : piece) {
      if (TokenId id = find_token(std::string_view(&b, 1)); id != kNoToken) out.push_back(id);
    }
  }
}

// Words repeat (" the", "\n", "    "): within one call each distinct word is merged once and
// its ids copied after that. The cache lives in the call, so the Tokenizer stays immutable.
void Tokenizer::encode_bpe(std::string_view text, std::vector<TokenId>& out) const {
  const std::vector<std::string> words = pre_tokenize(pre_, text);
  if (words.size() < 64) {
    for (const std::string& word : words) bpe_word(unicode::bytes_to_bpe_text(word), out);
    return;
  }
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> seen;  // word -> ids in `out`
  seen.reserve(words.size() / 4);
  for (const std::string& word : words) {
    auto [it, fresh] = seen.try_emplace(word, out.size(), 0);
    if (!fresh) {
      const auto [begin, count] = it->second;
      for (size_t i = 0; i < count; ++i) out.push_back(out[begin + i]);
      continue;
    }
    bpe_word(unicode::bytes_to_bpe_text(word), out);
    it->second.second = out.size() - it->second.first;
  }
}

}  // namespace lattice::engine
