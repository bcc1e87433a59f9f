#!/usr/bin/python3
"""PyTorch DDP twin of ../shared/bench/peers/torch_train_step.py: the same Llama block in torch.nn
(RMSNorm, RoPE attention with causal mask, SwiGLU), AdamW, trained data parallel with
torch.distributed (gloo backend) and DistributedDataParallel over RANKS processes of THREADS
threads each, on one host. Per-rank batch 16 (DDP's semantics: the global batch is RANKS x 16).
usage: torch_ddp_step.py [RANKS [THREADS [STEPS]]]   (defaults 2 1 10)
Rank 0 prints the median step time (ms) over STEPS steps after 2 warm-up steps, timed as the
peer times it (perf_counter around forward, backward with its all-reduce, and the AdamW step),
and the global samples/s. Shape: dim 256, 4 layers, 8 heads, ffn 768, vocab 4096, seq 256."""
import os, sys, time, socket, statistics
import torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist, torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

RANKS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
T = int(sys.argv[2]) if len(sys.argv) > 2 else 1
STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 10
D, L, H, FF, V, S, B = 256, 4, 8, 768, 4096, 256, 16
HD = D // H


class RMS(nn.Module):
    def __init__(s, d): super().__init__(); s.w = nn.Parameter(torch.ones(d))
    def forward(s, x): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * s.w


pos = torch.arange(S); inv = 1.0 / (10000 ** (torch.arange(0, HD, 2) / HD))
ang = torch.outer(pos, inv); cos, sin = ang.cos(), ang.sin()
MASK = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)


def rope(x):  # x: B,H,S,HD ; interleaved pairs
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.n1, s.n2 = RMS(D), RMS(D)
        s.q, s.k, s.v, s.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        s.g, s.u, s.d = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False), nn.Linear(FF, D, bias=False)

    def forward(s, x):
        h = s.n1(x); b = x.shape[0]
        q, k, v = (t(h).view(b, S, H, HD).transpose(1, 2) for t in (s.q, s.k, s.v))
        att = (rope(q) @ rope(k).transpose(-1, -2)) / HD ** 0.5  # torch 1.13 has no fused SDPA
        a = torch.softmax(att.masked_fill(MASK, float('-inf')), -1) @ v
        x = x + s.o(a.transpose(1, 2).reshape(b, S, D))
        h = s.n2(x); return x + s.d(F.silu(s.g(h)) * s.u(h))


class M(nn.Module):
    def __init__(s):
        super().__init__(); s.e = nn.Embedding(V, D); s.b = nn.ModuleList(Block() for _ in range(L))
        s.n = RMS(D); s.out = nn.Linear(D, V, bias=False)

    def forward(s, t):
        x = s.e(t)
        for b in s.b: x = b(x)
        return s.out(s.n(x))


def worker(rank, port, out):
    torch.set_num_threads(T)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    m = DDP(M()); opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1 + rank)  # each rank its own rows
    x = torch.randint(0, V, (B, S + 1), generator=g)
    ts = []
    for i in range(STEPS + 2):
        t0 = time.perf_counter()
        loss = F.cross_entropy(m(x[:, :-1]).reshape(-1, V), x[:, 1:].reshape(-1))
        opt.zero_grad(); loss.backward(); opt.step()
        if i >= 2: ts.append((time.perf_counter() - t0) * 1e3)
    if rank == 0:
        out.put((statistics.median(ts), loss.item()))
    dist.barrier(); dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    ctx = mp.get_context("spawn"); q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, port, q)) for r in range(RANKS)]
    for p in procs: p.start()
    med, loss = q.get(timeout=3600)
    for p in procs: p.join(timeout=120)
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad: sys.exit(f"torch_ddp_step: a rank failed ({bad})")
    print(f"torch {torch.__version__} ddp gloo {RANKS}x{T}: step {med:.1f} ms median, "
          f"{RANKS * B * 1000 / med:.1f} samples/s, loss {loss:.3f}")
