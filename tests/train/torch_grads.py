#!/usr/bin/python3
"""PyTorch oracle for lattice train's gradients: the Llama block written the usual way in torch,
in float64, on the weights and batch lattice wrote.

usage: torch_grads.py DIR
DIR/config.json: vocab dim layers heads kv_heads ffn rms_eps rope_theta batch seq, and
"tensors": [[name, rows, cols], ...] in the order of DIR/params.f32 (raw little-endian f32).
DIR/tokens.i32: batch*seq inputs then batch*seq targets. Writes DIR/grads.f64 (d mean loss /
d params, the same layout) and DIR/loss.txt."""
import json, os, sys
import numpy as np
import torch
import torch.nn.functional as F

d = sys.argv[1]
c = json.load(open(os.path.join(d, "config.json")))
V, D, L, H, KVH, FF = c["vocab"], c["dim"], c["layers"], c["heads"], c["kv_heads"], c["ffn"]
B, S, eps, theta = c["batch"], c["seq"], c["rms_eps"], c["rope_theta"]
HD = D // H
flat = np.fromfile(os.path.join(d, "params.f32"), dtype="<f4").astype(np.float64)
toks = np.fromfile(os.path.join(d, "tokens.i32"), dtype="<i4").astype(np.int64)
inp = torch.tensor(toks[: B * S]).view(B, S)
tgt = torch.tensor(toks[B * S:]).view(B, S)
P, off = {}, 0
for name, rows, cols in c["tensors"]:
    t = torch.tensor(flat[off: off + rows * cols]).view(rows, cols) if rows > 1 else torch.tensor(flat[off: off + cols])
    P[name] = t.clone().requires_grad_(True)
    off += rows * cols
assert off == flat.size

def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

inv = theta ** (-torch.arange(0, HD, 2, dtype=torch.float64) / HD)
ang = torch.outer(torch.arange(S, dtype=torch.float64), inv)
cos, sin = ang.cos(), ang.sin()
mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)

def rope(x):  # B, heads, S, HD; adjacent pairs as llama.cpp's normal RoPE
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

x = P["token_embd.weight"][inp]
for l in range(L):
    b = f"blk.{l}."
    h = rms(x, P[b + "attn_norm.weight"])
    q = (h @ P[b + "attn_q.weight"].T).view(B, S, H, HD).transpose(1, 2)
    k = (h @ P[b + "attn_k.weight"].T).view(B, S, KVH, HD).transpose(1, 2)
    v = (h @ P[b + "attn_v.weight"].T).view(B, S, KVH, HD).transpose(1, 2)
    k = k.repeat_interleave(H // KVH, dim=1)
    v = v.repeat_interleave(H // KVH, dim=1)
    att = (rope(q) @ rope(k).transpose(-1, -2)) / HD ** 0.5
    a = torch.softmax(att.masked_fill(mask, float("-inf")), -1) @ v
    x = x + a.transpose(1, 2).reshape(B, S, D) @ P[b + "attn_output.weight"].T
    h = rms(x, P[b + "ffn_norm.weight"])
    x = x + (F.silu(h @ P[b + "ffn_gate.weight"].T) * (h @ P[b + "ffn_up.weight"].T)) @ P[b + "ffn_down.weight"].T
logits = rms(x, P["output_norm.weight"]) @ P["output.weight"].T
loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
loss.backward()
np.concatenate([P[name].grad.reshape(-1).numpy() for name, _, _ in c["tensors"]]).astype("<f8").tofile(
    os.path.join(d, "grads.f64"))
open(os.path.join(d, "loss.txt"), "w").write(repr(loss.item()))
