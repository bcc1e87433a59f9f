#!/usr/bin/env python3
"""Writes fuzz/corpus/gguf/: tiny models written by llama.cpp's gguf-py (as its converters write
them), small enough for a fuzzer to mutate (a few KB each), plus the header, metadata and
tensor table of tests/data/llama-q2_k.gguf (written by llama-quantize) cut before its data.

    PYTHONPATH=$(scripts/gguf_py.sh) python3 fuzz/seeds/gguf_seeds.py fuzz/corpus/gguf
"""
import os
import sys

import numpy as np

import gguf

out = sys.argv[1]
rng = np.random.default_rng(1)


def tiny(path, arch, vocab_kind):
    dim, ffn, heads, kv, n_vocab = 8, 16, 2, 1, 24
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny {arch}")
    w.add_context_length(64)
    w.add_embedding_length(dim)
    w.add_block_count(1)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(1e4)
    w.add_layer_norm_rms_eps(1e-5)
    if arch == "qwen3":
        w.add_key_length(dim // heads)
        w.add_value_length(dim // heads)
    if vocab_kind == "llama":
        toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(8)] + ["\u2581a", "\u2581b", "a", "b", "c",
                                                                              "\u2581", "ab", "bc", "\u2581ab", "d", "e", "f", "g"]
        w.add_tokenizer_model("llama")
        w.add_token_list(toks[:n_vocab])
        w.add_token_scores([float(-i) for i in range(n_vocab)])
        w.add_token_types([2, 3, 3] + [6] * 8 + [1] * (n_vocab - 11))
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    else:
        toks = ["!", "a", "b", "c", "\u0120", "\u0120a", "ab", "bc", "\u0120ab", "<|im_start|>", "<|im_end|>",
                "<|endoftext|>"] + [chr(ord("d") + i) for i in range(n_vocab - 12)]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(toks)
        w.add_token_types([1] * 9 + [3] * 3 + [1] * (n_vocab - 12))
        w.add_token_merges(["a b", "b c", "\u0120 a", "\u0120a b"])
        w.add_eos_token_id(10)
        w.add_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    w.add_tensor("token_embd.weight", f32(n_vocab, dim))
    w.add_tensor("output_norm.weight", np.ones(dim, np.float32))
    w.add_tensor("output.weight", f32(n_vocab, dim))
    hd = dim // heads
    w.add_tensor("blk.0.attn_norm.weight", np.ones(dim, np.float32))
    w.add_tensor("blk.0.attn_q.weight", f32(heads * hd, dim))
    w.add_tensor("blk.0.attn_k.weight", f32(kv * hd, dim))
    w.add_tensor("blk.0.attn_v.weight", f32(kv * hd, dim))
    w.add_tensor("blk.0.attn_output.weight", f32(dim, heads * hd))
    if arch == "qwen3":
        w.add_tensor("blk.0.attn_q_norm.weight", np.ones(hd, np.float32))
        w.add_tensor("blk.0.attn_k_norm.weight", np.ones(hd, np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(dim, np.float32))
    w.add_tensor("blk.0.ffn_gate.weight", f32(ffn, dim))
    w.add_tensor("blk.0.ffn_up.weight", f32(ffn, dim))
    w.add_tensor("blk.0.ffn_down.weight", f32(dim, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


os.makedirs(out, exist_ok=True)
tiny(os.path.join(out, "tiny-llama.gguf"), "llama", "llama")
tiny(os.path.join(out, "tiny-qwen3.gguf"), "qwen3", "gpt2")

# llama-quantize's file, up to the start of its tensor data (header, metadata, tensor table).
here = os.path.dirname(os.path.abspath(__file__))
src = os.path.join(here, "..", "..", "tests", "data", "llama-q2_k.gguf")
r = gguf.GGUFReader(src)
cut = r.data_offset
with open(src, "rb") as f:
    head = f.read(cut)
with open(os.path.join(out, "llama-q2_k-no-data.gguf"), "wb") as f:
    f.write(head)
