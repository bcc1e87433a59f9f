#!/usr/bin/env python3
"""Writes a small random model with llama.cpp's own GGUF library (gguf-py), the way
llama.cpp's convert_hf_to_gguf.py writes a Hugging Face checkpoint of that architecture, so
that lattice's reader and engine are tested on files lattice did not write.

    PYTHONPATH=$(scripts/gguf_py.sh) python3 tests/gguf_py/write_model.py \
        --arch llama|mixtral|qwen3moe --type f32|q8_0|q4_0 --seed N -o out.gguf

What follows the converter (conversion/base.py, llama.py, qwen.py in llama.cpp's tree):
- GGUFWriter with the architecture name ("llama" for Mixtral too), the general.* keys, then
  the hyperparameter keys in the order TextModel.set_gguf_parameters adds them, then the
  vocabulary (SentencePiece "llama" for llama/Mixtral, byte-level BPE "gpt2" with the
  "qwen2" pre-tokenizer for Qwen3-MoE, as those models ship);
- tensors in the order the converter meets them: the safetensors order of the Hugging Face
  names (sorted), mapped to GGUF names; a layer's experts merged into one 3-D tensor when the
  last of them is seen (Mixtral: w1, w2, w3 -> gate, down, up; Qwen: down, gate, up);
- 1-D tensors, norms and the router (ffn_gate_inp) in F32, the other matrices in --type,
  quantized by gguf-py's quants module (the converter offers Q8_0; Q4_0 is the same path with
  the other block type, for the engine's Q4_0 kernels).
Weights are random (normal, std 1/sqrt(fan in); norms near 1) from --seed, so the HF -> GGUF
q/k permutation of llama is moot: the values are generated in GGUF layout.
"""
import argparse

import numpy as np

import gguf

SHAPES = {
    # dim, layers, heads, kv heads, head dim, ffn, vocab, experts, used, expert ffn
    "llama": dict(dim=256, layers=2, heads=4, kv=2, head_dim=64, ffn=512, experts=0, used=0, eff=0),
    "mixtral": dict(dim=256, layers=2, heads=4, kv=2, head_dim=64, ffn=256, experts=4, used=2, eff=256),
    "qwen3moe": dict(dim=256, layers=2, heads=4, kv=2, head_dim=64, ffn=512, experts=4, used=2, eff=128),
}
QTYPES = {"f32": gguf.GGMLQuantizationType.F32, "q8_0": gguf.GGMLQuantizationType.Q8_0,
          "q4_0": gguf.GGMLQuantizationType.Q4_0}
FILE_TYPES = {"f32": gguf.LlamaFileType.ALL_F32, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
              "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}


LETTERS = "etaoinshrdlcumwfgypbvkjxqz"


def words(n):
    """n distinct lower-case pieces of 3 to 6 letters, the same for every seed (real
    vocabularies average about 4 bytes a token; 1-2 byte pieces would make a 16-byte text
    comparison a 12-token one)."""
    rng = np.random.default_rng(12345)
    out, seen = [], set()
    while len(out) < n:
        w = "".join(LETTERS[i] for i in rng.integers(0, 10, int(rng.integers(3, 7))))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def spm_vocab(n):
    """<unk>, <s>, </s>, the 256 byte tokens, the letters, then word pieces (half with the
    SentencePiece space mark) with descending scores."""
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        toks.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    pieces = ["\u2581"] + list(LETTERS)
    pieces += [("\u2581" if i % 2 else "") + w for i, w in enumerate(words(n - len(toks) - len(pieces)))]
    for i, p in enumerate(pieces):
        toks.append(p)
        scores.append(-float(i + 1))
        types.append(1)
    return toks, scores, types


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    k = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe_vocab(n):
    """The 256 byte symbols, then merges that build words of 3 to 6 letters (each merge's
    result is a token, as BPE requires), then Qwen's three special tokens."""
    m = bytes_to_unicode()
    toks = [m[b] for b in range(256)]
    have = set(toks)
    merges = []
    for w in words(4 * n):
        w = ("\u0120" if len(merges) % 2 else "") + w
        cur = w[0]
        for ch in w[1:]:
            if cur + ch not in have:
                merges.append(f"{cur} {ch}")
                toks.append(cur + ch)
                have.add(cur + ch)
            cur += ch
        if len(toks) >= n - 3:
            break
    toks, merges = toks[: n - 3], merges[: n - 3 - 256]
    types = [1] * len(toks)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    toks += specials
    types += [3] * len(specials)
    return toks, types, merges, len(toks) - 3


class Model:
    def __init__(self, args):
        self.args = args
        self.s = dict(SHAPES[args.arch])
        for k in ("layers", "ffn", "eff"):
            if getattr(args, k):
                self.s[k] = getattr(args, k)
        self.rng = np.random.default_rng(args.seed)
        self.qtype = QTYPES[args.type]

    def mat(self, *shape):  # numpy shape: (..., out, in), as torch stores it
        return (self.rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(self, n):
        return (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32)

    def add(self, w, name, data, force_f32=False):
        if force_f32 or data.ndim <= 1 or name.endswith("_norm.weight") or self.qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, data.astype(np.float32))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, self.qtype), raw_dtype=self.qtype)


def write(args):
    m = Model(args)
    s = m.s
    arch = "llama" if args.arch == "mixtral" else args.arch
    w = gguf.GGUFWriter(args.output, arch)
    # general.* (the converter's metadata step)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(f"gguf-py random {args.arch}")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # TextModel.set_gguf_parameters, then the architecture's own keys
    w.add_block_count(s["layers"])
    w.add_context_length(2048)
    w.add_embedding_length(s["dim"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_rope_freq_base(1e6 if arch == "qwen3moe" else 1e4)
    w.add_layer_norm_rms_eps(1e-6 if arch == "qwen3moe" else 1e-5)
    if s["experts"]:
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["used"])
    if arch == "qwen3moe":
        w.add_key_length(s["head_dim"])
        w.add_value_length(s["head_dim"])
    w.add_file_type(FILE_TYPES[args.type])
    if arch == "llama":
        toks, scores, types = spm_vocab(args.vocab)
        w.add_vocab_size(len(toks))
        w.add_rope_dimension_count(s["head_dim"])
    else:
        w.add_expert_feed_forward_length(s["eff"])
    # vocabulary
    if arch == "llama":
        w.add_tokenizer_model("llama")
        w.add_token_list(toks)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
    else:
        toks, types, merges, first_special = bpe_vocab(args.vocab)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(toks)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_eos_token_id(first_special + 2)
        w.add_pad_token_id(first_special)
        w.add_bos_token_id(first_special)
        w.add_add_bos_token(False)
    n_vocab, dim, hd = len(toks), s["dim"], s["head_dim"]
    q_dim, kv_dim = s["heads"] * hd, s["kv"] * hd

    # Tensors in sorted Hugging Face order: lm_head, model.embed_tokens, model.layers.N.*, model.norm.
    m.add(w, "output.weight", m.mat(n_vocab, dim))
    m.add(w, "token_embd.weight", m.mat(n_vocab, dim))
    for b in range(s["layers"]):
        p = f"blk.{b}."
        if args.arch == "mixtral":
            # block_sparse_moe.experts.* (merged w1, w2, w3), block_sparse_moe.gate
            E, F = s["experts"], s["eff"]
            m.add(w, p + "ffn_gate_exps.weight", m.mat(E, F, dim))
            m.add(w, p + "ffn_down_exps.weight", m.mat(E, dim, F))
            m.add(w, p + "ffn_up_exps.weight", m.mat(E, F, dim))
            m.add(w, p + "ffn_gate_inp.weight", m.mat(E, dim), force_f32=True)
            m.add(w, p + "attn_norm.weight", m.norm(dim))
        else:
            m.add(w, p + "attn_norm.weight", m.norm(dim))  # input_layernorm
            if args.arch == "qwen3moe":
                E, F = s["experts"], s["eff"]
                m.add(w, p + "ffn_down_exps.weight", m.mat(E, dim, F))
                m.add(w, p + "ffn_gate_exps.weight", m.mat(E, F, dim))
                m.add(w, p + "ffn_up_exps.weight", m.mat(E, F, dim))
                m.add(w, p + "ffn_gate_inp.weight", m.mat(E, dim), force_f32=True)  # mlp.gate
            else:
                m.add(w, p + "ffn_down.weight", m.mat(dim, s["ffn"]))
                m.add(w, p + "ffn_gate.weight", m.mat(s["ffn"], dim))
                m.add(w, p + "ffn_up.weight", m.mat(s["ffn"], dim))
        m.add(w, p + "ffn_norm.weight", m.norm(dim))  # post_attention_layernorm
        if arch == "qwen3moe":
            m.add(w, p + "attn_k_norm.weight", m.norm(hd))
        m.add(w, p + "attn_k.weight", m.mat(kv_dim, dim))
        m.add(w, p + "attn_output.weight", m.mat(dim, q_dim))
        if arch == "qwen3moe":
            m.add(w, p + "attn_q_norm.weight", m.norm(hd))
        m.add(w, p + "attn_q.weight", m.mat(q_dim, dim))
        m.add(w, p + "attn_v.weight", m.mat(kv_dim, dim))
    m.add(w, "output_norm.weight", m.norm(dim))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=sorted(SHAPES), required=True)
    ap.add_argument("--type", choices=sorted(QTYPES), default="f32")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=0, help="override the block count")
    ap.add_argument("--ffn", type=int, default=0, help="override the dense feed-forward length")
    ap.add_argument("--eff", type=int, default=0, help="override the expert feed-forward length")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("-o", "--output", required=True)
    write(ap.parse_args())


if __name__ == "__main__":
    main()
