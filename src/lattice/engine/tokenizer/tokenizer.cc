// Tokenizer construction, special-token partitioning, decoding. The two merge algorithms
// live in spm.cc and bpe.cc.
#include "lattice/engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "lattice/core/log.h"
#include "lattice/engine/tokenizer/unicode.h"

namespace lattice::engine {
namespace {

bool one_of(std::string_view s, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

// Token texts that end a turn in the common chat formats; llama.cpp treats them as
// end-of-generation (and as control tokens) whatever the file says.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
    "[EOT]", "[EOS]",  // Kimi K2
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>"};  // DeepSeek's EOS
constexpr std::string_view kEotTexts[] = {"<|eot_id|>",   "<|im_end|>", "<|end|>", "<end_of_turn>",
                                          "<|endoftext|>", "<EOT>",     "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>"};

// Parses "<0xAB>"; -1 if the text is not of that form.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (char c : text.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else return -1;
  }
  return v;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) {
    out.append(s, at, hit - at);
    out.append(to);
  }
  out.append(s, at, std::string::npos);
  s.swap(out);
}

// llama.cpp's clean_up_tokenization_spaces: " ?" " !" " ." " ," lose the space, a lone
// apostrophe between spaces loses both, " 's" " 'm" " 're" " 've" lose the space. Done in
// place, in three passes, exactly as the reference does (order matters for overlaps).
void clean_spaces(std::string& t) {
  size_t n = t.size();
  if (n == 0) return;
  size_t w = 1;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --w;
    t[w++] = x;
  }
  n = w;
  w = 1;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
      --w;
      t[++i] = '\0';
    }
    t[w++] = x;
  }
  n = w;
  w = 1;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
      const char x1 = t[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --w;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
        const char x2 = t[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --w;
      }
    }
    t[w++] = x;
  }
  t.resize(w);
}

}  // namespace

Result<Tokenizer> Tokenizer::create(TokenizerSpec spec) {
  Tokenizer t;
  if (spec.model == "llama") {
    t.kind_ = Kind::kSpm;
  } else if (spec.model == "gpt2") {
    t.kind_ = Kind::kBpe;
    LATTICE_ASSIGN_OR_RETURN(t.pre_, pre_tokenizer_from_name(spec.pre));
  } else {
    return Unavailable("tokenizer model '" + spec.model + "' is not supported (llama, gpt2)");
  }
  const size_t n = spec.tokens.size();
  if (n == 0) return InvalidArgument("tokenizer has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) return InvalidArgument("tokenizer has too many tokens");
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return InvalidArgument("tokenizer has " + std::to_string(spec.scores.size()) + " scores for " +
                           std::to_string(n) + " tokens");
  }
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    return InvalidArgument("tokenizer has " + std::to_string(spec.token_types.size()) + " token types for " +
                           std::to_string(n) + " tokens");
  }

  t.tokens_ = std::move(spec.tokens);
  t.scores_ = spec.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(spec.scores);
  t.types_.assign(n, TokenKind::kNormal);
  t.token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!spec.token_types.empty()) {
      const int32_t ty = spec.token_types[i];
      if (ty < 0 || ty > 6) {
        return InvalidArgument("token " + std::to_string(i) + " has unknown type " + std::to_string(ty));
      }
      t.types_[i] = static_cast<TokenKind>(ty);
    }
    std::string& text = t.tokens_[i];
    if (text.empty()) text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp names them
    if (!t.token_to_id_.emplace(text, static_cast<TokenId>(i)).second) {
      return InvalidArgument("token " + std::to_string(i) + " duplicates the text of token " +
                             std::to_string(t.token_to_id_[text]));
    }
  }

  // Flags and special ids: llama.cpp's defaults per model kind, then the spec's values.
  const bool spm = t.kind_ == Kind::kSpm;
  const bool llama3_family = !spm && one_of(spec.pre, {"llama3", "llama-v3", "llama-bpe", "falcon3"});
  t.add_space_prefix_ = spec.add_space_prefix.value_or(spm);
  t.add_bos_ = spec.add_bos.value_or(spm || llama3_family);
  t.add_eos_ = spec.add_eos.value_or(false);
  t.ignore_merges_ = llama3_family;
  t.clean_spaces_ = !spm && !one_of(spec.pre, {"qwen2", "deepseek-r1-qwen", "command-r", "smollm", "deepseek-llm",
                                                 "deepseek-coder", "deepseek-v3", "hunyuan-dense", "joyai-llm",
                                                 "kimi-k2"});

  auto pick = [&](const char* what, const std::optional<TokenId>& given, TokenId fallback,
                  TokenId& out) -> Status {
    if (given) {
      if (*given < 0 || static_cast<size_t>(*given) >= n) {
        return InvalidArgument(std::string(what) + " token id " + std::to_string(*given) +
                               " is out of range (vocabulary of " + std::to_string(n) + ")");
      }
      out = *given;
    } else {
      out = (fallback >= 0 && static_cast<size_t>(fallback) < n) ? fallback : kNoToken;
    }
    return Status::Ok();
  };
  const bool no_default_bos = !spm && spec.pre == "chatglm-bpe";
  LATTICE_RETURN_IF_ERROR(pick("BOS", spec.bos_id, spm ? 1 : (no_default_bos ? kNoToken : 11), t.bos_));
  LATTICE_RETURN_IF_ERROR(pick("EOS", spec.eos_id, spm ? 2 : 11, t.eos_));
  LATTICE_RETURN_IF_ERROR(pick("UNK", spec.unk_id, spm ? 0 : kNoToken, t.unk_));
  LATTICE_RETURN_IF_ERROR(pick("PAD", spec.pad_id, kNoToken, t.pad_));
  LATTICE_RETURN_IF_ERROR(pick("EOT", spec.eot_id, kNoToken, t.eot_));
  LATTICE_RETURN_IF_ERROR(pick("EOM", spec.eom_id, kNoToken, t.eom_));
  if (t.add_bos_ && t.bos_ == kNoToken) return InvalidArgument("add_bos is set but the vocabulary has no BOS token");
  if (t.add_eos_ && t.eos_ == kNoToken) return InvalidArgument("add_eos is set but the vocabulary has no EOS token");

  // End-of-turn tokens found by their text, forced to control type (llama.cpp does the same).
  auto force_control = [&](TokenId id) {
    if (t.types_[id] != TokenKind::kControl) {
      LATTICE_LOG_DEBUG("tokenizer: token {} '{}' looks like a control token; treating it as one", id, t.tokens_[id]);
      t.types_[id] = TokenKind::kControl;
    }
  };
  for (std::string_view text : kEotTexts) {
    if (t.eot_ != kNoToken) break;
    if (TokenId id = t.find_token(text); id != kNoToken) {
      t.eot_ = id;
      force_control(id);
    }
  }
  if (t.eom_ == kNoToken) {
    if (TokenId id = t.find_token("<|eom_id|>"); id != kNoToken) {
      t.eom_ = id;
      force_control(id);
    }
  }
  for (std::string_view text : kEogTexts) {
    if (TokenId id = t.find_token(text); id != kNoToken) {
      t.eog_.insert(id);
      force_control(id);
    }
  }
  // FIM tokens that end generation: given ids, else found by their text.
  struct Fim {
    const char* what;
    const std::optional<TokenId>& given;
    std::initializer_list<std::string_view> texts;
  };
  const Fim fims[] = {
      {"FIM pad", spec.fim_pad_id, {"<|fim_pad|>", "<fim-pad>", "<PAD>"}},
      {"FIM repo", spec.fim_rep_id, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"}},
      {"FIM file separator", spec.fim_sep_id, {"<|file_sep|>"}},
  };
  for (const Fim& f : fims) {
    TokenId id = kNoToken;
    LATTICE_RETURN_IF_ERROR(pick(f.what, f.given, kNoToken, id));
    for (std::string_view text : f.texts) {
      if (id != kNoToken) break;
      id = t.find_token(text);
      if (id != kNoToken) force_control(id);
    }
    if (id != kNoToken) t.eog_.insert(id);
  }
  for (TokenId id : {t.eos_, t.eot_, t.eom_}) {
    if (id != kNoToken) t.eog_.insert(id);
  }

  if (t.kind_ == Kind::kBpe) {
    t.merge_rank_.reserve(spec.merges.size());
    for (size_t i = 0; i < spec.merges.size(); ++i) {
      const std::string& m = spec.merges[i];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= m.size()) {
        return InvalidArgument("merge " + std::to_string(i) + " '" + m + "' is not of the form 'left right'");
      }
      std::string key = m.substr(0, sp);
      key.push_back('\0');
      key.append(m, sp + 1, std::string::npos);
      t.merge_rank_.emplace(std::move(key), static_cast<int>(i));  // the first rank wins
    }
    // Byte-level BPE needs every byte's symbol, or some text would be unrepresentable.
    for (int b = 0; b < 256; ++b) {
      const std::string sym = unicode::encode_utf8(unicode::byte_to_cp(static_cast<uint8_t>(b)));
      if (t.find_token(sym) == kNoToken) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        return InvalidArgument(std::string("byte-level BPE vocabulary lacks the token for byte ") + hex + " ('" +
                               sym + "')");
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (t.types_[i] == TokenKind::kByte && parse_byte_token(t.tokens_[i]) < 0) {
        return InvalidArgument("byte token " + std::to_string(i) + " has text '" + t.tokens_[i] +
                               "', expected <0xXX>");
      }
    }
    if (t.unk_ == kNoToken) {
      for (int b = 0; b < 256; ++b) {
        if (t.spm_byte_token(static_cast<uint8_t>(b)) == kNoToken) {
          return InvalidArgument("SPM vocabulary has neither a byte token for byte " + std::to_string(b) +
                                 " nor an unknown token to fall back to");
        }
      }
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const TokenKind ty = t.types_[i];
    if (ty == TokenKind::kControl || ty == TokenKind::kUserDefined || ty == TokenKind::kUnknown) {
      t.special_by_length_.push_back(static_cast<TokenId>(i));
    }
  }
  std::stable_sort(t.special_by_length_.begin(), t.special_by_length_.end(),
                   [&](TokenId a, TokenId b) { return t.tokens_[a].size() > t.tokens_[b].size(); });

  t.pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const TokenKind ty = t.types_[i];
    const std::string& text = t.tokens_[i];
    std::string& piece = t.pieces_[i];
    if (ty == TokenKind::kControl || ty == TokenKind::kUnknown || ty == TokenKind::kUserDefined) {
      piece = text;
    } else if (ty == TokenKind::kNormal) {
      if (spm) {
        piece = text;
        replace_all(piece, "\xE2\x96\x81", " ");
      } else {
        unicode::bpe_text_to_bytes(text, piece);
      }
    } else if (ty == TokenKind::kByte && spm) {
      piece.assign(1, static_cast<char>(parse_byte_token(text)));
    }
    // unused / undefined (and byte tokens in a BPE vocabulary) render as nothing
  }
  t.chat_template_ = std::move(spec.chat_template);
  return t;
}

TokenId Tokenizer::find_token(std::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? kNoToken : it->second;
}

std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({kNoToken, 0, text.size()});
  std::array<bool, 256> present{};
  for (char c : text) present[static_cast<uint8_t>(c)] = true;

  std::vector<Fragment> next;
  for (TokenId id : special_by_length_) {
    const TokenKind ty = types_[id];
    if (!parse_special && (ty == TokenKind::kControl || ty == TokenKind::kUnknown)) continue;
    const std::string& st = tokens_[id];
    if (st.size() > text.size() || !present[static_cast<uint8_t>(st[0])]) continue;
    bool changed = false;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.begin, f.end - f.begin);
      size_t at = 0;
      for (size_t hit; (hit = raw.find(st, at)) != std::string_view::npos; at = hit + st.size()) {
        if (hit > at) next.push_back({kNoToken, f.begin + at, f.begin + hit});
        next.push_back({id, 0, 0});
        changed = true;
      }
      if (at < raw.size()) next.push_back({kNoToken, f.begin + at, f.end});
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  const std::vector<Fragment> frags = partition(text, options.parse_special);
  if (options.add_special && add_bos_) out.push_back(bos_);
  bool prev_special = true;  // SPM: the first text run gets the space prefix
  for (const Fragment& f : frags) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string_view raw = text.substr(f.begin, f.end - f.begin);
    if (kind_ == Kind::kSpm) {
      std::string s;
      s.reserve(raw.size() + 1);
      if (add_space_prefix_ && prev_special) s.push_back(' ');
      s.append(raw);
      replace_all(s, " ", "\xE2\x96\x81");
      encode_spm(s, out);
    } else {
      encode_bpe(raw, out);
    }
    prev_special = false;
  }
  if (options.add_special && add_eos_) out.push_back(eos_);
  return out;
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return {};
  const TokenKind ty = types_[id];
  if (!render_special && (ty == TokenKind::kControl || ty == TokenKind::kUnknown)) return {};
  return pieces_[id];
}

std::string Tokenizer::decode(std::span<const TokenId> ids, DecodeOptions options) const {
  bool remove_space = add_space_prefix_;
  if (options.remove_special && add_bos_ && !ids.empty() && ids.front() == bos_) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (options.remove_special && add_eos_ && !ids.empty() && ids.back() == eos_) ids = ids.first(ids.size() - 1);
  std::string text;
  for (TokenId id : ids) {
    std::string piece = token_to_piece(id, options.render_special);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    text += piece;
  }
  if (clean_spaces_) clean_spaces(text);
  return text;
}

std::string StreamDecoder::push(TokenId id) {
  pending_ += tokenizer_->token_to_piece(id, render_special_);
  const size_t ready = pending_.size() - unicode::incomplete_utf8_tail(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace lattice::engine
