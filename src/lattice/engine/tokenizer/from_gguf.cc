#include "lattice/engine/tokenizer/from_gguf.h"

#include <string>

#include "lattice/core/log.h"

namespace lattice::engine {
namespace {

Status optional_id(const Metadata& md, const char* key, size_t n_tokens, std::optional<TokenId>& out) {
  if (!md.contains(key)) return Status::Ok();
  LATTICE_ASSIGN_OR_RETURN(const uint32_t id, md.get_u32(key));
  if (id >= n_tokens) {
    LATTICE_LOG_WARN("tokenizer: {} = {} is past the vocabulary ({} tokens); ignoring it", key, id, n_tokens);
    return Status::Ok();
  }
  out = static_cast<TokenId>(id);
  return Status::Ok();
}

Status optional_flag(const Metadata& md, const char* key, std::optional<bool>& out) {
  if (!md.contains(key)) return Status::Ok();
  LATTICE_ASSIGN_OR_RETURN(out, md.get_bool(key));
  return Status::Ok();
}

}  // namespace

Result<TokenizerSpec> tokenizer_spec_from_metadata(const Metadata& md) {
  TokenizerSpec spec;
  LATTICE_ASSIGN_OR_RETURN(spec.model, md.get_string("tokenizer.ggml.model"));
  LATTICE_ASSIGN_OR_RETURN(spec.pre, md.get_string_or("tokenizer.ggml.pre", ""));
  LATTICE_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                           md.get_array<std::string>("tokenizer.ggml.tokens"));
  spec.tokens = *tokens;
  const size_t n = spec.tokens.size();
  if (md.contains("tokenizer.ggml.scores")) {
    LATTICE_ASSIGN_OR_RETURN(const std::vector<float>* scores, md.get_array<float>("tokenizer.ggml.scores"));
    spec.scores = *scores;
  }
  if (md.contains("tokenizer.ggml.token_type")) {
    LATTICE_ASSIGN_OR_RETURN(const std::vector<int32_t>* types, md.get_array<int32_t>("tokenizer.ggml.token_type"));
    spec.token_types = *types;
  }
  if (md.contains("tokenizer.ggml.merges")) {
    LATTICE_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                             md.get_array<std::string>("tokenizer.ggml.merges"));
    spec.merges = *merges;
  } else if (spec.model == "gpt2" && spec.pre != "kimi-k2") {
    // llama.cpp lets a kimi-k2 file go without merges (each byte then stays a token); its
    // converter always writes them.
    return NotFound("tokenizer.ggml.merges: a gpt2 tokenizer needs its merges");
  }
  LATTICE_RETURN_IF_ERROR(optional_id(md, "tokenizer.ggml.bos_token_id", n, spec.bos_id));
  LATTICE_RETURN_IF_ERROR(optional_id(md, "tokenizer.ggml.eos_token_id", n, spec.eos_id));
  LATTICE_RETURN_IF_ERROR(optional_id(md, "tokenizer.ggml.unknown_token_id", n, spec.unk_id));
  LATTICE_RETURN_IF_ERROR(optional_id(md, "tokenizer.ggml.padding_token_id", n, spec.pad_id));
  LATTICE_RETURN_IF_ERROR(optional_id(md, "tokenizer.ggml.eot_token_id", n, spec.eot_id));
  LATTICE_RETURN_IF_ERROR(optional_id(md, "tokenizer.ggml.eom_token_id", n, spec.eom_id));
  LATTICE_RETURN_IF_ERROR(optional_id(md, "tokenizer.ggml.fim_pad_token_id", n, spec.fim_pad_id));
  LATTICE_RETURN_IF_ERROR(optional_id(md, "tokenizer.ggml.fim_rep_token_id", n, spec.fim_rep_id));
  LATTICE_RETURN_IF_ERROR(optional_id(md, "tokenizer.ggml.fim_sep_token_id", n, spec.fim_sep_id));
  LATTICE_RETURN_IF_ERROR(optional_flag(md, "tokenizer.ggml.add_bos_token", spec.add_bos));
  LATTICE_RETURN_IF_ERROR(optional_flag(md, "tokenizer.ggml.add_eos_token", spec.add_eos));
  LATTICE_RETURN_IF_ERROR(optional_flag(md, "tokenizer.ggml.add_space_prefix", spec.add_space_prefix));
  LATTICE_ASSIGN_OR_RETURN(spec.chat_template, md.get_string_or("tokenizer.chat_template", ""));
  return spec;
}

Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& file) {
  return tokenizer_spec_from_metadata(file.metadata());
}

Result<Tokenizer> tokenizer_from_gguf(const GgufFile& file) {
  LATTICE_ASSIGN_OR_RETURN(TokenizerSpec spec, tokenizer_spec_from_gguf(file));
  return Tokenizer::create(std::move(spec));
}

}  // namespace lattice::engine
