// Reading a TokenizerSpec from GGUF metadata (the tokenizer.ggml.* and
// tokenizer.chat_template keys, as llama.cpp's converter writes them).
#pragma once

#include "lattice/core/status.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/tokenizer/tokenizer.h"

namespace lattice::engine {

// kNotFound if the file has no tokenizer.ggml.model / tokens, kCorrupt if a key has the
// wrong type. Special-token ids past the vocabulary are dropped with a warning (llama.cpp
// does the same), so Tokenizer::create() then applies its defaults.
Result<TokenizerSpec> tokenizer_spec_from_metadata(const Metadata& metadata);
Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& file);

// Both steps: spec from the file, then Tokenizer::create().
Result<Tokenizer> tokenizer_from_gguf(const GgufFile& file);

}  // namespace lattice::engine
