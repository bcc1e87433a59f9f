// Byte sizes as people type them on a command line: the one parser every flag that takes a
// size uses (bench fabric/coll, demo, ping), so "4MB", "4M", "4m" and "4MiB" mean the same
// everywhere.
//
// Grammar: a decimal number (digits, optionally a '.' and more digits) followed by an
// optional unit, no spaces:
//   (none), B, b                 bytes
//   K k KB kB KiB                1024 bytes
//   M m MB MiB                   1024^2
//   G g GB GiB                   1024^3
// Units are binary (as ib_*_bw and nccl-tests use them). A fraction is allowed when the result
// is a whole number of bytes ("1.5K" = 1536; "1.5" and "0.1K" are refused). Anything else
// (empty text, a sign, spaces, an unknown unit, a value above `max_bytes`) is kInvalidArgument
// with a message that quotes the text. Never throws, never asserts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lattice/core/status.h"

namespace lattice {

inline constexpr uint64_t kMaxParsedSize = uint64_t{1} << 40;  // 1 TiB: beyond any buffer we make

Result<uint64_t> parse_size(std::string_view text, uint64_t max_bytes = kMaxParsedSize);

// The shortest exact spelling parse_size reads back: "4M", "1536", "64K".
std::string format_size(uint64_t bytes);

}  // namespace lattice
