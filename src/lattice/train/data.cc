#include "lattice/train/data.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace lattice::train {

Result<std::string> read_corpus(const std::vector<std::string>& paths) {
  if (paths.empty()) return InvalidArgument("--data: no files given");
  std::string all;
  for (const std::string& p : paths) {
    std::ifstream f(p, std::ios::binary);
    if (!f) return NotFound("--data " + p + ": cannot open");
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) return IoError("--data " + p + ": read failed");
    std::string s = std::move(ss).str();
    all += s;
    if (!s.empty() && s.back() != '\n') all += '\n';
  }
  if (all.empty()) return InvalidArgument("--data: the files hold no text");
  return all;
}

Result<TokenSplit> split_tokens(std::vector<int32_t> tokens, double val_fraction, size_t seq) {
  const size_t n_val = static_cast<size_t>(static_cast<double>(tokens.size()) * val_fraction);
  if (n_val < seq + 1 || tokens.size() - n_val < seq + 1)
    return InvalidArgument("the corpus has " + std::to_string(tokens.size()) + " tokens: too few for --seq " +
                           std::to_string(seq) + " with a validation split of " + std::to_string(val_fraction));
  TokenSplit s;
  s.val.assign(tokens.end() - static_cast<ptrdiff_t>(n_val), tokens.end());
  tokens.resize(tokens.size() - n_val);
  s.train = std::move(tokens);
  return s;
}

namespace {
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

void draw_batch(const std::vector<int32_t>& tokens, uint64_t seed, uint64_t step, size_t row_begin, size_t row_end,
                size_t seq, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
  const size_t rows = row_end - row_begin, span = tokens.size() - seq;  // starts in [0, span)
  inputs.resize(rows * seq);
  targets.resize(rows * seq);
  for (size_t r = 0; r < rows; ++r) {
    const uint64_t h = mix(mix(seed ^ 0x5eed) ^ mix(step * 0x10001 + 1) ^ mix(row_begin + r + 0x777));
    const size_t start = static_cast<size_t>(h % span);
    for (size_t s = 0; s < seq; ++s) {
      inputs[r * seq + s] = tokens[start + s];
      targets[r * seq + s] = tokens[start + s + 1];
    }
  }
}

void validation_window(const std::vector<int32_t>& val, size_t w, size_t windows, size_t seq, int32_t* inputs,
                       int32_t* targets) {
  const size_t span = val.size() - seq;
  const size_t start = windows > 1 ? (span - 1) * w / (windows - 1) : 0;
  for (size_t s = 0; s < seq; ++s) {
    inputs[s] = val[start + s];
    targets[s] = val[start + s + 1];
  }
}

std::vector<size_t> row_starts(size_t batch, size_t world, const std::vector<float>& speed) {
  std::vector<size_t> starts(world + 1);
  const bool by_speed = speed.size() == world && std::all_of(speed.begin(), speed.end(), [](float s) { return s > 0; });
  if (!by_speed) {
    for (size_t r = 0; r <= world; ++r) starts[r] = batch * r / world;
    return starts;
  }
  const size_t floor_rows = batch >= world ? 1 : 0;
  const size_t spare = batch - floor_rows * world;
  double total = 0;
  for (float s : speed) total += s;
  std::vector<size_t> rows(world);
  std::vector<std::pair<double, size_t>> rest(world);
  size_t given = 0;
  for (size_t r = 0; r < world; ++r) {
    const double want = spare * (double(speed[r]) / total);
    rows[r] = static_cast<size_t>(want);
    given += rows[r];
    rest[r] = {want - double(rows[r]), r};
  }
  std::sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  for (size_t i = 0; given < spare; ++i, ++given) ++rows[rest[i % world].second];
  for (size_t r = 0; r < world; ++r) starts[r + 1] = starts[r] + rows[r] + floor_rows;
  return starts;
}

}  // namespace lattice::train
