#include "lattice/core/size.h"

namespace lattice {

Result<uint64_t> parse_size(std::string_view text, uint64_t max_bytes) {
  const std::string quoted = "size '" + std::string(text) + "'";
  if (text.empty()) return InvalidArgument("empty size");
  size_t i = 0;
  uint64_t whole = 0;
  auto digit = [&](size_t k) { return k < text.size() && text[k] >= '0' && text[k] <= '9'; };
  for (; digit(i); ++i) {
    if (whole > kMaxParsedSize) return InvalidArgument(quoted + " is too large");
    whole = whole * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i == 0) return InvalidArgument(quoted + " must start with a digit (e.g. 8, 64K, 1.5M)");
  // Fraction: kept as numerator / 10^digits, exact (at most 9 digits: 1 GiB * 10^9 fits in 64 bits).
  uint64_t frac = 0, frac_den = 1;
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (!digit(i)) return InvalidArgument(quoted + ": expected digits after '.'");
    for (; digit(i); ++i) {
      if (frac_den >= 1000000000) return InvalidArgument(quoted + ": too many decimals");
      frac = frac * 10 + static_cast<uint64_t>(text[i] - '0');
      frac_den *= 10;
    }
  }
  const std::string_view unit = text.substr(i);
  uint64_t mul;
  if (unit.empty() || unit == "B" || unit == "b") mul = 1;
  else if (unit == "K" || unit == "k" || unit == "KB" || unit == "kB" || unit == "KiB") mul = uint64_t{1} << 10;
  else if (unit == "M" || unit == "m" || unit == "MB" || unit == "MiB") mul = uint64_t{1} << 20;
  else if (unit == "G" || unit == "g" || unit == "GB" || unit == "GiB") mul = uint64_t{1} << 30;
  else
    return InvalidArgument(quoted + ": unknown unit '" + std::string(unit) + "' (use B, K, M or G, e.g. 64K, 4M)");
  if (whole > kMaxParsedSize / mul) return InvalidArgument(quoted + " is too large");
  if ((frac * mul) % frac_den != 0) return InvalidArgument(quoted + " is not a whole number of bytes");
  const uint64_t bytes = whole * mul + frac * mul / frac_den;
  if (bytes > max_bytes)
    return InvalidArgument(quoted + " is above the limit of " + format_size(max_bytes) + " (" +
                           std::to_string(max_bytes) + " bytes)");
  return bytes;
}

std::string format_size(uint64_t b) {
  if (b >= (uint64_t{1} << 30) && b % (uint64_t{1} << 30) == 0) return std::to_string(b >> 30) + "G";
  if (b >= (uint64_t{1} << 20) && b % (uint64_t{1} << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= (uint64_t{1} << 10) && b % (uint64_t{1} << 10) == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

}  // namespace lattice
