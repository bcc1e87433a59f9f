#!/usr/bin/python3
# Writes a small random deepseek2 GGUF with llama.cpp's gguf-py, the way its converter
# (conversion/deepseek.py) lays the file out: the split attn_k_b / attn_v_b, 3-D expert
# tensors, shared experts, a leading dense block, sigmoid gating with groups and YaRN keys.
# A file lattice did not write, for the deepseek2 tests:
#   PYTHONPATH=$(scripts/gguf_py.sh) /usr/bin/python3 tests/engine/deepseek2_gguf_py.py OUT.gguf
import sys

import numpy as np
import gguf

out = sys.argv[1]
rng = np.random.default_rng(5)
dim, layers, heads, vocab = 128, 2, 4, 257
q_lora, kv_lora, rope, nope, v = 32, 32, 16, 16, 16
experts, used, groups, groups_used, ffn, eff = 8, 2, 4, 2, 256, 64

w = gguf.GGUFWriter(out, "deepseek2")
w.add_block_count(layers)
w.add_context_length(1024)
w.add_embedding_length(dim)
w.add_feed_forward_length(ffn)
w.add_head_count(heads)
w.add_head_count_kv(1)
w.add_layer_norm_rms_eps(1e-6)
w.add_rope_freq_base(10000.0)
w.add_leading_dense_block_count(1)
w.add_vocab_size(vocab)
w.add_q_lora_rank(q_lora)
w.add_kv_lora_rank(kv_lora)
w.add_key_length(kv_lora + rope)
w.add_value_length(kv_lora)
w.add_key_length_mla(nope + rope)
w.add_value_length_mla(v)
w.add_expert_feed_forward_length(eff)
w.add_expert_count(experts)
w.add_expert_used_count(used)
w.add_expert_shared_count(1)
w.add_expert_weights_scale(2.5)
w.add_expert_weights_norm(True)
w.add_expert_group_count(groups)
w.add_expert_group_used_count(groups_used)
w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
w.add_rope_dimension_count(rope)
w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
w.add_rope_scaling_factor(4.0)
w.add_rope_scaling_orig_ctx_len(256)
w.add_rope_scaling_yarn_log_mul(0.1 * 0.707)
# A byte-level BPE vocabulary of single bytes and a few merges (enough for llama.cpp to load).
bytes_to_unicode = {}
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
tokens = [chr(c) for b, c in sorted(zip(bs, cs))] + ["!!"]
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("default")
w.add_token_list(tokens)
w.add_token_types([gguf.TokenType.NORMAL] * vocab)
w.add_token_merges(["! !"])
w.add_bos_token_id(1)
w.add_eos_token_id(2)


def mat(name, n_out, n_in):  # numpy shape (rows, cols) = GGUF ne [n_in, n_out]
    w.add_tensor(name, (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32))


def vec(name, n, mean=1.0, std=0.05):
    w.add_tensor(name, (mean + std * rng.standard_normal(n)).astype(np.float32))


mat("token_embd.weight", vocab, dim)
vec("output_norm.weight", dim)
mat("output.weight", vocab, dim)
for i in range(layers):
    b = f"blk.{i}."
    vec(b + "attn_norm.weight", dim)
    mat(b + "attn_q_a.weight", q_lora, dim)
    vec(b + "attn_q_a_norm.weight", q_lora)
    mat(b + "attn_q_b.weight", heads * (nope + rope), q_lora)
    mat(b + "attn_kv_a_mqa.weight", kv_lora + rope, dim)
    vec(b + "attn_kv_a_norm.weight", kv_lora)
    # The converter's split of kv_b [heads * (nope + v), kv_lora]: k_b transposed per head.
    kv_b = (rng.standard_normal((heads, nope + v, kv_lora)) / np.sqrt(kv_lora)).astype(np.float32)
    w.add_tensor(b + "attn_k_b.weight", np.ascontiguousarray(kv_b[:, :nope, :].transpose(0, 2, 1)))
    w.add_tensor(b + "attn_v_b.weight", np.ascontiguousarray(kv_b[:, nope:, :]))
    mat(b + "attn_output.weight", dim, heads * v)
    vec(b + "ffn_norm.weight", dim)
    if i == 0:
        mat(b + "ffn_gate.weight", ffn, dim)
        mat(b + "ffn_up.weight", ffn, dim)
        mat(b + "ffn_down.weight", dim, ffn)
        continue
    w.add_tensor(b + "ffn_gate_inp.weight", (4 * rng.standard_normal((experts, dim)) / np.sqrt(dim)).astype(np.float32))
    vec(b + "exp_probs_b.bias", experts, 0.0, 0.05)
    for part, n_out, n_in in (("gate", eff, dim), ("up", eff, dim), ("down", dim, eff)):
        w.add_tensor(b + f"ffn_{part}_exps.weight",
                     (rng.standard_normal((experts, n_out, n_in)) / np.sqrt(n_in)).astype(np.float32))
    mat(b + "ffn_gate_shexp.weight", eff, dim)
    mat(b + "ffn_up_shexp.weight", eff, dim)
    mat(b + "ffn_down_shexp.weight", dim, eff)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
