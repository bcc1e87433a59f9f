#include "lattice/cluster/json_positions.h"

#include <algorithm>
#include <string>

namespace lattice::cluster::detail {

// A recursive scanner that trusts its input's syntax (nlohmann checked it) and only tracks
// lines and pointers. Depth is bounded by nlohmann's own parse of the same text.
class PositionScanner {
 public:
  PositionScanner(std::string_view t, JsonPositions& out) : t_(t), out_(out) {}

  void run() {
    ws();
    out_.lines_[""] = line_;
    value("");
  }

 private:
  void ws() {
    while (p_ < t_.size()) {
      char c = t_[p_];
      if (c == '\n') {
        ++line_;
      } else if (c != ' ' && c != '\t' && c != '\r') {
        break;
      }
      ++p_;
    }
  }

  // Reads a string at t_[p_] == '"', returns its (approximately) decoded text.
  std::string str() {
    std::string s;
    ++p_;
    while (p_ < t_.size() && t_[p_] != '"') {
      char c = t_[p_++];
      if (c == '\\' && p_ < t_.size()) {
        char e = t_[p_++];
        switch (e) {
          case 'n': s += '\n'; break;
          case 't': s += '\t'; break;
          case 'r': s += '\r'; break;
          case 'b': s += '\b'; break;
          case 'f': s += '\f'; break;
          case 'u':  // keys of our schemas are ASCII; keep the escape verbatim
            s += "\\u";
            break;
          default: s += e;
        }
      } else {
        s += c;
      }
    }
    ++p_;  // closing quote
    return s;
  }

  void value(const std::string& ptr) {
    ws();
    if (p_ >= t_.size()) return;
    char c = t_[p_];
    if (c == '{') {
      ++p_;
      std::unordered_map<std::string, int> seen;
      for (;;) {
        ws();
        if (p_ >= t_.size() || t_[p_] == '}') {
          ++p_;
          return;
        }
        if (t_[p_] == ',') {
          ++p_;
          continue;
        }
        int key_line = line_;
        std::string key = str();
        std::string child = ptr + "/" + JsonPositions::escape(key);
        if (auto [it, fresh] = seen.emplace(key, key_line); !fresh) {
          out_.duplicates_.push_back({child, key_line, it->second});
        } else {
          out_.lines_[child] = key_line;
        }
        ws();
        ++p_;  // ':'
        value(child);
      }
    } else if (c == '[') {
      ++p_;
      size_t index = 0;
      for (;;) {
        ws();
        if (p_ >= t_.size() || t_[p_] == ']') {
          ++p_;
          return;
        }
        if (t_[p_] == ',') {
          ++p_;
          continue;
        }
        std::string child = ptr + "/" + std::to_string(index++);
        out_.lines_.emplace(child, line_);
        value(child);
      }
    } else if (c == '"') {
      str();
    } else {
      while (p_ < t_.size()) {
        char d = t_[p_];
        if (d == ',' || d == ']' || d == '}' || d == ' ' || d == '\n' || d == '\t' || d == '\r') break;
        ++p_;
      }
    }
  }

  std::string_view t_;
  JsonPositions& out_;
  size_t p_ = 0;
  int line_ = 1;
};

JsonPositions JsonPositions::build(std::string_view text) {
  JsonPositions out;
  PositionScanner(text, out).run();
  return out;
}

int JsonPositions::line(std::string_view pointer) const {
  std::string p(pointer);
  for (;;) {
    if (auto it = lines_.find(p); it != lines_.end()) return it->second;
    if (p.empty()) return 1;
    p.resize(p.rfind('/'));
  }
}

std::string JsonPositions::escape(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

int json_max_depth(std::string_view t) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

std::pair<int, int> line_col(std::string_view text, size_t byte_offset) {
  int line = 1, col = 1;
  for (size_t i = 0; i < byte_offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

}  // namespace lattice::cluster::detail
