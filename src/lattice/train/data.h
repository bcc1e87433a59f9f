// Training text: files read whole, tokenized, split into a training part and a held-out
// validation tail, and batches drawn from them deterministically.
//
// A batch of step s is global: row r of it starts at a position that depends only on (seed,
// s, r), so any rank can draw its share of rows [row_begin, row_end) and a resumed run draws
// the same batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::train {

// The files concatenated (each followed by a newline if it lacks one). kNotFound / kIoError
// naming the file; kInvalidArgument when they hold no text.
Result<std::string> read_corpus(const std::vector<std::string>& paths);

struct TokenSplit {
  std::vector<int32_t> train, val;
};
// The last val_fraction of the tokens are held out. kInvalidArgument when either part is
// shorter than seq + 1 tokens.
Result<TokenSplit> split_tokens(std::vector<int32_t> tokens, double val_fraction, size_t seq);

// Rows [row_begin, row_end) of step `step`'s batch: inputs and targets (shifted by one), seq each.
void draw_batch(const std::vector<int32_t>& tokens, uint64_t seed, uint64_t step, size_t row_begin, size_t row_end,
                size_t seq, std::vector<int32_t>& inputs, std::vector<int32_t>& targets);

// Where each rank's rows of a global batch of `batch` rows begin (world + 1 entries, the last
// = batch). speed empty or not all > 0: even shares; else shares proportional to speed (rows
// a second), largest remainders first, every rank at least one row while batch >= world. A
// function of its arguments only: ranks given the same bits agree.
std::vector<size_t> row_starts(size_t batch, size_t world, const std::vector<float>& speed);

// Validation window w of `windows`: evenly spaced over the validation tokens.
void validation_window(const std::vector<int32_t>& val, size_t w, size_t windows, size_t seq, int32_t* inputs,
                       int32_t* targets);

}  // namespace lattice::train
