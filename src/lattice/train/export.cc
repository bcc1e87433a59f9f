#include "lattice/train/export.h"

#include <cstring>
#include <unordered_map>

#include "lattice/engine/gguf/make_model.h"

namespace lattice::train {

Status write_gguf(const std::string& path, const LlamaConfig& c, std::span<const float> params, const BpeVocab& vocab,
                  uint32_t seq, const ExportOptions& options) {
  if (vocab.tokens.size() != c.vocab)
    return InvalidArgument("the tokenizer has " + std::to_string(vocab.tokens.size()) + " tokens, the model " +
                           std::to_string(c.vocab));
  engine::MakeModelOptions mo;
  mo.arch = "llama";
  mo.dim = c.dim;
  mo.layers = c.layers;
  mo.heads = c.heads;
  mo.kv_heads = c.n_kv_heads();
  mo.ffn = c.ffn;
  mo.vocab = c.vocab;
  mo.type = "f32";
  mo.pure = true;
  mo.tokenizer = "llama";  // any: every tokenizer key is replaced below (llama accepts the smallest vocabularies)
  mo.rms_eps = c.rms_eps;
  mo.rope_theta = c.rope_theta;
  mo.context_length = options.context_length ? options.context_length : seq;
  mo.name = options.name;
  mo.threads = 1;
  LATTICE_ASSIGN_OR_RETURN(engine::ModelPlan plan, engine::plan_model(mo));
  engine::Metadata& md = plan.writer.metadata();
  md.erase("tokenizer.chat_template");
  md.set("tokenizer.ggml.model", "gpt2");
  md.set("tokenizer.ggml.pre", vocab.pre);
  md.set("tokenizer.ggml.tokens", vocab.tokens);
  std::vector<int32_t> types(vocab.tokens.size(), 1);
  types[vocab.eos_id] = 3;  // control
  md.set("tokenizer.ggml.token_type", std::move(types));
  md.set("tokenizer.ggml.scores", std::vector<float>(vocab.tokens.size(), 0.0f));
  md.set("tokenizer.ggml.merges", vocab.merges);
  md.set("tokenizer.ggml.bos_token_id", vocab.eos_id);
  md.set("tokenizer.ggml.eos_token_id", vocab.eos_id);
  md.erase("tokenizer.ggml.unknown_token_id");
  md.erase("tokenizer.ggml.padding_token_id");
  md.set("tokenizer.ggml.add_bos_token", false);
  md.set("tokenizer.ggml.add_eos_token", false);
  std::unordered_map<std::string, const ParamTensor*> by_name;
  const auto table = param_table(c);
  for (const ParamTensor& t : table) by_name[t.name] = &t;
  for (const auto& spec : plan.writer.tensors()) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end() || spec.type != engine::TensorType::kF32 || spec.n_bytes != it->second->size() * 4)
      return Internal("make-model's tensor " + spec.name + " does not match the training model's");
  }
  auto fill = [&](size_t, const engine::TensorSpec& spec, std::span<std::byte> out) -> Status {
    const ParamTensor* t = by_name.at(spec.name);
    std::memcpy(out.data(), params.data() + t->offset, t->size() * sizeof(float));
    return Status::Ok();
  };
  return plan.writer.write(path, fill).status();
}

}  // namespace lattice::train
