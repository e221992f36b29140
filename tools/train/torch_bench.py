#!/usr/bin/python3
"""torch_bench.py - training throughput of the same llama in PyTorch (CPU).

The reference point for tkv-train's tokens/s: the same architecture (RMSNorm,
RoPE on adjacent pairs, GQA, SwiGLU, untied output), AdamW and gradient
clipping, float32, on random tokens. Not part of the build; needs python3-torch.

  /usr/bin/python3 tools/train/torch_bench.py --dim 128 --layers 4 --heads 4 --kv-heads 2 \
      --ff 384 --vocab 1024 --seq 1024 --batch 1 --steps 5 --threads 2
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        hd = a.dim // a.heads
        self.a, self.hd = a, hd
        self.attn_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.wq = torch.nn.Linear(a.dim, a.heads * hd, bias=False)
        self.wk = torch.nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wv = torch.nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wo = torch.nn.Linear(a.heads * hd, a.dim, bias=False)
        self.ffn_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.w_gate = torch.nn.Linear(a.dim, a.ff, bias=False)
        self.w_up = torch.nn.Linear(a.dim, a.ff, bias=False)
        self.w_down = torch.nn.Linear(a.ff, a.dim, bias=False)

    def forward(self, x, cos, sin, mask):
        a, hd = self.a, self.hd
        B, T, _ = x.shape
        h = rmsnorm(x, self.attn_norm)
        q = rope(self.wq(h).view(B, T, a.heads, hd), cos, sin).transpose(1, 2)
        k = rope(self.wk(h).view(B, T, a.kv_heads, hd), cos, sin).transpose(1, 2)
        v = self.wv(h).view(B, T, a.kv_heads, hd).transpose(1, 2)
        g = a.heads // a.kv_heads
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
        o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, a.heads * hd)
        x = x + self.wo(o)
        h = rmsnorm(x, self.ffn_norm)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


def rmsnorm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    # adjacent pairs (x[2i], x[2i+1]) rotated by pos * base^(-2i/hd)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embd = torch.nn.Embedding(a.vocab, a.dim)
        self.blocks = torch.nn.ModuleList([Block(a) for _ in range(a.layers)])
        self.norm = torch.nn.Parameter(torch.ones(a.dim))
        self.out = torch.nn.Linear(a.dim, a.vocab, bias=False)
        hd = a.dim // a.heads
        inv = 10000.0 ** (-torch.arange(0, hd, 2).float() / hd)
        ang = torch.arange(a.seq).float()[:, None] * inv[None, :]
        self.cos = ang.cos()[None, :, None, :]
        self.sin = ang.sin()[None, :, None, :]
        self.mask = torch.full((a.seq, a.seq), float("-inf")).triu(1)

    def forward(self, ids, tgt):
        x = self.embd(ids)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        logits = self.out(rmsnorm(x, self.norm))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(dim=128, layers=4, heads=4, kv_heads=2, ff=384, vocab=1024, seq=1024, batch=1,
                     steps=5, threads=2).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    m = Llama(a)
    n = sum(x.numel() for x in m.parameters())
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    times = []
    for step in range(a.steps + 1):
        t0 = time.time()
        opt.zero_grad()
        loss = m(ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        dt = time.time() - t0
        if step:  # the first step warms up
            times.append(dt)
        print(f"step {step} loss {loss.item():.4f} {a.batch * a.seq / dt:.0f} tok/s", flush=True)
    print(f"torch {torch.__version__}, {n} parameters, {a.threads} threads, batch {a.batch} x {a.seq}: "
          f"{a.batch * a.seq * len(times) / sum(times):.0f} tok/s (mean of {len(times)} steps)")


if __name__ == "__main__":
    main()
