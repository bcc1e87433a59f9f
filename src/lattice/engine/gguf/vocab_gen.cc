// Deterministic BPE training for generated models' tokenizers (see vocab_gen.h).
#include "lattice/engine/gguf/vocab_gen.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

namespace lattice::engine {

namespace {

// Written for lattice; plain prose with a little of everything a tokenizer meets.
constexpr std::string_view kText = R"(The small cluster sat on a wooden desk near the window. Four machines, each with a fan
that hummed a different note, were joined by short cables and a single switch. When the first
request arrived, the scheduler split the model into layers and gave every machine its share.
The answer came back in less than a second, and the people in the room smiled at each other.

A language model reads text as a sequence of tokens. Each token is a short piece of a word,
a whole word, a number, or a mark such as a comma, a period, or a question mark. The model
looks at the tokens it has seen so far and predicts the next one. Then it adds that token to
the sequence and does the same thing again, one step at a time, until the reply is finished.

In the morning the weather was cold and clear. By noon the sun had warmed the garden, and the
birds were singing in the trees. She walked to the market, bought bread, apples, cheese and
three bottles of water, and then she went home by the river path, where the water was calm.

Numbers matter too: 1, 2, 3, 4, 5, 6, 7, 8, 9 and 10. The year 2024 had 366 days. A kilobyte
holds 1024 bytes, and 64 times 64 is 4096. Is it true that 7 + 5 = 12? Yes, it is!

"Where are you going?" asked the old man. "To the library," said the girl, "because I want to
learn how computers think." He laughed and told her that computers do not think; they follow
instructions, very quickly and very carefully, and they never get tired of doing the same work.

Good software is written to be read by other people. Names should say what things are, tests
should fail when the code is wrong, and errors should explain what went wrong and where. When
something breaks, the message ought to name the file, the key, or the tensor, and the reason.

The network between the machines is the slowest part of the system, so the engineers measured
every link, every copy and every wait. They learned that sending fewer, larger messages was
better than sending many small ones, and that the fastest transfer is the one you never make.

Once upon a time there was a quiet village between two hills. The people there grew wheat and
kept bees, and every summer they held a festival with music, dancing and long tables of food.
Children ran between the tables, dogs slept in the shade, and the evening ended with stories.
)";

bool is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Pre-tokenization close to what GPT-2-style regexes do: an optional leading space joined to
// a run of letters, a single digit, or a run of punctuation; whitespace runs on their own.
std::vector<std::string> pretokenize(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == ' ' && i + 1 < text.size() && !is_space(static_cast<unsigned char>(text[i + 1]))) {
      ++i;
      c = static_cast<unsigned char>(text[i]);
    }
    if (is_letter(c)) {
      while (i < text.size() && is_letter(static_cast<unsigned char>(text[i]))) ++i;
    } else if (is_digit(c)) {
      ++i;
    } else if (is_space(c)) {
      while (i < text.size() && is_space(static_cast<unsigned char>(text[i]))) ++i;
    } else {
      while (i < text.size() && !is_letter(static_cast<unsigned char>(text[i])) &&
             !is_digit(static_cast<unsigned char>(text[i])) && !is_space(static_cast<unsigned char>(text[i])))
        ++i;
    }
    out.emplace_back(text.substr(start, i - start));
  }
  return out;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

const std::string kSpmSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's word marker

struct Word {
  std::vector<std::string> symbols;
  int64_t count = 0;
};

// Counted words, each split into initial symbols.
std::vector<Word> spm_words() {
  std::unordered_map<std::string, size_t> index;
  std::vector<Word> words;
  for (const std::string& pt : pretokenize(kText)) {
    if (is_space(static_cast<unsigned char>(pt[0])) && pt.find_first_not_of(" \n\t\r") == std::string::npos) continue;
    std::vector<std::string> syms;
    size_t k = 0;
    if (pt[0] == ' ') {
      syms.push_back(kSpmSpace);
      k = 1;
    }
    for (; k < pt.size(); ++k) syms.emplace_back(1, pt[k]);
    std::string key;
    for (auto& s : syms) key += s;
    auto [it, fresh] = index.emplace(key, words.size());
    if (fresh) words.push_back({std::move(syms), 0});
    words[it->second].count++;
  }
  return words;
}

std::vector<Word> gpt2_words() {
  std::unordered_map<std::string, size_t> index;
  std::vector<Word> words;
  for (const std::string& pt : pretokenize(kText)) {
    std::vector<std::string> syms;
    for (char c : pt) syms.push_back(gpt2_byte_symbol(static_cast<uint8_t>(c)));
    auto [it, fresh] = index.emplace(pt, words.size());
    if (fresh) words.push_back({std::move(syms), 0});
    words[it->second].count++;
  }
  return words;
}

struct Merge {
  std::string a, b;
};

// Greedy BPE: repeatedly merge the most frequent adjacent pair (ties: the smallest pair in
// byte order), while it occurs at least twice, up to `max_merges`.
std::vector<Merge> train(std::vector<Word> words, size_t max_merges) {
  std::vector<Merge> merges;
  while (merges.size() < max_merges) {
    std::unordered_map<std::string, int64_t> counts;  // "a\x00b"
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
        std::string key = w.symbols[i];
        key += '\0';
        key += w.symbols[i + 1];
        counts[key] += w.count;
      }
    const std::string* best = nullptr;
    int64_t best_n = 0;
    for (const auto& [k, n] : counts)
      if (n > best_n || (n == best_n && best && k < *best)) {
        best = &k;
        best_n = n;
      }
    if (!best || best_n < 2) break;
    const size_t sep = best->find('\0');
    Merge m{best->substr(0, sep), best->substr(sep + 1)};
    for (Word& w : words) {
      std::vector<std::string> out;
      out.reserve(w.symbols.size());
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == m.a && w.symbols[i + 1] == m.b) {
          out.push_back(m.a + m.b);
          ++i;
        } else {
          out.push_back(w.symbols[i]);
        }
      }
      w.symbols = std::move(out);
    }
    merges.push_back(std::move(m));
  }
  return merges;
}

// Further tokens past what the text supports: a word-start token followed by a word-inner one.
template <class OnNew>
void pad_with_concatenations(std::vector<std::string>& pieces, std::unordered_set<std::string>& seen,
                             const std::string& marker, size_t want, OnNew on_new) {
  std::vector<std::string> tails;
  for (const auto& p : pieces)
    if (!p.starts_with(marker)) tails.push_back(p);
  if (tails.empty()) tails.push_back("e");
  size_t i = 0, j = 0;
  while (pieces.size() < want) {
    if (i >= pieces.size()) break;  // cannot happen: every round adds candidates
    const std::string a = pieces[i];
    const std::string& b = tails[j];
    if (++j == tails.size()) {
      j = 0;
      ++i;
    }
    if (!a.starts_with(marker)) continue;
    std::string c = a + b;
    if (seen.insert(c).second) {
      pieces.push_back(c);
      on_new(a, b);
    }
  }
}

constexpr std::string_view kChatMLTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

constexpr std::string_view kLlama3Template =
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

constexpr std::string_view kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] %}"
    "{% set rest = messages[1:] %}{% else %}{% set system = '' %}{% set rest = messages %}{% endif %}"
    "{% for message in rest %}{% if message['role'] == 'user' %}"
    "{% if loop.first and system != '' %}{{ bos_token + '[INST] <<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + "
    "message['content'] + ' [/INST]' }}{% else %}{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% endif %}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + ' ' + eos_token }}"
    "{% endif %}{% endfor %}";

std::vector<std::string> gpt2_specials(ChatStyle style) {
  if (style == ChatStyle::kLlama3)
    return {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  return {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
}

std::string_view template_for(ChatStyle style) {
  switch (style) {
    case ChatStyle::kLlama2: return kLlama2Template;
    case ChatStyle::kLlama3: return kLlama3Template;
    case ChatStyle::kChatML: return kChatMLTemplate;
  }
  return kChatMLTemplate;
}

constexpr uint32_t kSpmFixed = 3 + 256;

Result<GeneratedVocab> spm_vocab(ChatStyle style, uint32_t vocab_size) {
  GeneratedVocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {int32_t(TokenType::kUnknown), int32_t(TokenType::kControl), int32_t(TokenType::kControl)};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.emplace_back(buf);
    v.token_types.push_back(int32_t(TokenType::kByte));
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  const size_t budget = vocab_size - kSpmFixed;

  std::vector<Word> words = spm_words();
  // Single characters by frequency (ties by byte order), the word marker first.
  std::unordered_map<std::string, int64_t> char_count;
  for (const Word& w : words)
    for (const auto& s : w.symbols) char_count[s] += w.count;
  std::vector<std::pair<std::string, int64_t>> chars(char_count.begin(), char_count.end());
  std::sort(chars.begin(), chars.end(), [](const auto& x, const auto& y) {
    if ((x.first == kSpmSpace) != (y.first == kSpmSpace)) return x.first == kSpmSpace;
    return x.second != y.second ? x.second > y.second : x.first < y.first;
  });
  if (chars.size() > budget) chars.resize(budget);  // the rest fall back to byte tokens

  std::unordered_set<std::string> seen;
  for (const auto& c : chars) seen.insert(c.first);
  std::vector<std::string> pieces;  // becomes [trained..., chars..., fillers...]
  for (const Merge& m : train(std::move(words), budget - chars.size())) {
    std::string t = m.a + m.b;
    if (seen.insert(t).second) pieces.push_back(std::move(t));
  }
  const size_t n_trained = pieces.size();
  for (const auto& c : chars) pieces.push_back(c.first);
  pad_with_concatenations(pieces, seen, kSpmSpace, budget, [](const auto&, const auto&) {});
  // Trained pieces, then fillers, score by rank; single characters score lowest.
  std::vector<std::string> ordered(pieces.begin(), pieces.begin() + static_cast<ptrdiff_t>(n_trained));
  ordered.insert(ordered.end(), pieces.begin() + static_cast<ptrdiff_t>(n_trained + chars.size()), pieces.end());
  for (const auto& c : chars) ordered.push_back(c.first);
  size_t rank = 0;
  for (const auto& p : ordered) {
    v.tokens.push_back(p);
    v.token_types.push_back(int32_t(TokenType::kNormal));
    v.scores.push_back(-static_cast<float>(rank++));
  }
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_eos = false;
  v.chat_template = std::string(kLlama2Template);  // the SPM vocab has no ChatML/Llama-3 specials
  if (v.tokens.size() != vocab_size)
    return Internal("spm vocab came out with " + std::to_string(v.tokens.size()) + " tokens, wanted " +
                    std::to_string(vocab_size));
  return v;
}

Result<GeneratedVocab> gpt2_vocab(ChatStyle style, uint32_t vocab_size) {
  GeneratedVocab v;
  v.model = "gpt2";
  v.pre = style == ChatStyle::kLlama3 ? "llama-bpe" : "qwen2";
  const std::vector<std::string> specials = gpt2_specials(style);
  const size_t budget = vocab_size - 256 - specials.size();
  std::unordered_set<std::string> seen;
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) {
    pieces.push_back(gpt2_byte_symbol(static_cast<uint8_t>(b)));
    seen.insert(pieces.back());
  }
  for (const Merge& m : train(gpt2_words(), budget)) {
    std::string t = m.a + m.b;
    if (seen.insert(t).second) {
      pieces.push_back(std::move(t));
      v.merges.push_back(m.a + " " + m.b);
    }
  }
  pad_with_concatenations(pieces, seen, gpt2_byte_symbol(' '), 256 + budget,
                          [&](const std::string& a, const std::string& b) { v.merges.push_back(a + " " + b); });
  for (size_t i = 0; i < pieces.size(); ++i) {
    v.tokens.push_back(pieces[i]);
    v.token_types.push_back(int32_t(TokenType::kNormal));
    v.scores.push_back(i < 256 ? 0.0f : -static_cast<float>(i - 256));
  }
  const uint32_t first_special = static_cast<uint32_t>(v.tokens.size());
  for (const auto& s : specials) {
    v.tokens.push_back(s);
    v.token_types.push_back(int32_t(TokenType::kControl));
    v.scores.push_back(0.0f);
  }
  if (style == ChatStyle::kLlama3) {
    v.bos_id = first_special + 0;  // <|begin_of_text|>
    v.eos_id = first_special + 4;  // <|eot_id|>
    v.pad_id = first_special + 1;  // <|end_of_text|>
    v.add_bos = true;
  } else {
    v.bos_id = first_special + 0;  // <|endoftext|>
    v.eos_id = first_special + 2;  // <|im_end|>
    v.pad_id = first_special + 0;
    v.add_bos = false;
  }
  v.chat_template = std::string(template_for(style == ChatStyle::kLlama2 ? ChatStyle::kChatML : style));
  if (v.tokens.size() != vocab_size)
    return Internal("gpt2 vocab came out with " + std::to_string(v.tokens.size()) + " tokens, wanted " +
                    std::to_string(vocab_size));
  return v;
}

}  // namespace

std::string gpt2_byte_symbol(uint8_t b) {
  // Printable bytes stand for themselves; the others are shifted to U+0100 and up in order.
  auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  if (printable(b)) return utf8(b);
  uint32_t n = 0;
  for (int x = 0; x < b; ++x)
    if (!printable(x)) ++n;
  return utf8(256 + n);
}

std::string_view vocab_training_text() { return kText; }

uint32_t min_vocab_size(std::string_view model, ChatStyle style) {
  if (model == "llama") return kSpmFixed + 1;
  return static_cast<uint32_t>(256 + gpt2_specials(style).size());
}

Result<GeneratedVocab> generate_vocab(std::string_view model, ChatStyle style, uint32_t vocab_size) {
  if (model != "llama" && model != "gpt2")
    return InvalidArgument("tokenizer model must be 'llama' or 'gpt2', not '" + std::string(model) + "'");
  const uint32_t min = min_vocab_size(model, style);
  if (vocab_size < min)
    return InvalidArgument("vocab size " + std::to_string(vocab_size) + " is below the minimum " + std::to_string(min) +
                           " for a " + std::string(model) + " tokenizer");
  return model == "llama" ? spm_vocab(style, vocab_size) : gpt2_vocab(style, vocab_size);
}

}  // namespace lattice::engine
