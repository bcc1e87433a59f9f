// Internal: where each value of a JSON document starts, by JSON pointer, so semantic errors
// in a topology file can name their line. nlohmann::json keeps no positions; this scans the
// (already validated) text once more, which is cheap for files of a few kilobytes.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lattice::cluster::detail {

class JsonPositions {
 public:
  struct Duplicate {
    std::string pointer;  // of the repeated key
    int line = 0;
    int first_line = 0;
  };

  // `text` must be syntactically valid JSON (parse it with nlohmann first).
  static JsonPositions build(std::string_view text);

  // The 1-based line of the value at `pointer` ("/hosts/2/name"): for an object member, the
  // line of its key; for an array element, where it starts. Unknown pointers fall back to
  // their nearest known parent; the root to its first line.
  int line(std::string_view pointer) const;
  const std::vector<Duplicate>& duplicates() const { return duplicates_; }

  // RFC 6901 escaping of one reference token ("a/b" -> "a~1b").
  static std::string escape(std::string_view token);

 private:
  std::unordered_map<std::string, int> lines_;
  std::vector<Duplicate> duplicates_;
  friend class PositionScanner;
};

// The deepest nesting of arrays/objects in `text` (strings skipped). The scanner recurses,
// so callers refuse documents deeper than a small bound before building positions.
int json_max_depth(std::string_view text);

// 1-based line and column of a byte offset in `text`.
std::pair<int, int> line_col(std::string_view text, size_t byte_offset);

}  // namespace lattice::cluster::detail
