#include "lattice/engine/tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace lattice::engine::unicode {
namespace {

struct CpRange {
  uint32_t first;
  uint16_t flags;
};

#include "lattice/engine/tokenizer/unicode_table.inc"

constexpr uint32_t kMaxCp = 0x110000;

// The first 256 codepoints are looked up on every character of Latin text: a flat table.
struct Latin1Table {
  std::array<uint16_t, 256> flags{};
  Latin1Table() {
    size_t r = 0;
    for (uint32_t cp = 0; cp < 256; ++cp) {
      while (r + 1 < std::size(kCpRanges) && kCpRanges[r + 1].first <= cp) ++r;
      flags[cp] = kCpRanges[r].flags;
    }
  }
};

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // every image is below U+0144
  ByteMap() {
    from_cp.fill(-1);
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

uint16_t cp_flags(uint32_t cp) {
  static const Latin1Table latin1;
  if (cp < 256) return latin1.flags[cp];
  if (cp >= kMaxCp) return kCpUndefined;
  auto it = std::upper_bound(std::begin(kCpRanges), std::end(kCpRanges), cp,
                             [](uint32_t v, const CpRange& r) { return v < r.first; });
  return std::prev(it)->flags;
}

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const size_t n = text.size();
  auto cont = [&](size_t i) { return i < n && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
      out.push_back(((b & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      out.push_back(((b & 0x0Fu) << 12) | ((static_cast<uint8_t>(text[i + 1]) & 0x3Fu) << 6) |
                    (static_cast<uint8_t>(text[i + 2]) & 0x3Fu));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3) &&
               (((b & 0x07u) << 18) | ((static_cast<uint8_t>(text[i + 1]) & 0x3Fu) << 12)) < kMaxCp) {
      out.push_back(((b & 0x07u) << 18) | ((static_cast<uint8_t>(text[i + 1]) & 0x3Fu) << 12) |
                    ((static_cast<uint8_t>(text[i + 2]) & 0x3Fu) << 6) |
                    (static_cast<uint8_t>(text[i + 3]) & 0x3Fu));
      i += 4;
    } else {
      out.push_back(kReplacementChar);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < kMaxCp) {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    append_utf8(out, kReplacementChar);
  }
}

std::string encode_utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

size_t incomplete_utf8_tail(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the lead byte.
  const size_t n = s.size();
  for (size_t k = 1; k <= 4 && k <= n; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[n - k]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    if ((b & 0xE0) == 0xC0) need = 2;
    else if ((b & 0xF0) == 0xE0) need = 3;
    else if ((b & 0xF8) == 0xF0) need = 4;
    else return 0;  // ASCII or an invalid lead: nothing to wait for
    return k < need ? k : 0;
  }
  return 0;
}

uint32_t byte_to_cp(uint8_t b) { return byte_map().to_cp[b]; }

int cp_to_byte(uint32_t cp) { return cp < 512 ? byte_map().from_cp[cp] : -1; }

std::string bytes_to_bpe_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_to_cp(static_cast<uint8_t>(c)));
  return out;
}

bool bpe_text_to_bytes(std::string_view text, std::string& out) {
  bool ok = true;
  for (uint32_t cp : decode_utf8(text)) {
    const int b = cp_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      ok = false;
      append_utf8(out, cp);
    }
  }
  return ok;
}

const char* unicode_version() { return LATTICE_UNICODE_VERSION; }

}  // namespace lattice::engine::unicode
