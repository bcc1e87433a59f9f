// Training checkpoints: everything a run needs to continue bit for bit (weights, AdamW moments,
// the next step, the options that shape the run, the tokenizer, the loss history).
//
// File: "LTCK", u32 version, u64 header length, the header (JSON), u64 float count n, then n
// params, n first moments, n second moments (f32 little-endian), then a u64 FNV-1a of all the
// bytes before it. Written atomically: a temporary file beside the target, fsync, rename over
// the target, fsync of the directory; a crash at any point leaves the previous checkpoint
// whole. Reading checks the magic, sizes and checksum (kCorrupt naming the file).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/core/status.h"

namespace lattice::train {

struct Checkpoint {
  nlohmann::json header;  // options, vocab, next step, history (see train.cc)
  std::vector<float> params, m, v;
};

Status write_checkpoint(const std::string& path, const Checkpoint& c);
Result<Checkpoint> read_checkpoint(const std::string& path);

}  // namespace lattice::train
