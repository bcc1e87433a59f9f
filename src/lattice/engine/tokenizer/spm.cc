// SentencePiece-style BPE ("llama" vocabularies): start from UTF-8 characters, repeatedly
// merge the adjacent pair whose concatenation is the token with the highest score (ties:
// the leftmost pair), and emit each final piece as its token or, failing that, as byte
// tokens <0xXX>. A max-heap of candidate pairs keeps this O(n log n); stale candidates (a
// side already merged into something else) are recognised by their recorded length.
#include <queue>
#include <string>
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
  float score;
  size_t n_bytes;  // of the merged text, to detect stale candidates
};

struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    // priority_queue pops the "largest": higher score first, then the smaller left index.
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

TokenId Tokenizer::spm_byte_token(uint8_t byte) const {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char name[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  if (TokenId id = find_token(std::string_view(name, 6)); id != kNoToken) return id;
  if (TokenId id = find_token(std::string_view(reinterpret_cast<const char*>(&byte), 1)); id != kNoToken) return id;
  return unk_;
}

void Tokenizer::encode_spm(std::string_view text, std::vector<TokenId>& out) const {
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
    const size_t len = syms[left].n_bytes + syms[right].n_bytes;
    const TokenId id = find_token(text.substr(syms[left].offset, len));
    if (id == kNoToken) return;
    heap.push({left, right, scores_[id], len});
  };
  for (int i = 1; i < static_cast<int>(syms.size()); ++i) consider(i - 1, i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = syms[c.left];
    Symbol& r = syms[c.right];
    if (l.n_bytes == 0 || r.n_bytes == 0 || l.n_bytes + r.n_bytes != c.n_bytes) continue;  // stale
    l.n_bytes += r.n_bytes;
    r.n_bytes = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  // Every merged piece is a token by construction; single characters may not be.
  for (int i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
    const std::string_view piece = text.substr(syms[i].offset, syms[i].n_bytes);
    if (TokenId id = find_token(piece); id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (char b : piece) {
      const TokenId id = spm_byte_token(static_cast<uint8_t>(b));
      if (id != kNoToken) out.push_back(id);
    }
  }
}

}  // namespace lattice::engine
